"""Pure analysis over traces and engine windows."""
