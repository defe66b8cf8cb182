"""Shared arithmetic of the three dataflow modules: mappings, folds, cycles, traffic, stalls, buffer checks.

A dataflow maps a GEMM (M x K) @ (K x N) onto an R x C array as (spatial rows S_r, spatial columns S_c,
temporal T): ws = (K, N, M), is = (K, M, N), os = (M, N, K).

**Mapping.** ws and is hold a stationary tile of R x C operands in the array and stream T; the running
psums of the T rows of one column fold are accumulated across the ceil(K/R) K-folds in the psum
buffer. A :class:`Mapping` cuts T into tiles of ``tile`` rows (``n_tiles`` of them) and picks the loop
order over (column folds, T tiles), K-folds always innermost so that running psums are only needed for
one tile x one column fold (``tile x C`` psums): ``"NMK"`` (ws) / ``"MNK"`` (is) put the column folds
outermost (SCALE-Sim's order, with one tile: the ``fixed`` mapping), ``"MNK"`` (ws) / ``"NMK"`` (is)
the T tiles. os keeps the psums in the PEs and has only an order over its (M, N) folds: ``"NM"``
(SCALE-Sim's, N folds outermost) or ``"MN"``.

**Stationary words.** With ``stationary_words = d`` (a PE register file of d words, ws/is), d
K-folds are held in the array at once and each streamed row visits them back to back, so a psum is
accumulated over d K-folds inside the array: ceil(ceil(K/R) / d) groups instead of ceil(K/R) folds
update the psum buffer, the array fills and drains once per group (the d weight tiles load in d x R
cycles), and each PE reads its stationary word on every MAC (a register-file read, priced by the
energy table). d = 1 is SCALE-Sim's PE.

**Compute cycles** (per GEMM; a layer with ``batch`` GEMMs runs them back to back: batch x this), with
F folds = ceil(S_r/R) * ceil(S_c/C) * n_tiles, each streaming its tile's T_f rows:

* ``scalesim`` timing (identical to SCALE-Sim v3 for one tile): folds run back to back,
  ws/is: sum_f (2R + C + T_f - 2) - 1, os: F * (R + C + T - 2) - 1. With d stationary words, F_s
  spatial folds and G = ceil(ceil(K/R) / d) * column folds fills (G = F_s for d = 1):
  n_tiles * (G * (R + C - 2) + F_s * R) + F_s * T - 1; double-buffered: R + G * n_tiles * (R + C - 2)
  + F_s * T.
* ``double-buffered``: ws/is preload the next fold's stationary tile during the current fold, so only
  the first R-cycle load is exposed: R + sum_f (T_f + R + C - 2); os double-buffers the
  accumulators so a fold's drain overlaps the next fold's compute: F * T + R + C - 2.

Each formula is the index (from 0) of the GEMM's last cycle turned into the reported number by
:func:`npukit.sim.datapath.cycle_count`, the one convention of the analytical model, the cycle-level
model and the RTL: ``scalesim`` keeps SCALE-Sim's convention (the index itself, equal to SCALE-Sim
exactly, including its one degenerate case: a 1x1 os array reports one cycle fewer than its MACs,
F*K - 1 cycles for F*K MACs); ``double-buffered`` counts cycles (the index + 1), never below MACs / PEs.

**Utilization** = MACs / (R * C * compute cycles), never above 1: the cycle counts keep SCALE-Sim's
convention, and :func:`utilization` divides by at least ceil(MACs / (R * C)) cycles, which only changes
that degenerate case (where it gives exactly 1).

**DRAM traffic on unique data** (elements; :mod:`npukit.sim._reuse` counts the distinct input elements
of conv im2col rows). An operand is fetched from DRAM once if all of its unique data fits its SRAM;
otherwise a block that stays resident across the loop that reuses it is fetched once per visit of
the enclosing loop, and a block that does not fit is refetched on every reuse:

* the streamed operand A (ws: the input X, rows = output pixels; is: the weights, rows = filters):
  tiles of A are reused across the column folds. Column folds outermost: refetched per column fold;
  tiles outermost: fetched once per tile when a tile's unique data fits.
* the stationary operand B (ws: the weights; is: the input): a column slab B[:, col fold] (K x C) is
  reused across the T tiles. Column folds outermost: fetched once when a slab fits; tiles outermost:
  refetched per tile.
* os: the input rows of an M fold are reused across the N folds, a weight slab of an N fold across the
  M folds, with the same rule for its two orders.
* running psums that do not fit the psum buffer spill to DRAM and are read and written there per
  K-fold; outputs are written to DRAM once.

Worked example (ResNet-18 layer1.0.conv1 on a 128x128 ws array, 8-bit data, 2 MiB buffers): X is
3,136 x 576 (1.8 M im2col elements) but its unique data is the 58x58x64 padded input, 215,296
elements, which fits: DRAM input reads = 215,296 (SCALE-Sim's own count), weights 36,864.

**Stalls** (both timings): the layer's DRAM bytes D are spread evenly over its folds, d = D / F bytes
each; at B bytes per cycle the first fold's data is exposed (d / B cycles) and each later fold
stalls by max(0, d / B - t_fold), t_fold = compute cycles / F (a prefetch that cannot keep ahead).
With ``bandwidth_mode = "calc"`` there are no stalls (SCALE-Sim's CALC mode).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from . import _reuse
from .arch import Arch
from .datapath import cycle_count
from .errors import ConfigError
from .psum_path import held_bits
from .workload import Layer

# ws/is orders: column folds outermost (SCALE-Sim's) or T tiles outermost; os orders over (M, N) folds
ORDERS = {"ws": ("NMK", "MNK"), "is": ("MNK", "NMK"), "os": ("NM", "MN")}


@dataclass(frozen=True)
class Mapping:
    """The tiling and loop order of one layer (see the module docstring).

    ``order``: loop nest from outer to inner over the GEMM dims (ws ``NMK``/``MNK``, is ``MNK``/``NMK``,
    os ``NM``/``MN``). ``tile``: rows of the temporal dim per tile (ws: output pixels, is: filters;
    0 = untiled; os: always 0). ``n_tiles``: how many tiles (filled in by the counts; a conv's pixel
    tiles follow its output rows, see :func:`npukit.sim._reuse.row_aligned_tiles`).
    """

    order: str
    tile: int = 0
    n_tiles: int = 1

    def label(self, dataflow: str) -> str:
        """Short text, e.g. ``NMK M/1`` (untiled) or ``MNK Mt=448 (x28)``."""
        if dataflow == "os":
            return self.order
        dim = "M" if dataflow == "ws" else "N"
        return f"{self.order} {dim}/1" if self.n_tiles == 1 else f"{self.order} {dim}t={self.tile} (x{self.n_tiles})"


@dataclass
class LayerCounts:
    """Per-GEMM element counts and cycles of one layer on one array (batch applied by the caller).

    Element counts, not bytes: SRAM reads/writes of each buffer (``*_reads`` = the array's reads,
    ``*_dram`` = elements filled from DRAM, i.e. the SRAM's writes), DRAM reads of each input operand,
    psum-buffer and spilled-psum traffic, ofmap SRAM writes and DRAM writes. ``ofmap_partial``: how many
    of the ofmap writes are partial sums (SCALE-Sim's memory mode drains every fold's outputs; priced
    at psum bits).
    """

    folds: int
    compute_cycles: int
    mapping_efficiency: float
    macs: int
    ifmap_reads: int
    ifmap_dram: int
    filter_reads: int
    filter_dram: int
    psum_reads: int
    psum_writes: int
    psum_dram_reads: int
    psum_dram_writes: int
    ofmap_writes: int
    ofmap_dram: int
    reg_writes: tuple[tuple[str, int], ...]
    mapping: Mapping
    ofmap_partial: int = 0
    scalesim_stall_cycles: int = 0  # SCALE-Sim memory mode: its stall cycles (CALC: write buffer; USER: all)


def n_folds(extent: int, width: int) -> int:
    return -(-extent // width)


def utilization(macs: int, compute_cycles: int, rows: int, cols: int) -> float:
    """MACs per PE per compute cycle, in [0, 1] (see the module docstring: the cycles are taken as at
    least ceil(MACs / (rows * cols)), the fewest any array needs)."""
    if macs <= 0:
        return 0.0
    pes = rows * cols
    return macs / (pes * max(compute_cycles, -(-macs // pes)))


def fold_counts(s_r: int, s_c: int, arch: Arch) -> tuple[int, int, float]:
    """(row folds, column folds, mapping efficiency) for spatial extents ``s_r`` x ``s_c``."""
    fr = n_folds(s_r, arch.rows)
    fc = n_folds(s_c, arch.cols)
    eff = (s_r / (fr * arch.rows)) * (s_c / (fc * arch.cols))
    return fr, fc, eff


def fits(elements: int, bits: int, capacity_bytes: float) -> bool:
    return elements * bits <= capacity_bytes * 8


def stationary_cycles(spatial_folds: int, temporal: int, n_tiles: int, arch: Arch, groups: int | None = None) -> int:
    """ws/is compute cycles: ``spatial_folds`` = row x column folds, each run once per T tile, the T
    tiles together streaming ``temporal`` rows; ``groups``: how many times the array fills and drains
    (row folds held together by ``stationary_words``, times column folds; default one per spatial
    fold). See the module docstring."""
    r, c = arch.rows, arch.cols
    g = spatial_folds if groups is None else groups
    if arch.timing == "scalesim":
        last = n_tiles * (g * (r + c - 2) + spatial_folds * r) + spatial_folds * temporal - 1
    else:
        last = r + g * n_tiles * (r + c - 2) + spatial_folds * temporal - 1
    return cycle_count(last, arch.timing)


def os_cycles(folds: int, temporal: int, arch: Arch) -> int:
    """os compute cycles: ``folds`` (M x N) folds of ``temporal`` (K) steps each (see the module docstring)."""
    r, c = arch.rows, arch.cols
    if arch.timing == "scalesim":
        last = folds * (r + c + temporal - 2) - 1
    else:
        last = folds * temporal + r + c - 3
    return cycle_count(last, arch.timing)


def stall_cycles(dram_bytes: float, folds: int, cycles: int, arch: Arch) -> int:
    """DRAM stall cycles for a layer (see module docstring)."""
    if dram_bytes <= 0 or arch.bandwidth_mode == "calc":
        return 0
    bw = arch.dram_bandwidth_bytes_per_cycle
    per_fold = dram_bytes / folds / bw
    t_fold = cycles / folds
    return math.ceil(per_fold + (folds - 1) * max(0.0, per_fold - t_fold))


def psum_residency(tile_sizes: tuple[tuple[int, int], ...], c_sizes: tuple[tuple[int, int], ...], cap: int) -> tuple[int, int]:
    """(resident, spilled) running psums summed over (T tile, column fold) pairs.

    ``tile_sizes`` / ``c_sizes``: (size, how many) of the T tiles and of the column folds; a pair
    holds tile x cols running psums, of which ``cap`` (psum-buffer capacity in psums) stay on chip.
    """
    resident = spilled = 0
    for t, nt in tile_sizes:
        for c, nc in c_sizes:
            e = t * c
            keep = min(e, cap)
            resident += nt * nc * keep
            spilled += nt * nc * (e - keep)
    return resident, spilled


def sizes(extent: int, width: int) -> tuple[tuple[int, int], ...]:
    """(size, count) of the chunks of ``width`` over ``extent``: full chunks, then the remainder."""
    full, rem = divmod(extent, width)
    out = ((width, full),) if full else ()
    return out + (((rem, 1),) if rem else ())


# ---------------------------------------------------------------------------------- operands
class Operand:
    """Unique-data view of one GEMM operand as rows x K (``rows`` = M pixels of the input X, or N
    filters of the weights W^T); ``conv`` rows overlap (:mod:`npukit.sim._reuse`)."""

    def __init__(self, layer: Layer, is_input: bool) -> None:
        self.layer = layer
        self.conv = layer.conv is not None and is_input
        self.rows = layer.M if is_input else layer.N
        self.K = layer.K
        self.ow = (layer.conv[1] - layer.conv[3]) // layer.conv[6] + 1 if self.conv else 0

    def total(self) -> int:
        return _reuse.unique_total(self.layer) if self.conv else self.rows * self.K

    def chunks(self, width: int) -> tuple[int, int]:
        """(sum, largest) unique elements over consecutive row chunks of ``width`` rows (straddling
        output rows, as the array's column folds do)."""
        if not self.conv:
            return self.rows * self.K, min(width, self.rows) * self.K
        total = biggest = 0
        for a, b in _reuse.tiles(self.rows, width):
            u = _reuse.unique_rows(self.layer, a, b)
            total += u
            biggest = max(biggest, u)
        return total, biggest

    def tiles(self, tile: int) -> tuple[int, int]:
        """(sum, largest) unique elements over the mapper's row tiles of ``tile`` rows."""
        if not self.conv:
            return self.rows * self.K, min(tile, self.rows) * self.K
        return _reuse.unique_over_tiles(self.layer, tile)

    def n_tiles(self, tile: int) -> int:
        if self.conv:
            return _reuse.n_row_aligned_tiles(self.rows, self.ow, tile)
        return n_folds(self.rows, tile)

    def tile_sizes(self, tile: int) -> tuple[tuple[int, int], ...]:
        """(rows, count) of the row tiles of ``tile`` rows."""
        if not self.conv or tile >= self.rows:
            return sizes(self.rows, min(tile, self.rows))
        return _reuse.row_aligned_tile_sizes(self.rows, self.ow, tile)

    def align(self, tile: int) -> int:
        """``tile`` made legal: a multiple of the output width when it spans output rows (conv)."""
        tile = max(1, min(tile, self.rows))
        if self.conv and self.ow <= tile < self.rows:
            tile = (tile // self.ow) * self.ow
        return tile


def stationary_counts(layer: Layer, arch: Arch, mapping: Mapping, ws: bool) -> LayerCounts:
    """Counts for a weight-stationary (``ws``) or input-stationary layer under ``mapping``.

    ws: A = input X (rows M, streamed), B = weights (stationary, column folds over N);
    is: A = weights W^T (rows N, streamed), B = input X^T (stationary, column folds over M).
    """
    M, N, K, b = layer.M, layer.N, layer.K, arch.bits
    A = Operand(layer, is_input=ws)
    B = Operand(layer, is_input=not ws)
    T, S_c = A.rows, B.rows
    a_bits, b_bits = (b.input, b.weight) if ws else (b.weight, b.input)
    a_buf, b_buf = ("ifmap", "filter") if ws else ("filter", "ifmap")
    a_cap, b_cap = arch.sram_bytes(a_buf), arch.sram_bytes(b_buf)
    kf, cf, eff = fold_counts(K, S_c, arch)
    tile = A.align(mapping.tile or T)
    tiles = A.n_tiles(tile)
    col_outer = mapping.order == ORDERS["ws" if ws else "is"][0]
    macs = M * N * K
    groups = n_folds(kf, arch.stationary_words)  # K-folds held in the PEs at once
    cyc = stationary_cycles(kf * cf, T, tiles, arch, groups * cf)
    # DRAM reads on unique data
    if fits(A.total(), a_bits, a_cap):
        a_dram = A.total()
    else:
        a_sum, a_big = A.tiles(tile)
        a_dram = a_sum if (not col_outer and fits(a_big, a_bits, a_cap)) else cf * a_sum
    if fits(B.total(), b_bits, b_cap):
        b_dram = B.total()
    else:
        b_sum, b_big = B.chunks(arch.cols)
        b_dram = b_sum if (col_outer and fits(b_big, b_bits, b_cap)) else tiles * b_sum
    cap = int(arch.sram_bytes("psum") * 8 // held_bits(arch))
    resident, spilled = psum_residency(A.tile_sizes(tile), sizes(S_c, arch.cols), cap)
    upd = groups - 1  # a psum leaves the array once per group of K-folds
    counts = dict(
        folds=kf * cf * tiles,
        compute_cycles=cyc,
        mapping_efficiency=eff,
        macs=macs,
        psum_reads=upd * resident,
        psum_writes=upd * resident,
        psum_dram_reads=upd * spilled,
        psum_dram_writes=upd * spilled,
        ofmap_writes=M * N,
        ofmap_dram=M * N,
        mapping=Mapping(mapping.order, tile if tiles > 1 else 0, tiles),
    )
    if ws:
        counts.update(ifmap_reads=M * K * cf, ifmap_dram=a_dram, filter_reads=K * N * tiles, filter_dram=b_dram,
                      reg_writes=(("input", macs), ("accumulator", macs), ("weight", K * N * tiles)))
    else:
        counts.update(ifmap_reads=M * K * tiles, ifmap_dram=b_dram, filter_reads=K * N * cf, filter_dram=a_dram,
                      reg_writes=(("weight", macs), ("accumulator", macs), ("input", M * K * tiles)))
    return LayerCounts(**counts)


def os_counts(layer: Layer, arch: Arch, mapping: Mapping) -> LayerCounts:
    """Counts for an output-stationary layer under ``mapping`` (order ``NM`` or ``MN``)."""
    M, N, K, b = layer.M, layer.N, layer.K, arch.bits
    X = Operand(layer, is_input=True)
    mf, nf, eff = fold_counts(M, N, arch)
    macs = M * N * K
    cyc = os_cycles(mf * nf, K, arch)
    n_outer = mapping.order == "NM"
    cap_i, cap_f = arch.sram_bytes("ifmap"), arch.sram_bytes("filter")
    if fits(X.total(), b.input, cap_i):
        x_dram = X.total()
    else:
        x_sum, x_big = X.chunks(arch.rows)
        x_dram = x_sum if (not n_outer and fits(x_big, b.input, cap_i)) else nf * x_sum
    if fits(K * N, b.weight, cap_f):
        w_dram = K * N
    else:
        w_dram = K * N if (n_outer and fits(K * min(N, arch.cols), b.weight, cap_f)) else mf * K * N
    return LayerCounts(
        folds=mf * nf,
        compute_cycles=cyc,
        mapping_efficiency=eff,
        macs=macs,
        ifmap_reads=M * K * nf,
        ifmap_dram=x_dram,
        filter_reads=K * N * mf,
        filter_dram=w_dram,
        psum_reads=0,
        psum_writes=0,
        psum_dram_reads=0,
        psum_dram_writes=0,
        ofmap_writes=M * N,
        ofmap_dram=M * N,
        reg_writes=(("input", macs), ("weight", macs), ("accumulator", macs)),
        mapping=Mapping(mapping.order),
    )


def check_buffers(arch: Arch) -> None:
    """Raise :class:`ConfigError` when a buffer cannot hold one fold's working set.

    Minimum per buffer: the stationary operand's buffer holds one R x C tile (two in
    ``double-buffered`` timing); every streaming buffer holds one array-edge vector; the psum
    buffer holds one row of C running psums (ws/is); the ofmap buffer holds one R x C tile (os) or
    one row of C outputs (ws/is). ``memory = "scalesim"`` checks nothing: SCALE-Sim 3.0.0 runs any
    buffer size (a smaller one only drains or re-fetches more often), and so does its mode here.
    """
    if arch.memory == "scalesim":
        return
    r, c, b = arch.rows, arch.cols, arch.bits
    tiles = 2 if arch.timing == "double-buffered" else 1
    need: dict[str, tuple[int, int, str]] = {}
    if arch.dataflow == "ws":
        need["filter"] = (tiles * r * c, b.weight, f"{tiles} x {r}x{c} weight tile")
        need["ifmap"] = (r, b.input, f"one {r}-element input vector")
        need["psum"] = (c, held_bits(arch), f"one row of {c} psums")
        need["ofmap"] = (c, b.output, f"one row of {c} outputs")
    elif arch.dataflow == "is":
        need["ifmap"] = (tiles * r * c, b.input, f"{tiles} x {r}x{c} input tile")
        need["filter"] = (r, b.weight, f"one {r}-element weight vector")
        need["psum"] = (c, held_bits(arch), f"one row of {c} psums")
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
