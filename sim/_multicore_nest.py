"""A multi-core NPU's core described by a loop-nest :class:`~npukit.sim.hardware.Hardware` (a ZigZag or Stream
core YAML: any array dimensions, any memory hierarchy) rather than a 2-D :class:`~npukit.sim.arch.Arch`.

The core's share of a layer (its sub-layer: :func:`npukit.sim._multicore_cost.sub_layer`) is mapped by the
loop-nest mapper (:func:`npukit.sim.nest_mapper.map_layer`, the layer as ZigZag loop dimensions by
:func:`npukit.sim.nest_sim.nest_layer`); its cycles are the mapping's (temporal iterations, the memory ports'
stalls, on- and off-loading, drain), its energy the mapping's per memory level and operand plus the MACs, priced
by the YAML's own ``r_cost``/``w_cost``/``unit_energy``. Those pJ enter the ledger as records of component
``nest:<memory>`` (``nest:mac`` for the array), action ``transfer`` of 1-bit units declared at 1 pJ each, so the
ledger's totals equal the mapping's.

Off-core traffic: the core's top on-chip memory (a Stream core YAML has no DRAM level, the off-chip memory is
another core; a ZigZag YAML's top level named ``dram`` is dropped by :func:`on_chip`, its traffic being this)
receives each operand of its share once from DRAM and sends its outputs once: input elements (a conv's band of
padded input rows, a GEMM's ``M x K``), weights (per group of ``shared`` batch instances) and outputs, priced as
``dram_read``/``dram_write`` by the multi-core arch's energy table and timed through the core's share of the DRAM
port by the caller (:mod:`npukit.sim._multicore_cost`): the YAML says nothing of overlapping that transfer with the
array, so the whole share is one fold (operands in, compute, outputs out). A share whose operands do not fit the core's
memories (a large conv's weights on a small core) is mapped with DRAM as its top level (:func:`with_offchip`): its
DRAM traffic is then the mapping's, re-fetches included.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from .errors import ConfigError
from .hardware import Hardware
from .loopnest import NestLayer, effective_spatial
from .nest_floor import temporal_floor, touched
from .nest_mapper import map_layer, mapping_score
from .nest_sim import nest_layer
from .nest_spatial import SPATIAL_CANDIDATES
from .workload import Layer

PREFIX = "nest:"
MAC = PREFIX + "mac"
Record = tuple[str, str, tuple[int, ...], float]


def components(hw: Hardware) -> list[str]:
    """The ledger components of ``hw``'s nest records (each priced at 1 pJ per 1-bit ``transfer``)."""
    return [MAC] + [PREFIX + m.name for m in on_chip(hw).memories]


_ON_CHIP: dict[int, tuple[Hardware, Hardware]] = {}  # id -> (hw, hw without its DRAM), both kept alive


def on_chip(hw: Hardware) -> Hardware:
    """``hw`` without a top memory named ``dram`` (ZigZag's off-chip level): the multi-core model counts that
    traffic itself (the arch's DRAM port and energy), so the nest model must not count it too. The same object
    for the same ``hw`` (the mapper caches by identity)."""
    hit = _ON_CHIP.get(id(hw))
    if hit is not None and hit[0] is hw:
        return hit[1]
    top = hw.memories[-1]
    out = replace(hw, memories=hw.memories[:-1]) if "dram" in top.name.lower() and len(hw.memories) > 1 else hw
    _ON_CHIP[id(hw)] = (hw, out)
    return out


def nest_objective(objective: str) -> str:
    """The loop-nest mapper's objective for a multi-core arch's ``objective``: ``energy`` stays; ``latency`` and
    ``edp`` map each share under ``edp``. Stream 2.1.1 maps a share under ZigZag's latency rule
    (``MinimalLatencyStage``: fewest cycles, then least energy; ``stream/stages/estimation/zigzag_cost_estimator.py``),
    which npukit's ``latency`` objective reproduces; but npukit's spatial unrolling of a share fills more of the
    array than Stream's (docs/multicore.md), and among that unrolling's many orders within a fraction of a percent
    of the fewest cycles, ``latency`` keeps ones with up to a quarter more energy (``bench_vs_stream.py``,
    2conv_16_16 on eyeriss_like_dual_core: 13.1 vs 10.5 uJ for 0.2% fewer cycles), where ``edp`` stays within 1%
    of Stream's energy."""
    return "energy" if objective == "energy" else "edp"


def with_bits(hw: Hardware, input_bits: int, weight_bits: int, output_bits: int, psum_bits: int) -> Hardware:
    """``hw`` at the workload's operand widths (bits): ``I``, ``W``, final outputs ``O_final``, partial sums ``O``."""
    return replace(hw, bits={"I": input_bits, "W": weight_bits, "O": psum_bits, "O_final": output_bits})


