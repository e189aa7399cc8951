"""decodescope: tell a real decode-throughput regression from a caliber difference."""

__version__ = "0.1.0"
