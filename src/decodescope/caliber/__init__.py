"""caliber."""