@dataclass(frozen=True)
class NestShare:
    """One core's share of a layer on a loop-nest core: its ``records`` (nest energies and DRAM traffic, the
    latter in elements), its ``cycles`` (all of the batch), the DRAM elements of each operand and the mapping."""

    records: tuple[Record, ...]
    cycles: float
    ifmap: float
    fills: float
    final: float
    mapping: str


def _label(spatial: dict[str, dict[str, int]]) -> str:
    return "nest " + " ".join(f"{dim}:" + ",".join(f"{d}{f}" for d, f in loops.items())
                              for dim, loops in spatial.items() if loops)


def dram_elements(layer: Layer) -> tuple[float, float, float]:
    """(input, weight, output) elements of ``layer`` (all of its batch) entering or leaving a core once."""
    n = layer.batch
    groups = n // max(1, layer.shared)
    if layer.conv is not None:
        ih, iw, fh, fw, cin, cout = layer.conv[:6]
        return n * ih * iw * cin, groups * fh * fw * cin * cout, n * layer.M * layer.N
    return n * layer.M * layer.K, groups * layer.K * layer.N, n * layer.M * layer.N


def utilization(hw: Hardware, layer: NestLayer, sm: dict[str, dict[str, int]]) -> float:
    """Fraction of ``hw``'s PEs the unrolling ``sm`` keeps busy on ``layer`` (ZigZag's effective factors: a loop
    of n unrolled f-wide runs ``ceil(n / f)`` passes of ``n / ceil(n / f)`` PEs)."""
    used = math.prod(f for loops in effective_spatial(layer, sm).values() for f in loops.values())
    return used / hw.array.units


