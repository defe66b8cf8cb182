"""Area (um^2) and leakage (mW) of every component of an :class:`~npukit.sim.arch.Arch`.

Units: area in um^2 per component (reports show mm^2 = 1e6 um^2), leakage power in mW (static energy =
leakage x run time: 1 mW x 1 s = 1e9 pJ). The figures are per instance; :func:`arch_area` multiplies by
the instance counts of the arch (rows x cols PEs, one of each SRAM, ``vector.lanes`` lanes).

**Sources and scaling rules** (the numbers live in the energy table's ``[area]`` section; the shipped
tables cite them there, and :data:`DEFAULT_AREA` is the same data):

* Logic at 40 nm from the Aladdin tables as Accelergy ships them (Shao et al., "Aladdin: a pre-RTL,
  power-performance accelerator simulator", ISCA 2014; accelergy-aladdin-plug-in / hwcomponents-library
  ``aladdin.py``): 32-bit adder 278 um^2 and 2.40e-3 mW leakage, linear in width; 32x32-bit multiplier
  6,350 um^2 and 8.0e-2 mW, linear in each operand width (quadratic for a square one); 1-bit register
  5.98 um^2, linear in width. Aladdin's own ``power_func.h`` gives the register 7.4e-5 mW leakage per
  bit (40 nm), used here.
* Floating point: Horowitz ISSCC 2014 (45 nm) areas, fp16 add 1,360 / mult 1,640 um^2, fp32 add 4,184 /
  mult 7,700 um^2. Their leakage is an **estimate**: the area times the leakage density of Aladdin's
  multiplier (8.0e-2 mW / 6,350 um^2 = 1.26e-5 mW per um^2).
* SRAM: CACTI via Accelergy, 40 nm: the eyeriss-like exercise of Accelergy
  (timeloop-accelergy-exercises, ``04_eyeriss_like/ref-output/ART_summary.yaml``) gives a 64 x 1,024
  (8 KiB, 2 banks) buffer 60,965.6 um^2 and a 64 x 12,800 (100 KiB) one 774,388 um^2: 0.930 and 0.945
  um^2 per bit. npukit uses 0.94 um^2 per bit, linear in capacity (Accelergy's CACTI depth rule:
  ``cacti_depth_area`` and ``cacti_depth_leak`` are linear in depth). Each port beyond the first adds
  ``sram_port_factor`` (0.5: an **estimate**, one more word line and bit-line pair per cell) of the
  one-port area and leakage. SRAM leakage per bit is an **estimate**: 7.4e-6 mW per bit, a tenth of
  Aladdin's flip-flop (a 6-transistor cell against a ~20-transistor flip-flop, with high-Vt array
  devices); no cited per-bit figure.
* Interconnect: the NoC between cores (``cores > 1`` only; a single array has none beyond its PEs'
  neighbour links, which the PE area holds) is Accelergy's XY NoC of the eyeriss-like exercise,
  1,575 um^2 per NoC (``ART_summary.yaml``), per core; its leakage is an estimate from the multiplier
  density above.
* Technology: the numbers are used at the table's ``technology_nm`` after area x (node / source
  node)^2 (ideal scaling, an **estimate**; Accelergy uses Stillmaker & Baas 2017 tables instead);
  leakage is not scaled (an estimate).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .arch import Arch
from .datapath import running_psum_bits
from .errors import EnergyTableError

# key -> (value, unit/meaning); every key is a number >= 0
AREA_KEYS: dict[str, str] = {
    "source_nm": "technology node of the figures below (nm)",
    "adder_um2_per_bit": "integer adder area per bit of width (um^2)",
    "adder_mw_per_bit": "integer adder leakage per bit of width (mW)",
    "mult_um2_per_bit2": "integer multiplier area per a x b bit^2 (um^2)",
    "mult_mw_per_bit2": "integer multiplier leakage per a x b bit^2 (mW)",
    "register_um2_per_bit": "flip-flop area per bit (um^2)",
    "register_mw_per_bit": "flip-flop leakage per bit (mW)",
    "fp16_add_um2": "fp16 adder area (um^2)", "fp16_mult_um2": "fp16 multiplier area (um^2)",
    "fp32_add_um2": "fp32 adder area (um^2)", "fp32_mult_um2": "fp32 multiplier area (um^2)",
    "fp_mw_per_um2": "floating-point leakage density (mW per um^2)",
    "sram_um2_per_bit": "SRAM area per bit, one port (um^2)",
    "sram_mw_per_bit": "SRAM leakage per bit, one port (mW)",
    "sram_port_factor": "extra area and leakage per port beyond the first (fraction of one port's)",
    "noc_um2_per_core": "network-on-chip area per core when cores > 1 (um^2)",
    "noc_mw_per_core": "network-on-chip leakage per core when cores > 1 (mW)",
}

_ALADDIN = "Aladdin (Shao et al., ISCA 2014) 40 nm tables as in Accelergy's aladdin plug-in"
DEFAULT_AREA: dict[str, Any] = {
    "source_nm": 40.0,
    "adder_um2_per_bit": 278.0 / 32, "adder_mw_per_bit": 2.40e-3 / 32,
    "mult_um2_per_bit2": 6350.0 / 1024, "mult_mw_per_bit2": 8.0e-2 / 1024,
    "register_um2_per_bit": 5.98, "register_mw_per_bit": 7.4e-5,
    "fp16_add_um2": 1360.0, "fp16_mult_um2": 1640.0, "fp32_add_um2": 4184.0, "fp32_mult_um2": 7700.0,
    "fp_mw_per_um2": 8.0e-2 / 6350.0,
    "sram_um2_per_bit": 0.94, "sram_mw_per_bit": 7.4e-6, "sram_port_factor": 0.5,
    "noc_um2_per_core": 1575.0, "noc_mw_per_core": 1575.0 * 8.0e-2 / 6350.0,
    "source": f"{_ALADDIN}; Horowitz ISSCC 2014 fp areas; CACTI SRAM area via Accelergy's eyeriss-like "
              "exercise (0.94 um^2/bit at 40 nm); SRAM and fp leakage estimates (see npukit.sim.area)",
}


def parse_area_section(raw: Any, origin: str) -> dict[str, Any]:
    """Validate an energy table's ``[area]`` section (keys of :data:`AREA_KEYS`, each a number >= 0,
    plus a required ``source``); missing keys take :data:`DEFAULT_AREA`'s value."""
    if not isinstance(raw, dict):
        raise EnergyTableError(f"energy table {origin}: 'area' must be an [area] section")
    out = dict(DEFAULT_AREA)
    for key, v in raw.items():
        if key == "source":
            continue
        if key not in AREA_KEYS:
            raise EnergyTableError(f"energy table {origin}: unknown key 'area.{key}' (known: {', '.join(AREA_KEYS)}, source)")
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
            raise EnergyTableError(f"energy table {origin}: 'area.{key}' must be a finite number >= 0, got {v!r}")
        out[key] = float(v)
    if not str(raw.get("source", "")).strip():
        raise EnergyTableError(f"energy table {origin}: 'area.source' is missing; cite where the values come from")
    out["source"] = str(raw["source"])
    return out


