"""Layer counts -> Ledger records: which component does which action at which width, how often.

One function (:func:`layer_records`) turns a layer's :class:`~npukit.sim._mapping.LayerCounts` into
``(component, action, bits, count)`` records, used both by the simulator (into the Ledger) and by the
mapper (priced directly, to compare candidate mappings), so both always agree.

PE registers: each kind (input, weight, psum) is written when a value latches into it (moving
operands every MAC, the stationary one once per fold) and read by every MAC; reads cost nothing in
the shipped tables (a flip-flop read is part of the MAC's switching) but a table may price them, as a
register file's would be (``register.read_pj_per_bit`` or a ``[components.NAME]`` section).

Widths: inputs, weights and outputs at their ``bits``; the MACs and PE psum registers at
``bits.pe_psum``; the psum buffer, the psum adder and the psum path's hardware by the one set of psum
charging rules (:func:`npukit.sim.psum_path.psum_records`), and running psums spilled to DRAM at the
width the buffer holds them (:func:`npukit.sim.psum_path.held_bits`, ``bits.psum_buffer`` unless
quantized transfer semantics). In SCALE-Sim's memory mode the ofmap SRAM and DRAM also carry every
fold's partial outputs (``ofmap_partial``), priced at that width too.
"""

from __future__ import annotations

from ._mapping import LayerCounts
from .arch import Arch
from .ledger import Ledger
from .psum_path import COMPONENTS as PSUM_PATH_COMPONENTS
from .psum_path import PsumCounts, arch_psum_hw, held_bits, psum_records
from .workload import Layer

Record = tuple[str, str, tuple[int, ...], int]
COMPONENTS = (
    "pe_array", "input_registers", "weight_registers", "psum_registers", "ifmap_sram",
    "filter_sram", "psum_buffer", "psum_adder", "ofmap_sram", "dram",
    *PSUM_PATH_COMPONENTS, "vector_unit",
)
OFF_CHIP = ("dram",)
# PE register kind (LayerCounts.reg_writes) -> component
REGISTERS = {"input": "input_registers", "weight": "weight_registers", "accumulator": "psum_registers"}
# PE register kind -> datapath width (:class:`npukit.sim.datapath.Bits` field)
REGISTER_WIDTHS = {"input": "input", "weight": "weight", "accumulator": "pe_psum"}
SRAMS = (("ifmap", "ifmap_sram"), ("filter", "filter_sram"), ("psum", "psum_buffer"), ("ofmap", "ofmap_sram"))
# per-operand traffic columns (bytes) of every result row
TRAFFIC_COLUMNS = (
    "dram_ifmap_read_bytes", "dram_filter_read_bytes", "dram_psum_read_bytes", "dram_psum_write_bytes",
    "dram_ofmap_write_bytes",
    "sram_ifmap_read_bytes", "sram_ifmap_write_bytes", "sram_filter_read_bytes", "sram_filter_write_bytes",
    "sram_psum_read_bytes", "sram_psum_write_bytes", "sram_ofmap_read_bytes", "sram_ofmap_write_bytes",
)


# component -> (memory level, operand: W weights, I inputs, O outputs and psums, "" for logic)
LEVELS = ("mac", "logic", "vector", "registers", "sram", "dram")
LEVEL_OF = {
    "pe_array": ("mac", ""), "psum_adder": ("logic", ""), "vector_unit": ("vector", ""),
    **{c: ("logic", "") for c in PSUM_PATH_COMPONENTS},
    "input_registers": ("registers", "I"), "weight_registers": ("registers", "W"), "psum_registers": ("registers", "O"),
    "ifmap_sram": ("sram", "I"), "filter_sram": ("sram", "W"), "psum_buffer": ("sram", "O"), "ofmap_sram": ("sram", "O"),
}
# DRAM traffic column -> (operand, action)
DRAM_TRAFFIC = {
    "dram_ifmap_read_bytes": ("I", "dram_read"), "dram_filter_read_bytes": ("W", "dram_read"),
    "dram_psum_read_bytes": ("O", "dram_read"), "dram_psum_write_bytes": ("O", "dram_write"),
    "dram_ofmap_write_bytes": ("O", "dram_write"),
}


def declare_components(ledger: Ledger, arch: Arch) -> None:
    """Declare the SRAM components with their capacities (bytes) so energy lookups work."""
    for buf, comp in SRAMS:
        ledger.declare(comp, kind="sram", capacity_bytes=arch.sram_bytes(buf))
    ledger.declare("dram", kind="dram")
    # the feature unit's extra pass reads the ifmap SRAM
    ledger.declare("psum_features", kind="logic", capacity_bytes=arch.sram_bytes("ifmap"))


def component_attrs(arch: Arch) -> dict[str, dict[str, float]]:
    """The capacity attributes :func:`declare_components` gives each component (for direct pricing)."""
    out = {comp: {"capacity_bytes": arch.sram_bytes(buf)} for buf, comp in SRAMS}
    out["psum_features"] = {"capacity_bytes": arch.sram_bytes("ifmap")}
    return out