def mixed_spatial(hw: Hardware, layer: NestLayer) -> dict[str, dict[str, int]]:
    """An unrolling that may put two or three loops on one array dimension (ZigZag's mixed spatial mappings, which
    Stream's cost estimator tries when they fill more of the array than one loop per dimension): array dimensions in
    order, each taking the one loop, the pair or the triple of loops (each sized to what the ones before leave) that
    keeps most of its PEs busy on what is left of the layer's loops."""
    left = {d: n for d, n in layer.dims.items() if n > 1}
    out: dict[str, dict[str, int]] = {}
    for name, size in hw.array.dims.items():
        best: tuple[float, dict[str, int]] = (0.0, {})
        names = [d for d in SPATIAL_CANDIDATES if left.get(d, 1) > 1]
        for a in names:
            fa = min(size, left[a])
            eff_a = left[a] / math.ceil(left[a] / fa)
            opts = [({a: fa}, eff_a)]
            for b in names:
                fb = min(size // fa, left[b]) if b != a else 1
                if fb > 1:
                    eff_b = eff_a * left[b] / math.ceil(left[b] / fb)
                    opts.append(({a: fa, b: fb}, eff_b))
                    for c in names:  # a third loop in what the pair leaves (ZigZag's mixed mappings allow it)
                        fc = min(size // (fa * fb), left[c]) if c not in (a, b) else 1
                        if fc > 1:
                            opts.append(({a: fa, b: fb, c: fc}, eff_b * left[c] / math.ceil(left[c] / fc)))
            for loops, eff in opts:
                if eff > best[0]:
                    best = (eff, loops)
        if best[1]:
            out[name] = best[1]
            for d, f in best[1].items():
                left[d] = math.ceil(left[d] / f)
    return out


def map_share(hw: Hardware, nl: NestLayer, objective: str):  # -> NestMapping
    """The mapper's best mapping of ``nl`` (one loop per array dimension), or the best mapping under the mixed
    unrolling of :func:`mixed_spatial` when that keeps more PEs busy and scores better under ``objective``."""
    m = map_layer(hw, nl, None, objective)
    mix = mixed_spatial(hw, nl)
    if not mix or utilization(hw, nl, mix) <= utilization(hw, nl, m.spatial) + 1e-9:
        return m
    try:
        # only a mapping scoring below m's replaces it: the search cuts every order that cannot (None: none can)
        alt = map_layer(hw, nl, mix, objective, bound=mapping_score(m.cost, objective))
    except ConfigError:  # the mixed unrolling does not fit the lowest memories
        return m
    return m if alt is None else alt


OFFCHIP = "offchip"  # the DRAM level added to a core whose memories cannot hold a share (:func:`with_offchip`)
OFFCHIP_PORT_BITS = 1 << 12  # its port in bits per cycle: wide, so the nest hardly stalls on it (the caller times
# the share's DRAM bytes through the arch's port, as for every share)


def with_offchip(hw: Hardware, dram_pj_per_bit: float) -> Hardware:
    """``hw`` with a DRAM level on top holding every operand (ZigZag's ``dram``), each access of
    :data:`OFFCHIP_PORT_BITS` priced at ``dram_pj_per_bit`` (pJ per bit, the multi-core arch's DRAM cost), so the
    mapper keeps the share's re-fetches from DRAM as few as the DRAM energy is worth."""
    from .hardware import DIRECTIONS, MemLevel

    ops = tuple(dict.fromkeys(o for m in hw.memories for o in m.operands))
    width = OFFCHIP_PORT_BITS
    bw = {(o, d): (8, width) for o in ops for d in DIRECTIONS}  # counted to the byte (ZigZag's bandwidth_min)
    top = MemLevel(OFFCHIP, float(2**62), dram_pj_per_bit * width, dram_pj_per_bit * width, ops,
                   tuple(hw.array.dims), bw, False, {k: "rw_port" for k in bw})
    return replace(hw, memories=(*hw.memories, top))


def _offchip_elements(hw: Hardware, cost) -> tuple[float, float, float]:  # noqa: ANN001
    """(input, weight, output) elements the mapping ``cost`` moves between DRAM (the top level of each operand)
    and the core: reads of inputs and weights, writes of final outputs (ZigZag's words of the DRAM port width,
    converted to elements at each operand's width; partial sums spilled to DRAM and read back are left out)."""
    out = []
    for op, dirs, bits in (("I", ("tl",), hw.bits["I"]), ("W", ("tl",), hw.bits["W"]),
                           ("O", ("fl",), hw.bits["O_final"])):
        top = cost.accesses[op][-1]
        out.append(sum(top.get(d, 0.0) for d in dirs) * OFFCHIP_PORT_BITS / max(1, bits))
    return out[0], out[1], out[2]


def nest_share(layer: Layer, hw: Hardware, bits: tuple[int, int, int], objective: str, memo: dict,
               dram_pj_per_bit: float = 0.0) -> NestShare:
    """Map ``layer`` on ``hw`` (under ``objective``: energy, latency or edp) and return its :class:`NestShare`;
    ``bits``: the (input, weight, output) widths of the DRAM records; ``memo`` caches by shape. A share whose
    operands do not fit the core's memories is mapped with DRAM on top (:func:`with_offchip`, at
    ``dram_pj_per_bit``): its DRAM traffic is then the mapping's, re-fetches included, not each operand once."""
    hw = on_chip(hw)
    key = ("nest", id(hw), hw.name, layer.M, layer.N, layer.K, layer.batch, layer.conv, layer.shared, objective)
    if key in memo:
        return memo[key]
    nl = nest_layer(layer)
    try:
        m, top = map_share(hw, nl, objective), hw
        ifmap, fills, final = dram_elements(layer)
    except ConfigError:
        top = memo.setdefault(("offchip", id(hw), dram_pj_per_bit), with_offchip(hw, dram_pj_per_bit))
        m = map_share(top, nl, objective)
        # never below each operand once: the mapping's DRAM accesses are whole port words, truncated as ZigZag's
        # are, so a GEMV's 256-byte input counted 0 of its 512-byte words (2026-12-08; before, below the compulsory)
        ifmap, fills, final = (max(a, b) for a, b in zip(_offchip_elements(top, m.cost), dram_elements(layer),
                                                           strict=True))
    c = m.cost
    recs: list[Record] = [(MAC, "transfer", (1,), c.mac_pj)]
    per_level: dict[str, float] = {}
    for op, levels in c.energy.items():
        for mem, e in zip(top.levels(op), levels, strict=True):
            if mem.name != OFFCHIP:  # priced below as DRAM records, at the same cost
                per_level[mem.name] = per_level.get(mem.name, 0.0) + e
    recs += [(PREFIX + name, "transfer", (1,), e) for name, e in per_level.items()]
    recs += [("dram", "dram_read", (bits[0],), ifmap), ("dram", "dram_read", (bits[1],), fills),
             ("dram", "dram_write", (bits[2],), final)]
    out = NestShare(tuple(recs), math.ceil(c.cycles), ifmap, fills, final, _label(m.spatial))
    memo[key] = out
    return out


def nest_floor(layer: Layer, hw: Hardware, memo: dict) -> tuple[int, tuple[float, float, float]]:
    """Lower bounds on :func:`nest_share` of ``layer`` on ``hw`` without mapping it: (cycles, (input, weight,
    output) DRAM elements). The cycles: :func:`npukit.sim.nest_floor.temporal_floor` over the one-loop unrollings
    and the mixed one of :func:`mixed_spatial` (the two :func:`map_share` chooses from); the elements: those of
    :func:`dram_elements`, or fewer where the mapping might move fewer (:func:`npukit.sim.nest_floor.touched`: a
    share mapped with DRAM on top moves what the mapping moves, at least what its MACs touch). ``memo``: as
    :func:`nest_share`'s (a floor is kept by shape and array)."""
    hw = on_chip(hw)
    key = ("nest_floor", tuple(hw.array.dims.items()), layer.M, layer.N, layer.K, layer.batch, layer.conv, layer.shared)
    hit = memo.get(key)
    if hit is None:
        nl = nest_layer(layer)
        mix = mixed_spatial(hw, nl)
        elements = tuple(min(a, b) for a, b in zip(dram_elements(layer), touched(nl), strict=True))
        hit = memo[key] = (temporal_floor(hw, nl, (mix,) if mix else ()), elements)
    return hit