@dataclass(frozen=True)
class ComponentArea:
    """One component of an arch: ``count`` instances of ``area_um2`` and ``leakage_mw`` each."""

    component: str
    count: int
    area_um2: float
    leakage_mw: float

    @property
    def total_um2(self) -> float:
        return self.count * self.area_um2

    @property
    def total_mw(self) -> float:
        return self.count * self.leakage_mw


def node_scale(rules: dict[str, Any], technology_nm: float | None) -> float:
    """Area factor from the rules' node to the table's: (node / source node)^2 (ideal scaling, an estimate)."""
    if not technology_nm:
        return 1.0
    return (float(technology_nm) / rules["source_nm"]) ** 2


def sram_area(rules: dict[str, Any], capacity_bytes: float, ports: int = 1) -> tuple[float, float]:
    """(um^2, mW) of one SRAM of ``capacity_bytes`` with ``ports`` ports, at the rules' node: linear in
    capacity, plus ``sram_port_factor`` per extra port."""
    bits = 8.0 * capacity_bytes
    f = 1.0 + rules["sram_port_factor"] * (ports - 1)
    return bits * rules["sram_um2_per_bit"] * f, bits * rules["sram_mw_per_bit"] * f


def mac_area(rules: dict[str, Any], a_bits: int, b_bits: int, acc_bits: int) -> tuple[float, float]:
    """(um^2, mW) of an integer MAC: an a x b multiplier plus an ``acc_bits`` adder."""
    return (rules["mult_um2_per_bit2"] * a_bits * b_bits + rules["adder_um2_per_bit"] * acc_bits,
            rules["mult_mw_per_bit2"] * a_bits * b_bits + rules["adder_mw_per_bit"] * acc_bits)


def lane_area(rules: dict[str, Any], number: str, bits: int) -> tuple[float, float]:
    """(um^2, mW) of one vector lane: an adder and a multiplier at ``bits`` (fp16/fp32 or integer)."""
    if number == "fp":
        um2 = rules[f"fp{bits}_add_um2"] + rules[f"fp{bits}_mult_um2"]
        return um2, um2 * rules["fp_mw_per_um2"]
    return mac_area(rules, bits, bits, bits)


