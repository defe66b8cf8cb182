"""Report inputs: ledgers -> priced, per-layer summaries (:class:`Run`, :class:`LayerView`) for the report.

Every number comes from the ledger: cycles per scope and kind (clock cycles), energy per scope and
component (pJ, priced with an :class:`EnergyTable`), MACs (``pe_array`` ``mac`` actions) and DRAM bytes
(``dram`` actions x their bits / 8) per scope, and the facts a simulator attached to each scope
(:meth:`Ledger.describe`: kind, mapping, mapping efficiency; ledgers written before those facts existed
show ``n/a`` for mapping efficiency). From the arch in ``meta['arch']``: utilization = MACs / (rows x
cols x compute cycles); the roofline's peak = 2 x rows x cols ops per cycle (a MAC is two operations)
and its memory roof = ops/byte x DRAM bytes per cycle.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .energy import EnergyTable, load_table
from .errors import ConfigError, EnergyTableError, LedgerError
from .ledger import Ledger
from .multicore_meta import check_multicore_meta

DEFAULT_TABLE = "horowitz45"


def _num(v: Any) -> float | None:
    ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v > 0
    return float(v) if ok else None


@dataclass
class LayerView:
    """One scope of one ledger (cycles in clock cycles, energy in pJ, bytes, MACs)."""

    scope: str
    cycles: dict[str, float]  # kind -> clock cycles
    energy_pj: dict[str, float]  # component -> pJ
    macs: float = 0.0
    dram_bytes: float = 0.0
    facts: dict[str, Any] = field(default_factory=dict)  # kind, mapping, mapping_efficiency (Ledger.describe)

    @property
    def total_cycles(self) -> float:
        return sum(self.cycles.values())

    @property
    def total_energy_pj(self) -> float:
        return sum(self.energy_pj.values())

    @property
    def ops(self) -> float:
        """Operations: 2 per MAC."""
        return 2.0 * self.macs

    @property
    def intensity(self) -> float | None:
        """Operational intensity, ops per DRAM byte (None without DRAM traffic or MACs)."""
        return self.ops / self.dram_bytes if self.dram_bytes > 0 and self.macs > 0 else None

    @property
    def ops_per_cycle(self) -> float | None:
        """Achieved ops per clock cycle (compute + stall)."""
        return self.ops / self.total_cycles if self.total_cycles > 0 and self.macs > 0 else None


@dataclass
class Run:
    """One ledger, priced and summarised."""

    label: str
    source: str
    ledger: Ledger
    table: EnergyTable
    arch: dict[str, Any] | None
    layers: list[LayerView] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)  # cycle kinds, compute and stall first
    components: dict[str, float] = field(default_factory=dict)  # component -> total pJ
    group: str = "layer"  # how ``groups`` groups ``layers``: layer, block or op (npukit.sim.report_groups)
    groups: list[LayerView] = field(default_factory=list)  # the layers grouped, names without the workload
    multicore: dict[str, Any] | None = None  # meta['multicore'] checked (npukit.sim.multicore_meta), None: one core

    @property
    def energy_pj(self) -> float:
        return sum(self.components.values())

    @property
    def energy_onchip_pj(self) -> float:
        """Everything but DRAM (pJ)."""
        return sum(v for k, v in self.components.items() if k != "dram")

    @property
    def cycles(self) -> float:
        return sum(layer.total_cycles for layer in self.layers)

    def kind_cycles(self, kind: str) -> float:
        return sum(layer.cycles.get(kind, 0.0) for layer in self.layers)

    @property
    def clock_ghz(self) -> float | None:
        return _num((self.arch or {}).get("clock_ghz"))

    @property
    def pes(self) -> float | None:
        """PEs of the array, or of all MAC cores together for a multi-core ledger (None when unknown)."""
        if self.multicore is not None:
            return self.multicore.get("mac_pes")
        a = self.arch or {}
        r, c = _num(a.get("rows")), _num(a.get("cols"))
        return r * c if r and c else None

    @property
    def peak_ops_per_cycle(self) -> float | None:
        """2 x PEs (:attr:`pes`; None when the arch is unknown)."""
        return 2.0 * self.pes if self.pes else None

    @property
    def dram_bytes_per_cycle(self) -> float | None:
        """DRAM bytes per cycle: the arch's, or all channels of a multi-core chip together."""
        if self.multicore is not None:
            return self.multicore.get("dram_bytes_per_cycle")
        return _num((self.arch or {}).get("dram_bandwidth_bytes_per_cycle"))

    @property
    def ridge(self) -> float | None:
        """Ops/byte where the memory roof meets the compute roof."""
        peak, bw = self.peak_ops_per_cycle, self.dram_bytes_per_cycle
        return peak / bw if peak and bw else None

    def utilization(self, layer: LayerView) -> float | None:
        """MACs / (PEs x compute cycles), at most 1 (a multi-core ledger: the PEs of all its MAC cores); None without
        MACs, compute cycles or arch."""
        comp = layer.cycles.get("compute", 0.0)
        if not self.pes or layer.macs <= 0 or comp <= 0:
            return None
        return min(1.0, layer.macs / (self.pes * max(comp, math.ceil(layer.macs / self.pes))))

    @staticmethod
    def mapping_efficiency(layer: LayerView) -> float | None:
        v = layer.facts.get("mapping_efficiency")
        return float(v) if isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v <= 1 else None

    def bound(self, layer: LayerView) -> str:
        """``memory`` or ``compute`` (which roof is lower at the layer's intensity), else ``-``."""
        ai, ridge = layer.intensity, self.ridge
        if ridge is None or layer.macs <= 0:
            return "-"
        return "compute" if ai is None or ai >= ridge else "memory"

    def latency_us(self, cycles: float) -> float | None:
        """Cycles -> microseconds at the arch clock (None when the clock is unknown)."""
        clk = self.clock_ghz
        return cycles / (clk * 1e3) if clk else None

    @property
    def arch_summary(self) -> str:
        """Name, RxC, dataflow and psum bits, e.g. ``npu128 (128x128 PEs, WS dataflow, psum 32 bits)``; a multi-core
        chip's name and MAC cores first, e.g. ``quad128: 4 MAC cores (262,144 PEs), each npu128 (...)``."""
        a = self.arch
        if a is None:
            return "arch: unknown"
        if self.multicore is not None:
            mc = self.multicore
            macs = mc["core_kinds"].count("mac")
            pes = f" ({mc['mac_pes']:,.0f} PEs)" if mc.get("mac_pes") else ""
            return f"{mc['arch_name']}: {macs} MAC core{'s' if macs != 1 else ''}{pes}, the first {self._core_summary()}"
        return self._core_summary()

    def _core_summary(self) -> str:
        a = self.arch or {}
        bits = a.get("bits") if isinstance(a.get("bits"), dict) else {}
        df = a.get("dataflow")
        return (
            f"{a.get('name', '?')} ({a.get('rows', '?')}x{a.get('cols', '?')} PEs, "
            f"{str(df).upper() if df else '?'} dataflow, psum buffer {bits.get('psum_buffer', '?')} bits)"
        )

    @property
    def caption_tail(self) -> str:
        arch = self.arch_summary if self.arch is None else f"arch {self.arch_summary}"
        return f"{arch}; energy table {self.table.name}"