def layer_records(layer: Layer, c: LayerCounts, arch: Arch) -> list[Record]:
    """Every action of ``batch`` GEMMs of ``layer`` with counts ``c`` (one GEMM's), as records."""
    b, n, held = arch.bits, layer.batch, held_bits(arch)
    reg_bits = {kind: getattr(b, w) for kind, w in REGISTER_WIDTHS.items()}
    final = c.ofmap_writes - c.ofmap_partial
    out: list[Record] = [("pe_array", "mac", (b.input, b.weight, b.pe_psum), c.macs)]
    out += [(REGISTERS[kind], "reg_write", (reg_bits[kind],), cnt) for kind, cnt in c.reg_writes]
    # every MAC reads its input, its weight and the running psum from PE registers
    out += [(REGISTERS[kind], "reg_read", (reg_bits[kind],), c.macs) for kind in REGISTERS]
    out += [
        ("ifmap_sram", "sram_read", (b.input,), c.ifmap_reads),
        ("ifmap_sram", "sram_write", (b.input,), c.ifmap_dram),
        ("filter_sram", "sram_read", (b.weight,), c.filter_reads),
        ("ofmap_sram", "sram_write", (b.output,), final),
        ("ofmap_sram", "sram_write", (held,), c.ofmap_partial),
        ("ofmap_sram", "sram_read", (b.output,), _final_dram(c)),
        ("ofmap_sram", "sram_read", (held,), c.ofmap_dram - _final_dram(c)),
        ("dram", "dram_read", (b.input,), c.ifmap_dram),
        ("dram", "dram_read", (held,), c.psum_dram_reads),
        ("dram", "dram_write", (held,), c.psum_dram_writes),
        ("dram", "dram_write", (b.output,), _final_dram(c)),
        ("dram", "dram_write", (held,), c.ofmap_dram - _final_dram(c)),
    ]
    out += psum_records(_psum_counts(layer, c, arch), b, arch_psum_hw(arch))
    recs = [(comp, act, bits, n * cnt) for comp, act, bits, cnt in out if cnt]
    # the right operand is fetched once per group of ``shared`` instances (grouped-query attention)
    fills = [("filter_sram", "sram_write", (b.weight,)), ("dram", "dram_read", (b.weight,))]
    return recs + [(comp, act, bits, n // layer.shared * c.filter_dram) for comp, act, bits in fills if c.filter_dram]


def _psum_counts(layer: Layer, c: LayerCounts, arch: Arch) -> PsumCounts:
    """One GEMM's psum-path counts for :func:`~npukit.sim.psum_path.psum_records`."""
    return PsumCounts(layer.M, layer.K, layer.N, arch.rows, arch.cols, c.psum_reads, c.psum_writes, c.psum_dram_reads)


def _final_dram(c: LayerCounts) -> int:
    """Ofmap DRAM writes that are final outputs (the rest are SCALE-Sim mode's partial sums)."""
    return min(c.ofmap_dram, c.ofmap_writes - c.ofmap_partial)


def dram_bits(layer: Layer, c: LayerCounts, arch: Arch) -> float:
    """Bits moved over the DRAM interface by ``batch`` GEMMs of ``layer``."""
    b, held = arch.bits, held_bits(arch)
    final = _final_dram(c)
    per = (
        c.ifmap_dram * b.input + c.filter_dram * b.weight + (c.psum_dram_reads + c.psum_dram_writes) * held
        + final * b.output + (c.ofmap_dram - final) * held
    )
    return layer.batch * per - (layer.batch - layer.batch // layer.shared) * c.filter_dram * b.weight


def traffic_bytes(layer: Layer, c: LayerCounts, arch: Arch) -> dict[str, float]:
    """The per-operand traffic columns (:data:`TRAFFIC_COLUMNS`, bytes) of ``batch`` GEMMs of ``layer``."""
    b, n, held = arch.bits, layer.batch, held_bits(arch)
    final = _final_dram(c)
    ofmap_bits = final * b.output + (c.ofmap_dram - final) * held
    write_bits = (c.ofmap_writes - c.ofmap_partial) * b.output + c.ofmap_partial * held
    recs = psum_records(_psum_counts(layer, c, arch), b, arch_psum_hw(arch))
    feat = sum(cnt for comp, act, _, cnt in recs if comp == "psum_features" and act == "sram_read") * b.input
    vals = {
        "dram_ifmap_read_bytes": c.ifmap_dram * b.input,
        "dram_filter_read_bytes": c.filter_dram * b.weight,
        "dram_psum_read_bytes": c.psum_dram_reads * held,
        "dram_psum_write_bytes": c.psum_dram_writes * held,
        "dram_ofmap_write_bytes": ofmap_bits,
        "sram_ifmap_read_bytes": c.ifmap_reads * b.input + feat,
        "sram_ifmap_write_bytes": c.ifmap_dram * b.input,
        "sram_filter_read_bytes": c.filter_reads * b.weight,
        "sram_filter_write_bytes": c.filter_dram * b.weight,
        "sram_psum_read_bytes": c.psum_reads * held,
        "sram_psum_write_bytes": c.psum_writes * held,
        "sram_ofmap_read_bytes": ofmap_bits,
        "sram_ofmap_write_bytes": write_bits,
    }
    out = {k: n * v / 8 for k, v in vals.items()}
    for k in ("dram_filter_read_bytes", "sram_filter_write_bytes"):
        out[k] = out[k] / layer.shared
    return out
