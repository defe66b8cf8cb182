"""Input-stationary mapping: inputs (K x M) held in the array, weights stream over N.

Spatial rows = K, spatial columns = M, temporal = N. A fold holds an R x C tile of the input (C
output pixels' im2col columns); the weights' K-slice streams through it (one N tile at a time) and
every K-fold after the first reads and writes the running psums of its tile x C outputs in the psum
buffer at psum bits. Loop orders: ``MNK`` (column folds over M outermost: SCALE-Sim's order, the
``fixed`` mapping with one N tile) and ``NMK`` (N tiles outermost). ``is(M, N, K)`` has the compute
cycles of ``ws(N, M, K)`` with the operands' roles swapped. Traffic rules: :mod:`npukit.sim._mapping`.
"""

from __future__ import annotations

from ._mapping import LayerCounts, Mapping, stationary_counts
from .arch import Arch
from .workload import Layer

FIXED = Mapping("MNK")


def map_layer(layer: Layer, arch: Arch, mapping: Mapping | None = None) -> LayerCounts:
    """Counts for one GEMM of ``layer`` on an input-stationary ``arch`` (default: the fixed mapping)."""
    return stationary_counts(layer, arch, mapping or FIXED, ws=False)
