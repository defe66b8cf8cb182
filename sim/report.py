"""Reports: one or more ledgers -> ``report.md``, a self-contained ``report.html`` and PNG figures.

Every number in a report comes from the ledgers (:mod:`npukit.sim.report_model`): cycles per scope
(clock cycles, by kind), energy per scope and component (pJ, shown in uJ) priced with an
:class:`EnergyTable`, MACs and DRAM bytes per scope, and the per-layer facts a simulator attached
(mapping efficiency). Latency in microseconds is cycles divided by the arch clock
(``meta['arch']['clock_ghz']``, GHz). With two or more ledgers the report compares each one with the
first (the baseline): in percent, ``100 * (x - x_baseline) / x_baseline``, and in uJ / cycles.

Sections: provenance (files, arch, energy-table sources), totals, comparison (with a
component-by-component delta table and per-group difference bars), roofline, and per group
(utilization, mapping efficiency, ops/byte, which roof bounds the group, energy; a column equal in
every group is stated once under the table instead). Groups are layers, blocks or operator types
(:mod:`npukit.sim.report_groups`); tables and figures show the ``top`` groups and one "other" row for
the rest, and ``per_<group>_<i>.csv`` lists every group of ledger i.

Everything (figures included) is rendered in memory first; the files are then written through
temp files and renamed into place, so a failure leaves no half-written report.

Labels, titles, workload, layer, arch and file names are user strings: every one is escaped where it
lands (Markdown table cells, headings, list items and captions; HTML; figure text, where ``$`` is not
mathtext), so no name can add or break a table, heading, list, emphasis, link, code span or tag.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from .bounded import short
from .energy import EnergyTable
from .errors import ConfigError, LedgerError
from .ledger import Ledger
from .output import check_out_dir, csv_text
from .power import PJ_PER_MW_S, Power
from .report_figures import component_order, render_figures
from .report_groups import DEFAULT_TOP, check_group, group_layers, is_other, top_groups
from .report_model import DEFAULT_TABLE, LayerView, Run, resolve_labels, resolve_table, summarise
from .report_render import (
    Block,
    bold,
    code,
    drop_constant_columns,
    fmt_cycles,
    fmt_delta_uj,
    fmt_pct,
    fmt_uj,
    fmt_us,
    pct,
    write_document,
)
from .terminal import escape_controls

__all__ = ["DEFAULT_TABLE", "write_report"]


def write_report(
    ledgers: list[Ledger],
    out_dir: str | Path,
    labels: list[str] | None = None,
    table: EnergyTable | str | None = None,
    depth: int = 2,
    title: str | None = None,
    *,
    sources: list[str | Path] | None = None,
    group: str = "layer",
    top: int = DEFAULT_TOP,
    block_depth: int | None = None,
    overwrite: bool = True,
) -> dict[str, Path]:
    """Write ``report.md``, ``report.html`` (figures embedded as base64 PNG) and the PNGs into ``out_dir``.

    ``ledgers``: one or more ledgers; the first is the baseline of the comparison. ``labels``: one
    distinct name per ledger (default: ``sources`` file stems, else ``meta['label']`` or
    ``workload@arch``). ``table``: energy table (name, path or object) for all ledgers; default each
    ledger's ``meta['energy_table']``, else ``horowitz45``. ``depth``: scope path components kept
    per layer (simulator scopes are ``<workload>/<layer>``: 2 = per layer). ``sources``: where the
    ledgers came from (file names), shown as provenance. ``group``: ``layer``, ``block`` or ``op``
    (operator type), see :mod:`npukit.sim.report_groups`; ``top``: groups shown in tables and figures
    before one "other" (1..60); ``block_depth``: name parts per block (default: up to the block index).
    ``overwrite``: False refuses (:class:`ConfigError`, nothing written) when any file the report would write
    already exists in ``out_dir`` (``npukit report`` without ``--overwrite``); True replaces them and removes the
    files an earlier report wrote there (its ``report.manifest.json``) that this one does not.

    Returns ``{'md': path, 'html': path, '<figure>.png': path, 'per_<group>_<i>.csv': path, ...}``; beside them
    ``report.manifest.json`` lists the files written.
    Raises :class:`ConfigError` (labels, depth, group, top, block_depth, out_dir), :class:`EnergyTableError`
    (table) or :class:`LedgerError` (ledger, its ``meta.ppa``).
    """
    ledgers = list(ledgers)
    if not ledgers:
        raise ConfigError("a report needs at least one ledger; pass ledger JSON files written by npukit sim")
    for i, led in enumerate(ledgers):
        if not isinstance(led, Ledger):
            raise LedgerError(f"ledger #{i + 1} is a {type(led).__name__}, not a Ledger; load it with Ledger.load")
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise ConfigError(f"depth must be an integer >= 1 (scope path components per layer), got {depth!r}")
    check_group(group, top, block_depth)
    srcs = [str(s) for s in sources] if sources is not None else [""] * len(ledgers)
    if len(srcs) != len(ledgers):
        raise ConfigError(f"got {len(srcs)} sources for {len(ledgers)} ledgers; give one source per ledger")
    names = resolve_labels(ledgers, labels, srcs)
    out = check_out_dir(out_dir)  # before Path(): Path("") would silently be the current folder

    runs = [
        summarise(led, name, src, resolve_table(led, table, name), depth)
        for led, name, src in zip(ledgers, names, srcs, strict=True)
    ]
    for run in runs:
        _check_ppa(run)
    for run in runs:
        run.group, run.groups = group, group_layers(run.layers, group, block_depth)
    figures = render_figures(runs, top)  # name -> (png bytes, caption)
    doc = _document(runs, figures, depth, title, top)
    tables = {f"per_{group}_{i}.csv": _group_csv(run).encode("utf-8", "backslashreplace")
              for i, run in enumerate(runs, 1)}
    return write_document(out, doc, figures, tables, overwrite=overwrite, manifest=True)


PPA_FIELDS = ("area_mm2", "leakage_mw", "energy_dynamic_pj", "energy_static_pj", "power_avg_w", "power_peak_w",
              "gops_per_mm2", "tops_per_w")  # the Power and area table's columns


def _check_ppa(run: Run) -> None:
    """:class:`LedgerError` when a field of the ledger's ``meta.ppa`` that the report shows is present but not a
    finite number >= 0 (an edited ledger: ``"491"``, ``null``); a missing one shows as 0, as before."""
    ppa = run.ledger.meta.get("ppa")
    if not isinstance(ppa, dict):
        return
    for key in PPA_FIELDS:
        if key in ppa and (_float(ppa[key]) is None or ppa[key] < 0):
            raise LedgerError(f"ledger '{run.label}': meta.ppa.{key} must be a finite number >= 0, got "
                              f"{short(ppa[key])}; regenerate the ledger with npukit sim")


def _repriced_ppa(run: Run, ppa: dict[str, Any]) -> dict[str, Any]:
    """The ledger's stored PPA (priced at simulation time) with its dynamic energy, powers and TOP/s/W redone with
    the report's energy table when that prices the run differently (``--table``): the power is (dynamic + static
    energy) / time, the peak the highest layer's; area, leakage and GOP/s/mm^2 do not depend on the table. Before,
    the section kept the simulation's table while the totals above it used the report's."""
    stored = _float(ppa.get("energy_dynamic_pj"))
    hz = (run.clock_ghz or 0.0) * 1e9
    leak = _float(ppa.get("leakage_mw"))
    if stored is None or leak is None or hz <= 0 or run.cycles <= 0 or \
            abs(run.energy_pj - stored) <= 1e-9 * max(abs(stored), 1.0):
        return ppa
    secs = run.cycles / hz
    layers = summarise(run.ledger, run.label, run.source, run.table, 2).layers  # per layer, whatever --depth
    peak = max((Power(lv.total_cycles / hz, 0.0, lv.total_energy_pj, leak * lv.total_cycles / hz * PJ_PER_MW_S, 0.0,
                      0.0).avg_w for lv in layers if lv.total_cycles > 0), default=0.0)
    area = _float(ppa.get("area_mm2")) or 0.0
    macs = (_float(ppa.get("gops_per_mm2")) or 0.0) * area * 1e9 * secs / 2  # the stored rate: no table in it
    return {**ppa, **Power(secs, macs, run.energy_pj, leak * secs * PJ_PER_MW_S, area, peak).columns()}


def _float(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def _figure(doc: list[Block], figures: dict[str, tuple[bytes, str]], name: str) -> None:
    if name in figures:
        doc.append(("figure", name, figures[name][1]))


def _document(runs: list[Run], figures: dict[str, tuple[bytes, str]], depth: int, title: str | None,
              top: int) -> list[Block]:
    workloads = list(dict.fromkeys(str(r.ledger.meta["workload"]) for r in runs if r.ledger.meta.get("workload")))
    if title is None:
        title = "npukit report" + (f": {', '.join(workloads)}" if workloads else "")
        title += f" ({len(runs)} ledgers)" if len(runs) > 1 else ""
    doc: list[Block] = [("h1", str(title))]
    _provenance(doc, runs, depth)

    # -- totals
    doc.append(("h2", "Totals"))
    kinds = list(dict.fromkeys(k for run in runs for k in run.kinds))
    headers = ["ledger", "total energy (uJ)", "on-chip energy (uJ)", "total_cycles", *(f"{k}_cycles" for k in kinds),
               "latency (us)", "arch"]
    rows = [
        [run.label, fmt_uj(run.energy_pj), fmt_uj(run.energy_onchip_pj), fmt_cycles(run.cycles),
         *(fmt_cycles(run.kind_cycles(k)) for k in kinds),
         fmt_us(run.latency_us(run.cycles)), run.arch_summary]
        for run in runs
    ]
    doc.append(("table", headers, rows))
    ppa = [(run.label, _repriced_ppa(run, run.ledger.meta["ppa"])) for run in runs
           if isinstance(run.ledger.meta.get("ppa"), dict)]
    if ppa:  # ledgers of npukit sim carry area and power (npukit.sim.power); older ones do not
        doc.append(("h2", "Power and area"))
        doc.append(("p", "Area and leakage from cited per-component rules (docs/ppa.md), as simulated; dynamic energy "
                         "priced with this report's energy table (as the totals); static energy = leakage x run "
                         "time; peak power = the highest layer's average power."))
        doc.append(("table", ["ledger", "area (mm^2)", "leakage (mW)", "dynamic energy (uJ)", "static energy (uJ)",
                              "avg power (W)", "peak power (W)", "GOP/s/mm^2", "TOP/s/W"],
                    [[label, f"{p.get('area_mm2', 0):,.3f}", f"{p.get('leakage_mw', 0):,.1f}",
                      fmt_uj(p.get("energy_dynamic_pj", 0)), fmt_uj(p.get("energy_static_pj", 0)),
                      f"{p.get('power_avg_w', 0):,.3f}", f"{p.get('power_peak_w', 0):,.3f}",
                      f"{p.get('gops_per_mm2', 0):,.1f}", f"{p.get('tops_per_w', 0):,.3f}"] for label, p in ppa]))

    if len(runs) >= 2:
        _comparison(doc, runs, figures)

    if "roofline.png" in figures:
        doc.append(("h2", "Roofline"))
        doc.append(("p", f"Each {runs[0].group} is a point: x = operations (2 per MAC) per DRAM byte, y = operations per clock "
                         "cycle achieved (compute + stall cycles). The roofs are the array's peak (2 x rows x cols "
                         "ops per cycle; a multi-core chip: all its MAC cores' PEs) and the DRAM bandwidth (bytes per "
                         "cycle; all channels) x intensity; layers left of the ridge are memory-bound, right of it "
                         "compute-bound."))
        _figure(doc, figures, "roofline.png")

    for i, run in enumerate(runs, 1):
        mc = run.multicore
        if mc is not None and f"timeline_{i}.png" in figures:
            doc.append(("h2", escape_controls(f"Multi-core schedule of {run.label}: {mc['schedule']}")))
            busy = ", ".join(f"{n} {b:,.0f}" for n, b in zip(mc["core_names"], mc["core_busy_cycles"], strict=True))
            doc.append(("p", escape_controls(
                f"Per-core busy cycles: {busy}. Interconnect: {mc['interconnect_bytes']:,.0f} bytes, "
                f"{mc['interconnect_exposed_cycles']:,.0f} cycles on the critical path.")))
            _figure(doc, figures, f"timeline_{i}.png")
        _per_group(doc, run, i, figures, top)
    return doc


def _provenance(doc: list[Block], runs: list[Run], depth: int) -> None:
    doc.append(("h2", "Provenance"))
    items = []
    for i, run in enumerate(runs):
        role = " (baseline)" if i == 0 and len(runs) > 1 else ""
        src: list[Any] = ["file ", code(run.source)] if run.source else ["in-memory ledger"]
        items.append(
            [bold(run.label), f"{role}: ", *src, f"; workload {run.ledger.meta.get('workload', 'unknown')}; "
             f"{_arch_detail(run)}; energy table {run.table.name}"]
        )
    doc.append(("list", items))
    group = runs[0].group
    how = {"layer": "each layer on its own",
           "block": "layers grouped by the block their name puts them in (model.layers.3, layer2.0)",
           "op": "layers grouped by operator type (the last part of their name: q_proj, softmax, conv1)"}[group]
    doc.append(("p", f"Layers are ledger scopes truncated to {depth} path component(s); grouped by {group}: {how}. "
                     "Energy in uJ (1 uJ = 10^6 pJ), latency in clock cycles (and in microseconds at the arch "
                     "clock in the totals)."))
    seen: set[str] = set()
    for run in runs:
        key = f"{run.table.name}|{run.table.path}"
        if key in seen:
            continue
        seen.add(key)
        tab = run.table
        tech = f", {tab.technology_nm:g} nm" if isinstance(tab.technology_nm, int | float) else ""
        desc = f": {tab.description}" if tab.description else ""
        doc.append(("h3", f"Energy table {tab.name}{tech}{desc} ({tab.path})"))
        doc.append(("list", [[code(sec), f": {src}"] for sec, src in tab.sources().items()]))


def _comparison(doc: list[Block], runs: list[Run], figures: dict[str, tuple[bytes, str]]) -> None:
    base = runs[0]
    doc.append(("h2", f"Comparison with the baseline {base.label}"))
    if len({(r.table.name, r.table.path) for r in runs}) > 1:
        doc.append(("p", "Note: the ledgers are priced with different energy tables; pass --table to use one."))
    doc.append(("p", "Difference = 100 * (ledger - baseline) / baseline."))
    headers = ["metric", f"{base.label} (baseline)"]
    for run in runs[1:]:
        headers += [run.label, f"{run.label} vs baseline"]
    metrics: list[tuple[str, Any, Any]] = [
        ("total energy (uJ)", lambda r: r.energy_pj, fmt_uj),
        ("on-chip energy (uJ)", lambda r: r.energy_onchip_pj, fmt_uj),
        ("total_cycles", lambda r: r.cycles, fmt_cycles),
    ]
    comps = component_order(runs)
    for comp in comps:
        metrics.append((f"{comp} energy (uJ)", lambda r, c=comp: r.components.get(c, 0.0), fmt_uj))
    rows = []
    for name, get, fmt in metrics:
        row = [name, fmt(get(base))]
        for run in runs[1:]:
            row += [fmt(get(run)), pct(get(run), get(base))]
        rows.append(row)
    doc.append(("table", headers, rows))
    _figure(doc, figures, "compare_components.png")

    for i, run in enumerate(runs[1:], 2):
        doc.append(("h3", f"Component by component: {run.label} minus {base.label}"))
        total = run.energy_pj - base.energy_pj
        doc.append(("p", "Delta = ledger - baseline (uJ); share = the component's delta / the total delta "
                         f"({fmt_delta_uj(total)} uJ), largest change first."))
        deltas = sorted(comps, key=lambda c: -abs(run.components.get(c, 0.0) - base.components.get(c, 0.0)))
        rows = []
        for comp in deltas:
            b, r = base.components.get(comp, 0.0), run.components.get(comp, 0.0)
            rows.append([comp, fmt_uj(b), fmt_uj(r), fmt_delta_uj(r - b), pct(r, b),
                         fmt_pct((r - b) / total) if total and r != b else ("0.0%" if total else "n/a")])
        doc.append(("table", ["component", f"{base.label} (uJ)", f"{run.label} (uJ)", "delta (uJ)", "delta (%)",
                              "share of total delta"], rows))
        _figure(doc, figures, f"layer_delta_{i}.png")


def _group_row(run: Run, v: LayerView) -> list[str]:
    tot = v.total_energy_pj
    onchip = {k: e for k, e in v.energy_pj.items() if k != "dram"}
    on_tot = sum(onchip.values())
    if onchip and on_tot > 0:
        comp, e = max(onchip.items(), key=lambda kv: kv[1])
        top_comp = f"{comp} ({100 * e / on_tot:.1f}%)"
    else:
        top_comp = "-"
    ai = v.intensity
    return [
        v.scope, str(v.facts.get("layers", 1)), str(v.facts.get("kind", "-")), str(v.facts.get("mapping", "-")),
        fmt_cycles(v.total_cycles), fmt_cycles(v.cycles.get("stall", 0.0)),
        *((fmt_pct(run.utilization(v)), fmt_pct(run.mapping_efficiency(v))) if v.macs > 0 else ("-", "-")),
        "-" if ai is None else f"{ai:,.1f}", run.bound(v), fmt_uj(tot),
        fmt_pct(tot / run.energy_pj) if run.energy_pj > 0 else "-",
        fmt_pct(v.energy_pj.get("dram", 0.0) / tot) if tot > 0 else "-", top_comp,
    ]


def _per_group(doc: list[Block], run: Run, i: int, figures: dict[str, tuple[bytes, str]], top: int) -> None:
    noun = run.group
    doc.append(("h2", f"Per {noun}: {run.label}"))
    heads = {layer.scope.split("/", 1)[0] for layer in run.layers}
    shown = top_groups(run.groups, top, "energy", noun)
    where = ["Layers of ", code(next(iter(heads))), " (scopes under it). "] if (
        len(heads) == 1 and all("/" in layer.scope for layer in run.layers)) else []
    which = (f"All {len(shown)} {noun}s, in model order." if len(shown) == len(run.groups) else
             f"The {top} of {len(run.groups)} {noun}s with the most energy, largest first, and the other "
             f"{len(run.groups) - top} as one row.")
    hint = ""
    if shown and is_other(shown[-1]) and run.energy_pj > 0:
        share = shown[-1].total_energy_pj / run.energy_pj
        hint = f" The other row holds {fmt_pct(share)} of the energy" + (
            "; --group block or --group op sums the layers by block or operator type." if noun == "layer" else ".")
    doc.append(("p", [*where, which, hint, " Every ", noun, ": ", code(f"per_{noun}_{i}.csv"), "."]))
    headers = [noun, "layers", "kind", "mapping", "total_cycles", "stall_cycles", "utilization", "mapping efficiency",
               "ops/byte", "bound", "energy (uJ)", "share of energy", "DRAM share", "top on-chip (share of on-chip)"]
    rows = [_group_row(run, v) for v in shown]
    if shown and is_other(shown[-1]):
        rows[-1][1:4] = [rows[-1][1], "-", "-"]
    headers, rows, constant = drop_constant_columns(headers, rows)
    doc.append(("table", headers, rows))
    if constant:
        doc.append(("p", f"Same in every {noun}: " + "; ".join(constant) + "."))
    doc.append(("p", "Utilization = MACs / (PEs x compute cycles); mapping efficiency = the share of the PEs a "
                     "fold covers (MAC-weighted over a group's layers); ops/byte = 2 x MACs / DRAM bytes; bound = the "
                     "roof that limits it (compute or memory, see the roofline); '-': not applicable (no MACs), "
                     "'n/a': not in the ledger."))
    for name in (f"energy_per_layer_{i}.png", f"latency_per_layer_{i}.png", f"utilization_per_layer_{i}.png"):
        _figure(doc, figures, name)


def _group_csv(run: Run) -> str:
    """Every group of ``run``: cycles by kind, MACs, DRAM bytes, energy per component (pJ)."""
    comps = list(run.components)
    rows = []
    for v in run.groups:
        util = run.utilization(v) if v.macs > 0 else None
        row: dict[str, Any] = {
            run.group: v.scope, "layers": v.facts.get("layers", 1), "kind": v.facts.get("kind", ""),
            "mapping": v.facts.get("mapping", ""), "total_cycles": v.total_cycles,
            **{f"{k}_cycles": v.cycles.get(k, 0.0) for k in run.kinds}, "macs": v.macs, "dram_bytes": v.dram_bytes,
            "utilization": "" if util is None else util,
            "mapping_efficiency": "" if run.mapping_efficiency(v) is None else run.mapping_efficiency(v),
            "energy_pj": v.total_energy_pj, **{f"{c}_pj": v.energy_pj.get(c, 0.0) for c in comps},
        }
        rows.append(row)
    return csv_text(rows) if rows else f"{run.group}\n"


def _arch_detail(run: Run) -> str:
    a = run.arch
    if a is None:
        return "arch: unknown"
    parts = [f"arch {run.arch_summary}"]
    bits = a.get("bits")
    if isinstance(bits, dict):
        parts.append("bits " + ", ".join(f"{k} {v}" for k, v in bits.items()))
    sram = a.get("sram_kib")
    if isinstance(sram, dict):
        parts.append("SRAM KiB " + ", ".join(f"{k} {v:g}" if isinstance(v, int | float) else f"{k} {v}" for k, v in sram.items()))
    if "timing" in a:
        parts.append(f"timing {a['timing']}")
    if run.multicore is not None and run.dram_bytes_per_cycle:  # the chip's channels, not one core's port
        parts.append(f"{run.dram_bytes_per_cycle:g} DRAM bytes/cycle (all channels)")
    for key, unit in (("dram_bandwidth_bytes_per_cycle", "DRAM bytes/cycle"), ("clock_ghz", "GHz clock")):
        if key in a and not (run.multicore is not None and key == "dram_bandwidth_bytes_per_cycle"):
            v = a[key]
            parts.append(f"{v:g} {unit}" if isinstance(v, int | float) and not isinstance(v, bool) else f"{key} {v}")
    return "; ".join(parts)


