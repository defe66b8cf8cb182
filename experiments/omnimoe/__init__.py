"""omnimoe (experiments)."""
