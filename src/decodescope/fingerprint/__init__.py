"""fingerprint."""
