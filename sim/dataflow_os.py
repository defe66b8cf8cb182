"""Output-stationary mapping: outputs (M x N) accumulate in the PEs, both operands stream over K.

Spatial rows = M, spatial columns = N, temporal = K. Psums never leave the array (no psum-buffer
traffic); inputs are streamed once per column fold and weights once per row fold.
"""

from __future__ import annotations

from ._mapping import LayerCounts, compute_cycles, fits, fold_counts
from .arch import Arch
from .workload import Layer


def map_layer(layer: Layer, arch: Arch) -> LayerCounts:
    """Counts for one GEMM of ``layer`` on an output-stationary ``arch``."""
    M, N, K, b = layer.M, layer.N, layer.K, arch.bits
    mf, nf, eff = fold_counts(M, N, arch)
    folds = mf * nf
    cyc = compute_cycles(folds, K, arch, stationary_operand=False)
    ifmap_dram = M * K if fits(M * K, b.input, arch.sram_bytes("ifmap")) else M * K * nf
    filter_dram = K * N if fits(K * N, b.weight, arch.sram_bytes("filter")) else K * N * mf
    macs = M * N * K
    return LayerCounts(
        folds=folds,
        compute_cycles=cyc,
        mapping_efficiency=eff,
        macs=macs,
        ifmap_reads=M * K * nf,
        ifmap_dram=ifmap_dram,
        filter_reads=K * N * mf,
        filter_dram=filter_dram,
        psum_reads=0,
        psum_writes=0,
        psum_dram_reads=0,
        psum_dram_writes=0,
        ofmap_writes=M * N,
        reg_writes=(("input", macs), ("weight", macs), ("accumulator", macs)),
    )
