"""Weight-stationary mapping: weights (K x N) held in the array, inputs stream over M.

Spatial rows = K, spatial columns = N, temporal = M. A fold holds an R x C weight tile; the rows of
the input's K-slice stream through it (one M tile at a time) and every K-fold after the first reads
and writes the running psums of its tile x C outputs in the psum buffer at psum bits (the part that
does not fit spills to DRAM). Loop orders: ``NMK`` (column folds outermost: SCALE-Sim's order, the
``fixed`` mapping with one M tile) and ``MNK`` (M tiles outermost: an input tile stays resident
across the column folds). Traffic rules: :mod:`npukit.sim._mapping`.
"""

from __future__ import annotations

from ._mapping import LayerCounts, Mapping, stationary_counts
from .arch import Arch
from .workload import Layer

FIXED = Mapping("NMK")


def map_layer(layer: Layer, arch: Arch, mapping: Mapping | None = None) -> LayerCounts:
    """Counts for one GEMM of ``layer`` on a weight-stationary ``arch`` (default: the fixed mapping)."""
    return stationary_counts(layer, arch, mapping or FIXED, ws=True)
