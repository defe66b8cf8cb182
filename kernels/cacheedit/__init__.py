"""cacheedit (kernels)."""
