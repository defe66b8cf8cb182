"""omnimoe (kernels)."""
