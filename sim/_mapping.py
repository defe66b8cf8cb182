"""Shared arithmetic of the three dataflow modules: folds, cycles, stalls and buffer checks.

A dataflow maps a GEMM (M x K) @ (K x N) onto an R x C array as (spatial rows S_r, spatial
columns S_c, temporal T): ws = (K, N, M), is = (K, M, N), os = (M, N, K).

Compute cycles (per GEMM; a layer with ``batch`` GEMMs runs them back to back: batch x this):

* ``scalesim`` (identical to SCALE-Sim v3): F = ceil(S_r/R) * ceil(S_c/C) folds run back to back,
  ws/is: F * (2R + C + T - 2) - 1, os: F * (R + C + T - 2) - 1.
* ``double-buffered``: ws/is preload the next fold's stationary tile during the current fold, so
  only the first R-cycle load is exposed: R + F * (T + R + C - 2) - 1; os double-buffers the
  accumulators so a fold's drain overlaps the next fold's compute: F * T + R + C - 2 - 1.

Stalls (both modes): the layer's DRAM bytes D are spread evenly over its folds, d = D / F bytes
each; at B bytes per cycle the first fold's data is exposed (d / B cycles) and each later fold
stalls by max(0, d / B - t_fold), t_fold = compute cycles / F (a prefetch that cannot keep ahead).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .arch import Arch
from .errors import ConfigError


@dataclass
class LayerCounts:
    """Per-GEMM element counts and cycles of one layer on one array (batch applied by the caller)."""

    folds: int
    compute_cycles: int
    mapping_efficiency: float
    macs: int
    # element accesses (not bytes), keyed by buffer
    ifmap_reads: int
    ifmap_dram: int
    filter_reads: int
    filter_dram: int
    psum_reads: int
    psum_writes: int
    psum_dram_reads: int
    psum_dram_writes: int
    ofmap_writes: int
    # PE register writes: (bits, count)
    reg_writes: tuple[tuple[str, int], ...]


def fold_counts(s_r: int, s_c: int, arch: Arch) -> tuple[int, int, float]:
    """(row folds, column folds, mapping efficiency) for spatial extents ``s_r`` x ``s_c``."""
    fr = -(-s_r // arch.rows)
    fc = -(-s_c // arch.cols)
    eff = (s_r / (fr * arch.rows)) * (s_c / (fc * arch.cols))
    return fr, fc, eff


def compute_cycles(folds: int, temporal: int, arch: Arch, stationary_operand: bool) -> int:
    """Compute cycles of one GEMM (see module docstring). ``stationary_operand``: ws/is (True) or os."""
    r, c = arch.rows, arch.cols
    if arch.timing == "scalesim":
        per = (2 * r + c + temporal - 2) if stationary_operand else (r + c + temporal - 2)
        return folds * per - 1
    if stationary_operand:
        return r + folds * (temporal + r + c - 2) - 1
    return folds * temporal + r + c - 3


def stall_cycles(dram_bytes: float, folds: int, cycles: int, arch: Arch) -> int:
    """DRAM stall cycles for a layer (see module docstring)."""
    if dram_bytes <= 0:
        return 0
    bw = arch.dram_bandwidth_bytes_per_cycle
    per_fold = dram_bytes / folds / bw
    t_fold = cycles / folds
    return math.ceil(per_fold + (folds - 1) * max(0.0, per_fold - t_fold))


def spill_split(per_fold_elems: list[int], capacity_elems: int) -> tuple[int, int]:
    """(resident, spilled) running-psum elements summed over output folds."""
    resident = sum(min(e, capacity_elems) for e in per_fold_elems)
    return resident, sum(per_fold_elems) - resident


def col_fold_sizes(extent: int, width: int) -> list[int]:
    """Used columns of each fold along an extent: [width, width, ..., remainder]."""
    full, rem = divmod(extent, width)
    return [width] * full + ([rem] if rem else [])


def fits(elements: int, bits: int, capacity_bytes: float) -> bool:
    return elements * bits <= capacity_bytes * 8


def check_buffers(arch: Arch) -> None:
    """Raise :class:`ConfigError` when a buffer cannot hold one fold's working set.

    Minimum per buffer: the stationary operand's buffer holds one R x C tile (two in
    ``double-buffered`` timing); every streaming buffer holds one array-edge vector; the psum
    buffer holds one row of C running psums (ws/is); the ofmap buffer holds one R x C tile (os) or
    one row of C outputs (ws/is).
    """
    r, c, b = arch.rows, arch.cols, arch.bits
    tiles = 2 if arch.timing == "double-buffered" else 1
    need: dict[str, tuple[int, int, str]] = {}
    if arch.dataflow == "ws":
        need["filter"] = (tiles * r * c, b.weight, f"{tiles} x {r}x{c} weight tile")
        need["ifmap"] = (r, b.input, f"one {r}-element input vector")
        need["psum"] = (c, b.psum, f"one row of {c} psums")
        need["ofmap"] = (c, b.output, f"one row of {c} outputs")
    elif arch.dataflow == "is":
        need["ifmap"] = (tiles * r * c, b.input, f"{tiles} x {r}x{c} input tile")
        need["filter"] = (r, b.weight, f"one {r}-element weight vector")
        need["psum"] = (c, b.psum, f"one row of {c} psums")
        need["ofmap"] = (c, b.output, f"one row of {c} outputs")
    else:
        need["ifmap"] = (r, b.input, f"one {r}-element input vector")
        need["filter"] = (c, b.weight, f"one {c}-element weight vector")
        need["ofmap"] = (r * c, b.output, f"one {r}x{c} output tile")
    for buf, (elems, bits, what) in need.items():
        cap = arch.sram_bytes(buf)
        if not fits(elems, bits, cap):
            kib = math.ceil(elems * bits / 8 / 1024 * 1000) / 1000
            raise ConfigError(
                f"{buf} SRAM ({getattr(arch.sram_kib, buf):g} KiB) is too small for one fold "
                f"({what} at {bits} bits = {kib:g} KiB); set sram_kib.{buf} >= {kib:g}"
            )
