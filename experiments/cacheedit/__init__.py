"""cacheedit (experiments)."""
