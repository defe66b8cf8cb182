"""Output-stationary mapping: outputs (M x N) accumulate in the PEs, both operands stream over K.

Spatial rows = M, spatial columns = N, temporal = K. Psums never leave the array (no psum-buffer
traffic); the inputs are streamed once per column (N) fold and the weights once per row (M) fold.
Loop orders: ``NM`` (N folds outermost: SCALE-Sim's order and the ``fixed`` mapping; a weight slab
stays resident across the M folds) and ``MN`` (M folds outermost; an input slab stays resident across
the N folds). Traffic rules: :mod:`npukit.sim._mapping`.
"""

from __future__ import annotations

from ._mapping import LayerCounts, Mapping, os_counts
from .arch import Arch
from .workload import Layer

FIXED = Mapping("NM")


def map_layer(layer: Layer, arch: Arch, mapping: Mapping | None = None) -> LayerCounts:
    """Counts for one GEMM of ``layer`` on an output-stationary ``arch`` (default: the fixed mapping)."""
    return os_counts(layer, arch, mapping or FIXED)