def resolve_labels(ledgers: list[Ledger], labels: list[str] | None, sources: list[str]) -> list[str]:
    if labels is not None:
        labels = [str(x).strip() for x in labels]
        if len(labels) != len(ledgers):
            raise ConfigError(
                f"got {len(labels)} labels for {len(ledgers)} ledgers; give exactly one label per ledger (--labels a,b)"
            )
        if any(not x for x in labels):
            raise ConfigError("labels must not be empty; give one non-empty label per ledger (--labels a,b)")
        if len(set(labels)) != len(labels):
            raise ConfigError(f"labels must be distinct, got {', '.join(labels)}; rename the duplicates")
        return labels
    stems = [Path(s).stem.removesuffix(".ledger") for s in sources]  # npukit sim writes NAME.ledger.json
    if all(stems) and len(set(stems)) == len(stems):
        return stems
    base = [_auto_label(led, i) for i, led in enumerate(ledgers)]
    if len(set(base)) == len(base):
        return base
    # Same workload and arch name: tell them apart by the arch fields that differ from the first.
    first = _flatten(_arch_of(ledgers[0], {}))
    out = []
    for i, (led, b) in enumerate(zip(ledgers, base, strict=True)):
        diff = [f"{k}={v}" for k, v in _flatten(_arch_of(led, {})).items() if first.get(k) != v]
        out.append(f"{b} {' '.join(diff)}" if diff else (b if i == 0 else f"{b} #{i + 1}"))
    if len(set(out)) != len(out):
        out = [f"{b} #{i + 1}" for i, b in enumerate(out)]
    return out


