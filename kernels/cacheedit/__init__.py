"""CacheEdit sparse-token kernels: gather + adaLN modulation, residual scatter, K/V cache update.

Entry points in :mod:`.ops` pick Triton on CUDA tensors and the torch reference on CPU.
"""

from .ops import (
    active_attention,
    gather_modulate,
    gather_modulate_ref,
    kv_update,
    kv_update_ref,
    scatter_residual,
    scatter_residual_ref,
)

__all__ = [
    "active_attention", "gather_modulate", "gather_modulate_ref", "kv_update", "kv_update_ref",
    "scatter_residual", "scatter_residual_ref",
]
