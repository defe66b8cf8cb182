"""Input-stationary mapping: inputs (K x M) held in the array, weights stream over N.

Spatial rows = K, spatial columns = M, temporal = N. Each input is read from the ifmap SRAM once;
the weights are streamed once per column (M) fold; every K-fold after the first reads and writes
the running psums of its N x C outputs in the psum buffer at psum bits.
"""

from __future__ import annotations

from ._mapping import LayerCounts, col_fold_sizes, compute_cycles, fits, fold_counts, spill_split
from .arch import Arch
from .workload import Layer


def map_layer(layer: Layer, arch: Arch) -> LayerCounts:
    """Counts for one GEMM of ``layer`` on an input-stationary ``arch``."""
    M, N, K, b = layer.M, layer.N, layer.K, arch.bits
    kf, mf, eff = fold_counts(K, M, arch)
    folds = kf * mf
    cyc = compute_cycles(folds, N, arch, stationary_operand=True)
    filter_dram = K * N if fits(K * N, b.weight, arch.sram_bytes("filter")) else K * N * mf
    cap = int(arch.sram_bytes("psum") * 8 // b.psum)
    resident, spilled = spill_split([N * c for c in col_fold_sizes(M, arch.cols)], cap)
    upd = kf - 1
    macs = M * N * K
    return LayerCounts(
        folds=folds,
        compute_cycles=cyc,
        mapping_efficiency=eff,
        macs=macs,
        ifmap_reads=M * K,
        ifmap_dram=M * K,
        filter_reads=K * N * mf,
        filter_dram=filter_dram,
        psum_reads=upd * resident,
        psum_writes=upd * resident,
        psum_dram_reads=upd * spilled,
        psum_dram_writes=upd * spilled,
        ofmap_writes=M * N,
        reg_writes=(("weight", macs), ("accumulator", macs), ("input", M * K)),
    )