def _auto_label(led: Ledger, index: int) -> str:
    """``meta['label']``, else ``workload@arch``, ``workload`` or ``ledger N``."""
    meta = led.meta if isinstance(led.meta, dict) else {}
    if meta.get("label"):
        return str(meta["label"])
    workload, arch = meta.get("workload"), _arch_of(led, {}).get("name")
    if workload and arch:
        return f"{workload}@{arch}"
    return str(workload or arch or f"ledger {index + 1}")


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _arch_of(led: Ledger, default: Any = None) -> Any:
    a = led.meta.get("arch") if isinstance(led.meta, dict) else None
    return a if isinstance(a, dict) else default


def resolve_table(led: Ledger, table: EnergyTable | str | None, label: str) -> EnergyTable:
    if isinstance(table, EnergyTable):
        return table
    if table is not None:
        return load_table(str(table))
    name = led.meta.get("energy_table") if isinstance(led.meta, dict) else None
    data = led.meta.get("energy_table_data") if isinstance(led.meta, dict) else None
    if isinstance(data, dict):  # a chip's own table, carried by the ledger (validated like a table file)
        return EnergyTable.from_dict(data, origin=f"ledger '{label}'")
    if name is None:
        return load_table(DEFAULT_TABLE)
    try:
        return load_table(str(name))
    except EnergyTableError as exc:
        raise EnergyTableError(f"ledger '{label}' names energy table '{name}' ({exc}); pass --table") from None


def _check_numbers(led: Ledger, label: str) -> None:
    def bad(v: Any) -> bool:
        return isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0

    for key, n in led.counts.items():
        if bad(n):
            raise LedgerError(f"ledger '{label}': count of {key[1]}.{key[2]} in '{key[0]}' is {n!r}, not a number >= 0")
    for key, c in led.cycles.items():
        if bad(c):
            raise LedgerError(f"ledger '{label}': cycles of kind '{key[1]}' in '{key[0]}' are {c!r}, not a number >= 0")


def summarise(led: Ledger, label: str, source: str, table: EnergyTable, depth: int) -> Run:
    """Price ``led`` with ``table`` and group it into layers (scopes truncated to ``depth`` components; a multi-core
    ledger's per-core scopes folded into their layer first, :func:`fold_core_scopes`)."""
    _check_numbers(led, label)
    run = Run(label=label, source=source, ledger=led, table=table, arch=_arch_of(led))
    led = fold_core_scopes(led)
    matrix = led.energy_matrix(table, depth)  # scope -> component -> pJ
    kinds: dict[str, None] = {"compute": None, "stall": None}
    by_kind: dict[str, dict[str, float]] = {}
    for (_, kind) in led.cycles:
        kinds.setdefault(kind, None)
    for kind in kinds:
        by_kind[kind] = led.cycles_by_scope(depth, kind)
    run.kinds = [k for k in kinds if k in ("compute", "stall") or any(by_kind[k].values())]
    macs: dict[str, float] = {}
    dram: dict[str, float] = {}
    for (sc, comp, act, bits), n in led.counts.items():
        key = _truncate(sc, depth)
        if comp == "pe_array" and act in ("mac", "fp_mac"):
            macs[key] = macs.get(key, 0.0) + n
        elif comp == "dram":
            dram[key] = dram.get(key, 0.0) + n * bits[0] / 8
    facts = _facts_by_scope(led, depth)
    comps: dict[str, float] = {}
    for scope in led.scopes(depth):
        cyc = {k: by_kind[k].get(scope, 0.0) for k in run.kinds}
        energy = matrix.get(scope, {})
        fact = facts.get(scope, {})
        # MACs: the array's counted MAC actions, else the simulator's fact (a loop-nest core records MAC energy)
        n_macs = macs.get(scope, 0.0) or (_num(fact.get("macs")) or 0.0)
        run.layers.append(LayerView(scope, cyc, energy, n_macs, dram.get(scope, 0.0), fact))
        for comp, e in energy.items():
            comps[comp] = comps.get(comp, 0.0) + e
    run.components = comps
    run.multicore = check_multicore_meta(led.meta.get("multicore"), run.cycles, label)
    return run


