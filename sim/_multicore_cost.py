"""One operator's share on one core of a multi-core NPU: the single-core model's counts, edited for where the
operands come from and go to (DRAM, the shared memory, another core, the core's own buffers).

A GEMM split across ``c`` cores on ``M`` (or the batch, when it divides), ``N`` or ``K`` gives each core the
sub-GEMM ``ceil(M/c) x N x K`` (etc.), costed by :func:`npukit.sim.simulator.map_layer` on that core's arch with
its share of the DRAM bandwidth. A K-split leaves partial sums: every core but the reducer sends its
``M x N`` partial sums (``bits.psum_buffer`` each) over the interconnect instead of writing outputs to DRAM, and the
reducer adds them (``(c - 1) M N`` adds at ``bits.psum_buffer``, the running-psum width of
:mod:`npukit.sim.psum_path`). A fused input (the producer's output kept on
chip) is read from the shared memory (over the interconnect) instead of DRAM, or from the core's own buffer when
the producer ran on this core with the same rows (``local``); a fused output is written there instead of DRAM.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from . import vector_unit
from ._accounting import _final_dram, layer_records, traffic_bytes
from ._mapping import stall_cycles
from ._multicore_balance import whole_bounds
from ._multicore_nest import nest_floor, nest_share
from .arch import Arch
from .energy import EnergyTable
from .hardware import Hardware
from .schedule import grid
from .simulator import map_layer_each, map_layer_energy_without
from .workload import Layer, VectorOp

Record = tuple[str, str, tuple[int, ...], float]
SHARED = "shared_memory"
LINK = "interconnect"
BUS = "bus"  # the second interconnect to the simd core (MultiCoreArch.bus)


@dataclass
class Part:
    """One core's share of one operator (cycles in clock cycles, bytes in bytes)."""

    core: int
    compute: float
    stall: float
    link_cycles: float
    macs: int
    records: list[Record] = field(default_factory=list)
    dram_bytes: float = 0.0
    link_bytes: float = 0.0
    traffic: dict[str, float] = field(default_factory=dict)
    vector_busy: float = 0.0
    folds: int = 1  # one GEMM's folds (for re-pricing the stalls at another DRAM bandwidth)
    batch: int = 1
    write_bytes: float = 0.0  # final outputs written to DRAM (bytes, all of the batch)
    k_folds: int = 1  # folds whose partial sums make one output final (ws/is: the K folds; os: 1)
    mapping: str = ""  # the single-core mapping of this share (loop order and tiles, e.g. ``NMK Mt=128 (x2)``)
    filter_link_cycles: float = 0.0  # of link_cycles: receiving a fused right operand made by an earlier GEMM
    filter_buffer_cycles: float = 0.0  # link cycles that fill the core's filter buffer (the most it can take ahead)
    bus_bytes: float = 0.0  # of link_bytes: those that crossed the bus (MultiCoreArch.bus), not the links
    # bytes of each operand (``ifmap``, ``filter``) received by multicast that this core's mapping would read itself
    received: dict[str, float] = field(default_factory=dict)

    def restall(self, arch: Arch) -> None:
        """Recompute the DRAM stalls at ``arch``'s DRAM bandwidth (the share this core gets)."""
        if self.dram_bytes and self.macs:
            n = self.batch
            self.stall = n * stall_cycles(self.dram_bytes / n, self.folds, int(self.compute // n), arch)

    @property
    def busy(self) -> float:
        """Cycles the core is busy: compute and DRAM stalls, or the interconnect transfer when it is longer."""
        return max(self.compute + self.stall, self.link_cycles)

    @property
    def link_exposed(self) -> float:
        """Interconnect cycles not hidden behind compute and DRAM."""
        return max(0.0, self.link_cycles - self.compute - self.stall)


_MULTICAST = {"N": "ifmap", "M": "filter"}  # split dim -> the operand every core of the split needs whole


def multicast(dim: str, i: int) -> str:
    """What core ``i`` of a split on ``dim`` receives in a DRAM fetch another core of the split made (``ifmap``,
    ``filter``, both joined by ``+``, or nothing): on ``N`` the input, on ``M`` the weights, all but the first core;
    on a grid ``M{a}N{b}`` its row band's input from the band's first core and its column part's weights from the
    first band's core."""
    g = grid(dim)
    if g is None:
        return _MULTICAST.get(dim, "") if i > 0 else ""
    return "+".join(k for k, on in (("ifmap", i % g[1] > 0), ("filter", i // g[1] > 0)) if on)


def received(layer: Layer, dim: str, c: int, live: list[int], bounds: tuple[int, ...] | None = None) -> dict[int, str]:
    """What each working share (``live``: their indices) of a ``c``-way split of ``layer`` on ``dim`` (cut at
    ``bounds``, default even) receives in another share's DRAM fetch: :func:`multicast` at its :func:`lead_ranks`
    rank, except that where the split cuts the batch, a core's weights or keys (one right operand per ``shared``
    batch elements) come by multicast only when earlier shares of its column part read all of the groups it needs;
    else it reads its own. Before 2026-12-07 every core of a batch split took them from the first core's fetch: the
    heads of an attention GEMM on four cores moved 589,824 DRAM bytes where their operands hold 786,432."""
    lead = lead_ranks(dim, live)
    g = grid(dim)
    rows, ways = ("M", g[0]) if g is not None else (dim, c)
    ext = split_extent(layer, rows, ways) if rows == "M" else None
    read_to: dict[int, int] = {}  # per column part: the groups read so far, 0 up to (shares come in batch order)
    out: dict[int, str] = {}
    for i in live:
        got = multicast(dim, lead[i])
        if ext is not None and ext[0] == "batch":
            band, col = (i // g[1], i % g[1]) if g is not None else (i, 0)
            lo, hi = ((bounds if g is None else None) or even_bounds(ext[1], ways))[band:band + 2]
            if "filter" in got and -(-hi // layer.shared) > read_to.get(col, 0):
                got = "+".join(x for x in got.split("+") if x != "filter")
            read_to[col] = max(read_to.get(col, 0), -(-hi // layer.shared))
        out[i] = got
    return out


MULTICAST_READ = {"ifmap": "dram_ifmap_read_bytes", "filter": "dram_filter_read_bytes"}  # a multicast operand's traffic key


def senders(layer: Layer, dim: str, c: int, live: list[int], got: dict[int, str],
            bounds: tuple[int, ...] | None = None) -> dict[tuple[str, int], int]:
    """Which share's DRAM fetch each multicast operand of a ``c``-way split of ``layer`` on ``dim`` (cut at ``bounds``)
    reaches each receiver from: ``(operand, receiver index) -> sender index`` for every operand in ``got``
    (:func:`received`): on a 1-D split the first share with work; on a grid ``M{a}N{b}`` a row band's input from the
    band's first core, a column part's weights from the first band's core (:func:`multicast`); where the split cuts
    the batch, a core's weights from the earlier share of its column part that first read the group of its first
    batch element (its later groups, if any, may have come in another's fetch)."""
    g = grid(dim)
    rows, ways = ("M", g[0]) if g is not None else (dim, c)
    ext = split_extent(layer, rows, ways) if rows == "M" else None
    first: dict[tuple[int, int], int] = {}  # (column part, weight group) -> the share that read it first
    out: dict[tuple[str, int], int] = {}
    for i in live:
        band, col = (i // g[1], i % g[1]) if g is not None else (i, 0)
        if ext is not None and ext[0] == "batch":
            lo, hi = ((bounds if g is None else None) or even_bounds(ext[1], ways))[band:band + 2]
            for grp in range(lo // layer.shared, -(-hi // layer.shared)):
                first.setdefault((col, grp), i)
        for op in got[i].split("+") if got[i] else ():
            if op == "filter" and ext is not None and ext[0] == "batch":
                out[(op, i)] = first[(col, lo // layer.shared)]
            else:
                out[(op, i)] = live[0] if g is None else i - i % g[1] if op == "ifmap" else i % g[1]
    return out


def covered(part: Part, operand: str, need: float, arch: Arch) -> Part:
    """``part`` (the sender of ``operand``, ``ifmap`` or ``filter``, to other cores of its split) fetching ``need``
    bytes of it from DRAM where it read fewer: a multicast fetch serves every receiver at once, so it must be made as
    often as the receiver that re-reads the operand most needs it (a receiver given more columns of an ``N`` split
    may stream its input in more passes than the sender's share does). The extra reads go to its records, its DRAM
    bytes and its stall at ``arch``'s DRAM port. Before 2026-12-07 a receiver read none of the operand from DRAM,
    whatever its passes: on ``examples/big_little.toml`` the ``N`` split of an 8192 x 1024 x 4096 GEMM under
    ``edp`` moved 101 MB of DRAM where the cores' own passes over the input need more; now the ``K`` split wins."""
    have = part.traffic.get(MULTICAST_READ[operand], 0.0)
    if need <= have * (1 + 1e-12):
        return part
    extra = need - have
    bits = arch.bits.input if operand == "ifmap" else arch.bits.weight
    out = replace(part, records=[*part.records, ("dram", "dram_read", (bits,), extra * 8 / bits)],
                  traffic={**part.traffic, MULTICAST_READ[operand]: need}, dram_bytes=part.dram_bytes + extra)
    if arch.bandwidth_mode != "calc" and arch.memory != "scalesim":  # those keep their own stall models
        out.restall(arch)
    return out


def lead_ranks(dim: str, live: list[int]) -> dict[int, int]:
    """Each working share's position for :func:`multicast` and the K split's reducer (the first fetches and reduces):
    on a 1-D split its rank among the shares ``live`` (their indices) that have work, so a split whose first core gets
    nothing (a balanced cut over unequal cores) still has one core fetch each multicast operand and one reduce; on a
    grid its own index (a grid's shares are even)."""
    return {i: (n if grid(dim) is None else i) for n, i in enumerate(live)}


def uneven_batch(layer: Layer, c: int) -> bool:
    """Whether a GEMM may also be cut over ``c`` cores on its batch in shares that differ by one element, or by one
    group of ``shared`` elements that read one right operand (grouped-query attention's heads of one key/value head;
    split ``B``, :func:`default_bounds`; ``M`` cuts the batch only when ``c`` divides it, else each element's rows):
    a GEMM, not a conv, of two groups or more. 73 experts of one token each on 4 cores: ``B`` gives the cores 19, 18,
    18 and 18 of them, ``M`` every core all 73 experts' weights for one row of output (before 2026-12-08 the only cut
    on ``M``, so such a layer ran no faster on 4 cores than on 2)."""
    return c > 1 and layer.batch % c != 0 and layer.batch // layer.shared > 1 and layer.conv is None


def split_extent(layer: Layer, dim: str, c: int) -> tuple[str, int] | None:
    """(what a ``c``-way split of ``layer`` on 1-D ``dim`` cuts, its extent): ``batch`` (``B`` of a batch whose elements
    have their own right operands, and ``M`` when ``c`` divides the batch), ``groups`` (``B`` of a batch read in groups
    of ``shared``), ``rows`` (a conv's output image rows on ``M``), ``cin`` (a conv's input channels on ``K``),
    else ``dim`` itself (``M``, ``N`` or ``K``); None for no split (``-``, one core) or a grid."""
    if c == 1 or dim == "-" or grid(dim) is not None:
        return None
    if dim == "B":  # whole groups of heads that share their keys (each group's operand fetched by one core)
        return ("batch", layer.batch) if layer.shared == 1 else ("groups", layer.batch // layer.shared)
    if dim == "M" and layer.batch % c == 0:
        return "batch", layer.batch
    if dim == "M" and layer.conv is not None:
        h, _, fh, _, _, _, s = layer.conv[:7]
        return "rows", (h - fh) // s + 1
    if dim == "K" and layer.conv is not None:
        return "cin", layer.conv[4]
    return dim, {"M": layer.M, "N": layer.N, "K": layer.K}[dim]


def even_bounds(size: int, c: int) -> tuple[int, ...]:
    """Cut points of ``size`` into ``c`` shares of ``ceil(size / c)`` (the last ones shorter or empty)."""
    step = math.ceil(size / c)
    return tuple(min(size, i * step) for i in range(c + 1))


def default_bounds(dim: str, size: int, c: int) -> tuple[int, ...]:
    """The cut points of a ``c``-way split on ``dim`` of an extent of ``size`` when no cut is chosen: on ``B`` shares
    one unit apart, the larger first (73 experts on 4 cores: 19, 18, 18, 18; every core works while ``c <= size``),
    else :func:`even_bounds` (shares of ``ceil(size / c)``, which line up with a grid's and a fused producer's)."""
    if dim == "B":
        q, r = divmod(size, c)
        return tuple(i * q + min(i, r) for i in range(c + 1))
    return even_bounds(size, c)


def sub_layer(layer: Layer, dim: str, c: int, i: int, bounds: tuple[int, ...] | None = None) -> Layer | None:
    """Core ``i``'s share of ``layer`` split ``c`` ways on ``dim`` (``B``: the batch or its groups; ``M``: the batch
    first when ``c`` divides it; a conv's image rows or input channels: :func:`split_extent`), between ``bounds[i]``
    and ``bounds[i + 1]`` of that extent (default :func:`default_bounds`; a grid is always even); None when it gets
    nothing."""
    if c == 1 or dim == "-":
        return layer
    g = grid(dim)
    if g is not None:  # a grid: row band i // b, then its column part i % b
        band = sub_layer(layer, "M", g[0], i // g[1])
        return None if band is None else sub_layer(band, "N", g[1], i % g[1])
    what, size = split_extent(layer, dim, c)  # type: ignore[misc]
    lo, hi = (bounds or default_bounds(dim, size, c))[i:i + 2]
    if hi <= lo:
        return None
    if what == "batch":
        return replace(layer, batch=hi - lo, shared=math.gcd(layer.shared, hi - lo))
    if what == "groups":
        return replace(layer, batch=(hi - lo) * layer.shared)
    if what == "rows":
        return _conv_band(layer, lo, hi)
    if what == "cin":
        return _conv_channels(layer, lo, hi)
    conv = layer.conv[:5] + (hi - lo,) + layer.conv[6:] if dim == "N" and layer.conv is not None else None
    return replace(layer, **{dim: hi - lo}, conv=conv)


def _conv_band(layer: Layer, lo: int, hi: int) -> Layer:
    """Output image rows ``lo..hi`` of a conv: a smaller conv on the input rows that band reads, halo included, so
    each core fetches its slice of the input (plus ``fh - stride`` shared rows) rather than its im2col rows."""
    h, w, fh, fw, cin, cout, s = layer.conv[:7]
    ow = (w - fw) // s + 1
    rows_in = (hi - lo - 1) * s + fh
    return replace(layer, M=(hi - lo) * ow, conv=(rows_in, w, fh, fw, cin, cout, s) + tuple(layer.conv[7:]))


def _conv_channels(layer: Layer, lo: int, hi: int) -> Layer:
    """Input channels ``lo..hi`` of a conv's reduction: the same conv on those channels (every filter tap of them),
    so each core reads its channels' slice of the input rather than im2col rows (a conv with fewer input channels
    than cores leaves cores idle)."""
    fh, fw = layer.conv[2:4]
    return replace(layer, K=fh * fw * (hi - lo), conv=layer.conv[:4] + (hi - lo,) + tuple(layer.conv[5:]))


def halo_elements(prod: Layer, cons: Layer, c: int, i: int, bounds: tuple[int, ...] | None = None,
                  prod_bounds: tuple[int, ...] | None = None) -> int:
    """Elements of fused conv ``cons``'s input that core ``i`` of a ``c``-way row-band split (both convs split on
    their output image rows, :func:`_conv_band`) needs but a neighbour computed: the rows of its band's input that
    lie outside the producer's band on this core and inside the producer's output, each as wide as that output (the
    rest is the consumer's zero padding, made on chip). 0 for a split on the batch or when either is not a conv.
    ``bounds`` / ``prod_bounds``: where the consumer's / producer's output rows are cut, if not evenly (a row cut
    over cores that differ)."""
    if prod.conv is None or cons.conv is None or c < 2 or cons.batch % c == 0:
        return 0
    h, _, fh, _, cin, _, s = cons.conv[:7]
    ph, pw, pfh, pfw, _, _, ps = prod.conv[:7]
    oh, poh, pow_ = (h - fh) // s + 1, (ph - pfh) // ps + 1, (pw - pfw) // ps + 1
    pad = max(0, (h - poh) // 2)  # the producer's output sits inside the consumer's padded input
    lo, hi = (bounds or even_bounds(oh, c))[i:i + 2]
    if hi <= lo:
        return 0
    plo, phi = (prod_bounds or even_bounds(poh, c))[i:i + 2]
    need = range(lo * s, (hi - 1) * s + fh)
    own = range(pad + plo, pad + phi)
    rows = sum(1 for r in need if pad <= r < pad + poh and r not in own)
    return rows * pow_ * cin


def gemm_part(layer: Layer, core: int, arch: Arch, tab: EnergyTable, memo: dict, *, dim: str = "-", ways: int = 1,
              reducer: bool = True, fused_in: str = "", fused_out: str = "", fused_filter: str = "", link_hops: float = 1.0,
              link_bw: float = 32.0, link_latency: float = 0.0, shared: str = SHARED, multicast: str = "",
              halo: int = 0, nest: Hardware | None = None, nest_objective: str = "latency",
              own_band: float | None = None, active: int = 0, free: str = "") -> Part:
    """Cost ``layer`` (already this core's share) on ``core``. ``fused_in`` / ``fused_out``: ``""`` (DRAM),
    ``"shared"`` (the shared memory, over the interconnect) or ``"local"`` (this core's buffers); ``dim``/``ways``:
    the split (a K-split's non-reducer sends partial sums instead of writing outputs); ``shared``: the component
    that holds on-chip intermediates (``ofmap_sram``, the other cores' buffers, on a chip without shared memory);
    ``fused_filter`` may also be ``"bands"``: the operand lies in row bands over the ``ways`` cores of the split (its
    producer split on rows kept them), so this core reads the ``ways - 1`` bands it lacks over the interconnect
    (``own_band``: the fraction of the rows its own band holds, if not ``1 / ways``: a row cut over cores that differ);
    ``multicast``: ``ifmap`` or ``filter``, an operand this core receives from the DRAM fetch of another core of the
    split, delivered to all of them at once (a multicast), so this core reads none of it from DRAM; ``halo``:
    elements of a fused (``local``) input that neighbouring cores computed (:func:`halo_elements`), read from
    their buffers over the interconnect; ``active``: the shares of the split given work (default ``ways``: a K
    split's reducer adds the partial sums of the other ``active - 1``; before 2026-12-07 always ``ways - 1``, also
    from cores a cut left idle); ``nest``: the core is a loop-nest Hardware, its share costed by the
    loop-nest mapper under ``nest_objective`` (:mod:`npukit.sim._multicore_nest`; ``arch`` then gives only the
    operand widths and the DRAM port); ``free``: map the share (a 2-D core's) for the least energy with the DRAM
    traffic of those operands costing nothing (:func:`~npukit.sim.mapper.choose_energy_without`), not under the
    arch's objective."""
    b, n = arch.bits, layer.batch
    recs: dict[tuple[str, str, tuple[int, ...]], float] = {}
    if nest is None:
        key = (layer.M, layer.N, layer.K, layer.batch, layer.kind, layer.conv, layer.shared, arch)
        c = memo.get(key + (free,)) if free else memo.get(key)
        if c is None and free:
            c = memo[key + (free,)] = map_layer_energy_without(layer, arch, tab, free)
        elif c is None:
            # one pass over the candidates maps the share under every objective: a split of a latency or EDP chip
            # ranks all three (multicore_sim._Run._ranked_parts), so the other two are kept for it
            for obj, counts in map_layer_each(layer, arch, tab).items():
                memo[key[:-1] + (arch if obj == arch.objective else replace(arch, objective=obj),)] = counts
            c = memo[key]
        records = layer_records(layer, c, arch)
        traffic = traffic_bytes(layer, c, arch)
        ifmap, fills, final = n * c.ifmap_dram, n // layer.shared * c.filter_dram, n * _final_dram(c)
        folds, per, label = c.folds, c.compute_cycles, c.mapping.label(arch.dataflow) if c.mapping is not None else ""
        kf = min(c.folds, math.ceil(layer.K / arch.rows)) if arch.dataflow in ("ws", "is") else 1
        calc_stall = n * c.scalesim_stall_cycles if arch.memory == "scalesim" else None  # its own stalls, as one core
    else:
        ns = nest_share(layer, nest, (b.input, b.weight, b.output), nest_objective, memo, tab.dram_bit())
        records, ifmap, fills, final = ns.records, ns.ifmap, ns.fills, ns.final
        traffic = {"dram_ifmap_read_bytes": ifmap * b.input / 8, "dram_filter_read_bytes": fills * b.weight / 8,
                   "dram_ofmap_write_bytes": final * b.output / 8}
        folds, per, label, kf, calc_stall = 1, ns.cycles / n, ns.mapping, 1, None
    for comp, act, bits, cnt in records:
        recs[(comp, act, bits)] = recs.get((comp, act, bits), 0) + cnt
    link_bits = 0.0
    recv_bits = 0.0  # bits received that the sender already counted (time only)
    if fused_in and ifmap:
        _take(recs, ("dram", "dram_read", (b.input,)), ifmap)
        traffic["dram_ifmap_read_bytes"] = 0.0
        if fused_in == "shared":
            _add(recs, (shared, "sram_read", (b.input,)), ifmap)
            link_bits += ifmap * b.input
        elif halo:
            _add(recs, ("ofmap_sram", "sram_read", (b.input,)), n * halo)
            link_bits += n * halo * b.input
    fil_bits = 0.0
    if fused_filter and fills:  # attention keys/values made on chip by an earlier GEMM of the group
        _take(recs, ("dram", "dram_read", (b.weight,)), fills)
        traffic["dram_filter_read_bytes"] = 0.0
        if fused_filter in ("shared", "bands"):  # bands: 1 / ways of it is this core's own
            _add(recs, (shared, "sram_read", (b.weight,)), fills)
            lack = 1.0 if fused_filter != "bands" else (ways - 1) / ways if own_band is None else 1 - own_band
            fil_bits = fills * b.weight * lack
            link_bits += fil_bits
    shared_ops = multicast.split("+")
    received: dict[str, float] = {}
    if "ifmap" in shared_ops and ifmap and not fused_in:
        _take(recs, ("dram", "dram_read", (b.input,)), ifmap)
        received["ifmap"], traffic["dram_ifmap_read_bytes"] = traffic["dram_ifmap_read_bytes"], 0.0
    if "filter" in shared_ops and fills and not fused_filter:
        _take(recs, ("dram", "dram_read", (b.weight,)), fills)
        received["filter"], traffic["dram_filter_read_bytes"] = traffic["dram_filter_read_bytes"], 0.0
    out_to = fused_out
    if dim == "K" and ways > 1 and not reducer:
        out_to = "sent"
    if out_to and final:
        _take(recs, ("dram", "dram_write", (b.output,)), final)
        traffic["dram_ofmap_write_bytes"] = 0.0
        if out_to == "shared":
            _add(recs, (shared, "sram_write", (b.output,)), final)
            link_bits += final * b.output
    if dim == "K" and ways > 1:
        partial = n * layer.M * layer.N
        if reducer:  # adds the other cores' partial sums (their transfers are counted by the senders)
            others = (active or ways) - 1
            _add(recs, ("psum_adder", "int_add", (b.psum_buffer,)), others * partial)
            _add(recs, ("psum_buffer", "sram_write", (b.psum_buffer,)), others * partial)
            recv_bits = others * partial * b.psum_buffer
        else:
            link_bits += partial * b.psum_buffer
    dram_b = sum(cnt * bits[0] for (comp, act, bits), cnt in recs.items() if comp == "dram")
    if calc_stall is not None:
        stall = calc_stall
    else:
        stall = n * stall_cycles(dram_b / n / 8, folds, per, arch) if dram_b else 0
    link_bytes = link_bits / 8
    if link_bits:
        _add(recs, (LINK, "transfer", (1,)), link_bits * link_hops)
    moved = link_bytes + recv_bits / 8
    link_cyc = moved / link_bw + link_latency if moved else 0.0
    out = [(comp, act, bits, cnt) for (comp, act, bits), cnt in recs.items() if cnt]
    return Part(core, n * per, stall, link_cyc, layer.macs, out, dram_b / 8, link_bytes, traffic,
                folds=folds, batch=n, write_bytes=0.0 if out_to else final * b.output / 8, k_folds=max(1, kf),
                mapping=label,
                filter_link_cycles=fil_bits / 8 / link_bw, filter_buffer_cycles=arch.sram_bytes("filter") / link_bw,
                received=received)


def gemm_floor(layer: Layer, arch: Arch, memo: dict, *, dim: str = "-", ways: int = 1, reducer: bool = True,
               fused_in: str = "", fused_out: str = "", fused_filter: str = "", multicast: str = "",
               nest: Hardware | None = None) -> tuple[float, float]:
    """Lower bounds on what :func:`gemm_part` gives for the same arguments, without mapping the share: (its
    ``compute`` cycles, its ``dram_bytes``). A loop-nest core's share computes at least
    :func:`~npukit.sim._multicore_nest.nest_floor`'s cycles and moves at least its elements of the operands that
    still cross the DRAM port (those not fused, multicast or sent as partial sums). (0, 0) for a 2-D Arch core (not
    bounded). The stall follows from the bytes and the port the caller gives the share (a part's one fold moves them
    beside none of its compute)."""
    if nest is None:
        return 0.0, 0.0
    b = arch.bits
    cycles, (ifmap, fills, final) = nest_floor(layer, nest, memo)
    shared_ops = multicast.split("+")
    bits = 0.0
    if not fused_in and "ifmap" not in shared_ops:
        bits += ifmap * b.input
    if not fused_filter and "filter" not in shared_ops:
        bits += fills * b.weight
    if not (fused_out or (dim == "K" and ways > 1 and not reducer)):
        bits += final * b.output
    return float(cycles), bits / 8


def prefetched(parts: list[Part], window: float) -> list[Part]:
    """Copies of ``parts`` whose fused right operand (``filter_link_cycles``) crossed the links up to ``window``
    cycles ahead: while the steps between its producer and this GEMM ran and the links were free. The links move
    data beside the DRAM port and the arrays, so a core receives keys or values it will need during a step that
    waits on the port, as much as its filter buffer holds (``filter_buffer_cycles``); the rest stays on this step."""
    if window <= 0 or not any(p.filter_link_cycles for p in parts):
        return parts
    out = []
    for p in parts:
        ahead = min(window, p.filter_link_cycles, p.filter_buffer_cycles)
        out.append(replace(p, link_cycles=p.link_cycles - ahead, filter_link_cycles=p.filter_link_cycles - ahead))
    return out


def write_epilogue(parts: list[Part], bandwidth: float) -> None:
    """Raise each part's stall to what the shared DRAM port needs at the two ends of the split (cycles).

    An output is final only after the last of the folds that accumulate it (``k_folds``: ws and is sum a column
    fold's K folds in the psum buffer, column folds outermost), so the outputs of every core's last such group
    (``write_bytes`` over its groups, the last batch element's) can leave only once that group computes: they
    overlap its last fold and nothing before it. Before the first fold, its operands come in. Every core's share
    of both goes through the one port of ``bandwidth`` bytes/cycle, so a part lasts at least the first folds'
    reads + its compute + the last groups' writes less its last fold. This is the bound on top of the per-fold
    stall model (:func:`npukit.sim._mapping.stall_cycles`), which spreads every byte evenly over the folds and
    so lets a write overlap folds that have produced no final output yet."""
    if bandwidth <= 0:
        return
    first = sum((p.dram_bytes - p.write_bytes) / (p.batch * p.folds) for p in parts if p.macs) / bandwidth
    last = sum(p.write_bytes / (p.batch * max(1, p.folds // p.k_folds)) for p in parts if p.macs) / bandwidth
    for p in parts:
        if p.macs and p.write_bytes:
            t_fold = p.compute / (p.batch * p.folds)
            p.stall = max(p.stall, math.ceil(first + max(0.0, last - t_fold)))


def vector_shares(op: VectorOp, cut: tuple[str, tuple[int, ...]], multicast: bool = True) -> list[VectorOp | None]:
    """Each core's share of vector op ``op`` at ``cut``, the row cut of the GEMM whose rows it works on
    (:func:`split_extent`'s ``what`` and the cut's bounds): the batch at those bounds when the cut is on the batch
    and the op has that batch, else each instance's rows (of ``reduce`` elements) in the same proportions. A share of
    rows reads all the op's parameters (a norm's weights) from DRAM on the first core with work, and on every one
    without ``multicast``; None for a core given nothing. (:func:`vector_part` without a share splits evenly.)"""
    what, bounds = cut
    widths = [hi - lo for lo, hi in zip(bounds, bounds[1:], strict=False)]
    if what == "batch" and op.batch == bounds[-1]:
        return [replace(op, batch=w) if w else None for w in widths]
    unit = max(1, op.reduce)
    b = [min(op.elements, x * unit) for x in whole_bounds(math.ceil(op.elements / unit), widths)]
    sizes = [hi - lo for lo, hi in zip(b, b[1:], strict=False)]
    first = next(i for i, n in enumerate(sizes) if n)
    return [replace(op, elements=n, params=op.params if i == first or not multicast else 0) if n else None
            for i, n in enumerate(sizes)]


def vector_part(op: VectorOp, core: int, arch: Arch, ways: int = 1, moved_bits: float = 0.0, hide: float = 0.0,
                link_bw: float = 32.0, link_latency: float = 0.0, link: str = LINK, hops: float = 1.0,
                params_from_dram: bool = True, share: VectorOp | None = None) -> Part:
    """Cost ``1/ways`` of vector op ``op`` on ``core`` (its vector unit), or ``share`` of it if given
    (:func:`vector_shares`); ``moved_bits``: bits it must receive and
    send over the interconnect component ``link`` (an op on a SIMD core away from the MAC cores: ``LINK``, or
    ``BUS``), each bit priced once per hop of ``hops`` and timed once (bits / bandwidth + latency, as a GEMM share's
    transfer: the hops of a route carry it at once); ``hide``: GEMM cycles a pipelined vector unit overlaps it
    with; ``params_from_dram``: a share of its elements reads all the op's parameters (a norm's weights) from DRAM,
    False when another core's read of them is multicast to this one (as a GEMM share's operand)."""
    if share is None:
        share = op if ways == 1 else replace(op, batch=op.batch // ways) if op.batch % ways == 0 else \
            replace(op, elements=max(op.reduce or 1, math.ceil(op.elements / ways / max(1, op.reduce)) * max(1, op.reduce)),
                    params=op.params if params_from_dram else 0)
    recs: list[Record] = [tuple(r) for r in vector_unit.vector_records(share, arch)]  # type: ignore[misc]
    busy = vector_unit.busy_cycles(share, arch)
    exposed = busy - min(busy, max(0.0, hide))
    link_bytes = moved_bits / 8
    if moved_bits:
        recs.append((link, "transfer", (1,), moved_bits * hops))
    link_cyc = link_bytes / link_bw + link_latency if link_bytes else 0.0
    return Part(core, exposed, 0.0, link_cyc, 0, recs, vector_unit.dram_bytes(share, arch), link_bytes,
                vector_unit.traffic(share, arch), vector_busy=busy, bus_bytes=link_bytes if link == BUS else 0.0)


def with_dram(part: Part, read_bits: float, write_bits: float, width: int, port: float) -> Part:
    """``part`` (a vector op on a simd core) also reading ``read_bits`` from and writing ``write_bits`` to DRAM
    (operands of ``width`` bits) at ``port`` bytes per cycle, streamed beside its lanes and its bus transfers: the
    core is busy for the longest of the three."""
    if not read_bits and not write_bits:
        return part
    byts = (read_bits + write_bits) / 8
    recs = list(part.records) + [("dram", "dram_read", (width,), read_bits / width),
                                 ("dram", "dram_write", (width,), write_bits / width)]
    traffic = dict(part.traffic)
    traffic["dram_ifmap_read_bytes"] = traffic.get("dram_ifmap_read_bytes", 0.0) + read_bits / 8
    traffic["dram_ofmap_write_bytes"] = traffic.get("dram_ofmap_write_bytes", 0.0) + write_bits / 8
    # all its DRAM bytes cross the port: these and what the op itself reads there (a norm's weights)
    stall = max(part.stall, (part.dram_bytes + byts) / port - part.compute)
    return replace(part, stall=stall, records=recs, dram_bytes=part.dram_bytes + byts, traffic=traffic,
                   write_bytes=part.write_bytes + write_bits / 8)


def _take(recs: dict, key: tuple, n: float) -> None:
    recs[key] = max(0.0, recs.get(key, 0) - n)


def _add(recs: dict, key: tuple, n: float) -> None:
    recs[key] = recs.get(key, 0) + n
