"""npukit.kernels: Triton kernels with plain-torch reference paths (chosen automatically on CPU)."""