def fold_core_scopes(led: Ledger) -> Ledger:
    """``led`` with the counts a multi-core simulation recorded per core (``<workload>/<layer>/<core>``, a layer
    split over cores) moved to their layer's scope (``<workload>/<layer>``, where its cycles and facts are), so a
    layer's cycles, energy, MACs and DRAM bytes group together at every depth; ``led`` itself when it is not a
    multi-core ledger or records nothing per core. A scope is folded only when its last part(s) name one of the
    ledger's cores (``meta.multicore.core_names``) and the rest is a scope with cycles or facts. Before, ``--depth 3``
    showed each layer's cycles in one row and its energy in per-core rows with no cycles."""
    mc = led.meta.get("multicore") if isinstance(led.meta, dict) else None
    names = mc.get("core_names") if isinstance(mc, dict) else None
    if not isinstance(names, list) or not all(isinstance(n, str) and n.strip("/") for n in names):
        return led
    layers = {sc for sc, _ in led.cycles} | set(led.layers)
    cores = set(names)
    nested = [n for n in cores if "/" in n]  # a core name with a slash spans several scope parts

    def layer_of(scope: str) -> str | None:
        parent, _, last = scope.rpartition("/")
        if last in cores and parent in layers:
            return parent
        for n in nested:
            if scope.endswith("/" + n) and scope[: -len(n) - 1] in layers:
                return scope[: -len(n) - 1]
        return None

    moved = {sc: layer for sc in {k[0] for k in led.counts} if (layer := layer_of(sc)) is not None}
    if not moved:
        return led
    out = Ledger(meta=led.meta)
    out.components, out.cycles, out.layers = led.components, led.cycles, led.layers
    for (sc, comp, act, bits), n in led.counts.items():
        out.counts[(moved.get(sc, sc), comp, act, bits)] += n
    return out


def _truncate(scope: str, depth: int) -> str:
    return "/".join(scope.split("/")[:depth])


def _facts_by_scope(led: Ledger, depth: int) -> dict[str, dict[str, Any]]:
    """Each truncated scope's facts: those of its one described scope, or for several, the kinds
    joined and the mapping efficiency averaged weighted by each scope's MACs."""
    groups: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for sc, facts in led.layers.items():
        groups.setdefault(_truncate(sc, depth), []).append((sc, facts))
    out: dict[str, dict[str, Any]] = {}
    for key, items in groups.items():
        if len(items) == 1:
            out[key] = dict(items[0][1])
            continue
        kinds = sorted({str(f.get("kind")) for _, f in items if f.get("kind") is not None})
        merged: dict[str, Any] = {"kind": "+".join(kinds)} if kinds else {}
        macs = [f.get("macs") for _, f in items]
        if any(_num(m) for m in macs):
            merged["macs"] = sum(_num(m) or 0.0 for m in macs)
        weights = [(led.count("pe_array", "mac", sc), f.get("mapping_efficiency")) for sc, f in items]
        weights = [(w, e) for w, e in weights if isinstance(e, int | float) and w > 0]
        if weights:
            merged["mapping_efficiency"] = sum(w * e for w, e in weights) / sum(w for w, _ in weights)
        out[key] = merged
    return out