def component_areas(arch: Arch, rules: dict[str, Any] | None = None, technology_nm: float | None = None,
                    overrides: dict[str, dict[str, float]] | None = None, cores: int = 1) -> list[ComponentArea]:
    """Every component of ``arch`` with its instance count, area (um^2) and leakage (mW) per instance.

    ``rules``: an ``[area]`` section (default :data:`DEFAULT_AREA`); ``technology_nm``: the node to scale
    the area to; ``overrides``: component -> ``{"area_um2": .., "leakage_mw": ..}`` per instance (an energy
    table's ``[components.NAME]`` or a ZigZag YAML's ``area``), replacing the rule's figure; ``cores``:
    identical arrays sharing nothing but the NoC."""
    r = rules or DEFAULT_AREA
    s = node_scale(r, technology_nm)
    b = arch.bits
    pes = arch.rows * arch.cols
    reg = r["register_um2_per_bit"], r["register_mw_per_bit"]
    stationary = arch.stationary_words
    # the running psums' width (npukit.sim.psum_path's rule): the adder's carry chain spans it
    quantizing = b.psum_buffer < b.pe_psum and arch.psum_quant.policy != "none"
    held = running_psum_bits(b, arch.psum_quant.semantics, quantizing)
    rows: list[tuple[str, int, tuple[float, float]]] = [
        ("pe_array", pes, mac_area(r, b.input, b.weight, b.pe_psum)),
        ("input_registers", pes, (reg[0] * b.input * (stationary if arch.dataflow == "is" else 1),
                                  reg[1] * b.input * (stationary if arch.dataflow == "is" else 1))),
        ("weight_registers", pes, (reg[0] * b.weight * (stationary if arch.dataflow == "ws" else 1),
                                   reg[1] * b.weight * (stationary if arch.dataflow == "ws" else 1))),
        ("psum_registers", pes, (reg[0] * b.pe_psum, reg[1] * b.pe_psum)),
        ("ifmap_sram", 1, sram_area(r, arch.sram_bytes("ifmap"))),
        ("filter_sram", 1, sram_area(r, arch.sram_bytes("filter"))),
        ("psum_buffer", 1, sram_area(r, arch.sram_bytes("psum"))),
        ("ofmap_sram", 1, sram_area(r, arch.sram_bytes("ofmap"))),
        # one adder per column updates the running psums read from the psum buffer
        ("psum_adder", arch.cols, (r["adder_um2_per_bit"] * held, r["adder_mw_per_bit"] * held)),
        ("vector_unit", arch.vector.lanes, lane_area(r, arch.vector.number, arch.vector.bits)),
    ]
    if quantizing:
        m = arch.psum_quant.multiplier_bits
        rows.append(("psum_quantizer", arch.cols, mac_area(r, b.pe_psum, m, b.pe_psum)))
    out = [ComponentArea(c, n * cores, a * s, mw) for c, n, (a, mw) in rows]
    if cores > 1:
        out.append(ComponentArea("noc", cores, r["noc_um2_per_core"] * s, r["noc_mw_per_core"]))
    for comp, vals in (overrides or {}).items():
        for i, ca in enumerate(out):
            if ca.component == comp:
                out[i] = ComponentArea(comp, ca.count, vals.get("area_um2", ca.area_um2), vals.get("leakage_mw", ca.leakage_mw))
    return out


@dataclass(frozen=True)
class ArchArea:
    """Totals of :func:`component_areas`: area in um^2 (``mm2`` in mm^2) and leakage in mW."""

    components: list[ComponentArea]

    @property
    def um2(self) -> float:
        return sum(c.total_um2 for c in self.components)

    @property
    def mm2(self) -> float:
        return self.um2 / 1e6

    @property
    def leakage_mw(self) -> float:
        return sum(c.total_mw for c in self.components)

    def by_component(self) -> dict[str, tuple[float, float]]:
        """component -> (total um^2, total mW)."""
        return {c.component: (c.total_um2, c.total_mw) for c in self.components}


def arch_area(arch: Arch, table: Any = None, cores: int = 1) -> ArchArea:
    """Area and leakage of ``arch`` priced with ``table`` (an :class:`~npukit.sim.energy.EnergyTable`;
    default the arch's): the table's ``[area]`` rules (default :data:`DEFAULT_AREA`) at its node, and its
    per-component ``area_um2`` / ``leakage_mw``."""
    from .energy import EnergyTable, load_table

    tab = table if isinstance(table, EnergyTable) else load_table(table or arch.energy_table)
    rules = getattr(tab, "area", None) or DEFAULT_AREA
    overrides = {name: {k: v for k, v in sec.items() if k in ("area_um2", "leakage_mw")}
                 for name, sec in tab.components.items()}
    return ArchArea(component_areas(arch, rules, tab.technology_nm, overrides, cores))


def zigzag_area_overrides(memories: dict[str, Any], names: dict[str, str] | None = None) -> dict[str, dict[str, float]]:
    """npukit component -> ``{"area_um2": ...}`` from a parsed ZigZag hardware YAML's ``memories``
    section (``{name: {"area": mm^2?, ...}}``; ZigZag's ``area`` field is in the unit of its cost model,
    taken here as um^2 per instance). ``names`` maps ZigZag memory names to npukit components (default:
    same name). Memories without an ``area`` or not mapped are skipped."""
    out: dict[str, dict[str, float]] = {}
    for mem, spec in (memories or {}).items():
        if not isinstance(spec, dict) or "area" not in spec:
            continue
        a = spec["area"]
        if isinstance(a, bool) or not isinstance(a, int | float) or not math.isfinite(a) or a < 0:
            raise EnergyTableError(f"ZigZag memory '{mem}': area must be a number >= 0, got {a!r}")
        comp = (names or {}).get(mem, mem)
        out[comp] = {"area_um2": float(a)}
    return out
