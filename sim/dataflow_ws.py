"""Weight-stationary mapping: weights (K x N) held in the array, inputs stream over M.

Spatial rows = K, spatial columns = N, temporal = M. Each weight is read from the filter SRAM once;
the input matrix is streamed once per column fold; every K-fold after the first reads and writes the
running psums of its M x C outputs in the psum buffer at psum bits (the part that does not fit
spills to DRAM).
"""

from __future__ import annotations

from ._mapping import LayerCounts, col_fold_sizes, compute_cycles, fits, fold_counts, spill_split
from .arch import Arch
from .workload import Layer


def map_layer(layer: Layer, arch: Arch) -> LayerCounts:
    """Counts for one GEMM of ``layer`` on a weight-stationary ``arch``."""
    M, N, K, b = layer.M, layer.N, layer.K, arch.bits
    kf, nf, eff = fold_counts(K, N, arch)
    folds = kf * nf
    cyc = compute_cycles(folds, M, arch, stationary_operand=True)
    ifmap_dram = M * K if fits(M * K, b.input, arch.sram_bytes("ifmap")) else M * K * nf
    cap = int(arch.sram_bytes("psum") * 8 // b.psum)
    resident, spilled = spill_split([M * c for c in col_fold_sizes(N, arch.cols)], cap)
    upd = kf - 1
    macs = M * N * K
    return LayerCounts(
        folds=folds,
        compute_cycles=cyc,
        mapping_efficiency=eff,
        macs=macs,
        ifmap_reads=M * K * nf,
        ifmap_dram=ifmap_dram,
        filter_reads=K * N,
        filter_dram=K * N,
        psum_reads=upd * resident,
        psum_writes=upd * resident,
        psum_dram_reads=upd * spilled,
        psum_dram_writes=upd * spilled,
        ofmap_writes=M * N,
        reg_writes=(("input", macs), ("accumulator", macs), ("weight", K * N)),
    )
