"""Reports: one or more ledgers -> ``report.md``, a self-contained ``report.html`` and PNG figures.

Every number in a report comes from the ledgers: cycles per scope (clock cycles, by kind) from
:meth:`Ledger.cycles_by_scope`, energy per scope and component (pJ, shown in uJ) from
:meth:`Ledger.energy_matrix` priced with an :class:`EnergyTable`. Latency in microseconds is cycles
divided by the arch clock (``meta['arch']['clock_ghz']``, GHz). With two or more ledgers the report
compares each one with the first (the baseline) in percent: ``100 * (x - x_baseline) / x_baseline``.

Everything (figures included) is rendered in memory first; the files are then written through
temp files and renamed into place, so a failure leaves no half-written report.

Labels, titles, workload, layer, arch and file names are user strings: every one is escaped where it
lands (Markdown table cells, headings, list items and captions; HTML; figure text, where ``$`` is not
mathtext), so no name can add or break a table, heading, list, emphasis, link, code span or tag.
"""

from __future__ import annotations

import base64
import html
import io
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .energy import EnergyTable, load_table
from .errors import ConfigError, EnergyTableError, LedgerError
from .ledger import Ledger
from .output import check_out_dir, markdown_table, md_cell, md_line_start, write_files_atomically

DEFAULT_TABLE = "horowitz45"
PJ_PER_UJ = 1e6

# ---------------------------------------------------------------------------------------------- data


@dataclass
class _Layer:
    scope: str
    cycles: dict[str, float]  # kind -> clock cycles
    energy_pj: dict[str, float]  # component -> pJ

    @property
    def total_cycles(self) -> float:
        return sum(self.cycles.values())

    @property
    def total_energy_pj(self) -> float:
        return sum(self.energy_pj.values())


@dataclass
class _Run:
    """One ledger, priced and summarised."""

    label: str
    source: str
    ledger: Ledger
    table: EnergyTable
    arch: dict[str, Any] | None
    layers: list[_Layer] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)  # cycle kinds, compute and stall first
    components: dict[str, float] = field(default_factory=dict)  # component -> total pJ

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
        clk = (self.arch or {}).get("clock_ghz")
        if isinstance(clk, int | float) and not isinstance(clk, bool) and math.isfinite(clk) and clk > 0:
            return float(clk)
        return None

    def latency_us(self, cycles: float) -> float | None:
        """Cycles -> microseconds at the arch clock (None when the clock is unknown)."""
        clk = self.clock_ghz
        return cycles / (clk * 1e3) if clk else None

    @property
    def arch_summary(self) -> str:
        """Name, RxC, dataflow and psum bits, e.g. ``npu128 (128x128 PEs, WS dataflow, psum 32 bits)``."""
        a = self.arch
        if a is None:
            return "arch: unknown"
        bits = a.get("bits") if isinstance(a.get("bits"), dict) else {}
        df = a.get("dataflow")
        return (
            f"{a.get('name', '?')} ({a.get('rows', '?')}x{a.get('cols', '?')} PEs, "
            f"{str(df).upper() if df else '?'} dataflow, psum {bits.get('psum', '?')} bits)"
        )

    @property
    def caption_tail(self) -> str:
        arch = self.arch_summary if self.arch is None else f"arch {self.arch_summary}"
        return f"{arch}; energy table {self.table.name}"


# ---------------------------------------------------------------------------------------------- API


def write_report(
    ledgers: list[Ledger],
    out_dir: str | Path,
    labels: list[str] | None = None,
    table: EnergyTable | str | None = None,
    depth: int = 2,
    title: str | None = None,
    *,
    sources: list[str | Path] | None = None,
) -> dict[str, Path]:
    """Write ``report.md``, ``report.html`` (figures embedded as base64 PNG) and the PNGs into ``out_dir``.

    ``ledgers``: one or more ledgers; the first is the baseline of the comparison. ``labels``: one
    distinct name per ledger (default: ``sources`` file stems, else ``meta['label']`` or
    ``workload@arch``). ``table``: energy table (name, path or object) for all ledgers; default each
    ledger's ``meta['energy_table']``, else ``horowitz45``. ``depth``: scope path components kept
    per layer (simulator scopes are ``<workload>/<layer>``: 2 = per layer). ``sources``: where the
    ledgers came from (file names), shown as provenance.

    Returns ``{'md': path, 'html': path, '<figure>.png': path, ...}``. Raises :class:`ConfigError`
    (labels, depth, out_dir), :class:`EnergyTableError` (table) or :class:`LedgerError` (ledger).
    """
    ledgers = list(ledgers)
    if not ledgers:
        raise ConfigError("a report needs at least one ledger; pass ledger JSON files written by npukit sim")
    for i, led in enumerate(ledgers):
        if not isinstance(led, Ledger):
            raise LedgerError(f"ledger #{i + 1} is a {type(led).__name__}, not a Ledger; load it with Ledger.load")
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise ConfigError(f"depth must be an integer >= 1 (scope path components per layer), got {depth!r}")
    srcs = [str(s) for s in sources] if sources is not None else [""] * len(ledgers)
    if len(srcs) != len(ledgers):
        raise ConfigError(f"got {len(srcs)} sources for {len(ledgers)} ledgers; give one source per ledger")
    names = _resolve_labels(ledgers, labels, srcs)
    out = check_out_dir(out_dir)  # before Path(): Path("") would silently be the current folder

    runs = [
        _summarise(led, name, src, _resolve_table(led, table, name), depth)
        for led, name, src in zip(ledgers, names, srcs, strict=True)
    ]
    figures = _render_figures(runs)  # name -> (png bytes, caption)
    doc = _document(runs, figures, depth, title)
    files: dict[str, tuple[Path, bytes]] = {
        "md": (out / "report.md", _to_markdown(doc).encode()),
        "html": (out / "report.html", _to_html(doc, figures).encode()),
    }
    for name, (png, _) in figures.items():
        files[name] = (out / name, png)
    write_files_atomically(list(files.values()))
    return {key: path for key, (path, _) in files.items()}


# ---------------------------------------------------------------------------------------------- inputs


def _resolve_labels(ledgers: list[Ledger], labels: list[str] | None, sources: list[str]) -> list[str]:
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
    stems = [Path(s).stem for s in sources]
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


def _resolve_table(led: Ledger, table: EnergyTable | str | None, label: str) -> EnergyTable:
    if isinstance(table, EnergyTable):
        return table
    if table is not None:
        return load_table(str(table))
    name = led.meta.get("energy_table") if isinstance(led.meta, dict) else None
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


def _summarise(led: Ledger, label: str, source: str, table: EnergyTable, depth: int) -> _Run:
    _check_numbers(led, label)
    run = _Run(label=label, source=source, ledger=led, table=table, arch=_arch_of(led))
    matrix = led.energy_matrix(table, depth)  # scope -> component -> pJ
    kinds: dict[str, None] = {"compute": None, "stall": None}
    by_kind: dict[str, dict[str, float]] = {}
    for (_, kind) in led.cycles:
        kinds.setdefault(kind, None)
    for kind in kinds:
        by_kind[kind] = led.cycles_by_scope(depth, kind)
    run.kinds = [k for k in kinds if k in ("compute", "stall") or any(by_kind[k].values())]
    comps: dict[str, float] = {}
    for scope in led.scopes(depth):
        cyc = {k: by_kind[k].get(scope, 0.0) for k in run.kinds}
        energy = matrix.get(scope, {})
        run.layers.append(_Layer(scope, cyc, energy))
        for comp, e in energy.items():
            comps[comp] = comps.get(comp, 0.0) + e
    run.components = comps
    return run


# ---------------------------------------------------------------------------------------------- figures


def _short_names(scopes: list[str]) -> list[str]:
    """Drop a first path component shared by every scope (the workload) for tick labels."""
    heads = {s.split("/", 1)[0] for s in scopes}
    if len(heads) == 1 and all("/" in s for s in scopes):
        return [s.split("/", 1)[1] for s in scopes]
    return [s or "(root)" for s in scopes]


def _component_order(runs: list[_Run]) -> list[str]:
    seen: dict[str, None] = {}
    for run in runs:
        for comp in run.components:
            seen.setdefault(comp, None)
    return list(seen)


def _render_figures(runs: list[_Run]) -> dict[str, tuple[bytes, str]]:
    """All figures as PNG bytes with their captions (matplotlib's Agg canvas; no pyplot state).

    Names are drawn as plain text: a ``$`` in a label or layer name is not parsed as mathtext."""
    import matplotlib

    with matplotlib.rc_context({"text.parse_math": False}):
        return _draw_figures(runs)


def _draw_figures(runs: list[_Run]) -> dict[str, tuple[bytes, str]]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    comps = _component_order(runs)
    cmap = _palette(len(comps))
    color = {c: cmap[i] for i, c in enumerate(comps)}
    kind_colors = {"compute": "#4c72b0", "stall": "#dd8452"}
    figs: dict[str, tuple[bytes, str]] = {}
    # One y scale per quantity across ledgers, so the per-ledger figures compare by eye.
    e_top = max((layer.total_energy_pj / PJ_PER_UJ for run in runs for layer in run.layers), default=0.0) * 1.05
    c_top = max((layer.total_cycles for run in runs for layer in run.layers), default=0.0) * 1.05

    def png(fig: Figure) -> bytes:
        FigureCanvasAgg(fig)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
        return buf.getvalue()

    for i, run in enumerate(runs, 1):
        names = _short_names([layer.scope for layer in run.layers])
        width = max(7.0, 0.38 * len(names) + 2.5)
        x = list(range(len(names)))

        fig = Figure(figsize=(width, 4.8), layout="constrained")
        ax = fig.add_subplot()
        bottom = [0.0] * len(names)
        for comp in comps:
            vals = [layer.energy_pj.get(comp, 0.0) / PJ_PER_UJ for layer in run.layers]
            if not any(vals):
                continue
            ax.bar(x, vals, bottom=bottom, color=color[comp], label=comp, width=0.8)
            bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
        _layer_axes(ax, x, names, "energy (uJ)", f"Energy per layer: {run.label}", e_top)
        if any(bottom):
            ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), title="component")
        figs[f"energy_per_layer_{i}.png"] = (
            png(fig),
            f"Energy per layer of {run.label} (uJ), stacked by component; {run.caption_tail}.",
        )

        fig = Figure(figsize=(width, 4.8), layout="constrained")
        ax = fig.add_subplot()
        bottom = [0.0] * len(names)
        palette = _palette(len(run.kinds) + 2)
        for j, kind in enumerate(run.kinds):
            vals = [layer.cycles.get(kind, 0.0) for layer in run.layers]
            ax.bar(x, vals, bottom=bottom, color=kind_colors.get(kind, palette[j + 2]), label=kind, width=0.8)
            bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
        _layer_axes(ax, x, names, "latency (clock cycles)", f"Latency per layer: {run.label}", c_top)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.08 if run.clock_ghz else 1.01, 1.0), title="cycles")
        if run.clock_ghz:
            per_us = run.clock_ghz * 1e3  # cycles per microsecond
            sec = ax.secondary_yaxis("right", functions=(lambda c, k=per_us: c / k, lambda u, k=per_us: u * k))
            sec.set_ylabel(f"latency (us at {run.clock_ghz:g} GHz)")
        clk = f"{run.clock_ghz:g} GHz clock" if run.clock_ghz else "clock unknown"
        figs[f"latency_per_layer_{i}.png"] = (
            png(fig),
            f"Latency per layer of {run.label} (clock cycles, {' vs '.join(run.kinds)} stacked; {clk}); {run.caption_tail}.",
        )

    if len(runs) >= 2:
        fig = Figure(figsize=(max(7.0, 1.1 * len(comps) * max(1, len(runs) / 2) + 2), 4.8), layout="constrained")
        ax = fig.add_subplot()
        w = 0.8 / len(runs)
        palette = _palette(len(runs))
        for j, run in enumerate(runs):
            xs = [k + (j - (len(runs) - 1) / 2) * w for k in range(len(comps))]
            bars = ax.bar(xs, [run.components.get(c, 0.0) / PJ_PER_UJ for c in comps], width=w,
                          label=_fig_text(run.label), color=palette[j])
            if j:
                pcts = [_pct(run.components.get(c, 0.0), runs[0].components.get(c, 0.0)) for c in comps]
                ax.bar_label(bars, labels=[p if p.endswith("%") else "" for p in pcts], fontsize=7, padding=2)
        ax.set_xticks(range(len(comps)), comps, rotation=30, ha="right", fontsize=9)
        ax.set_xlabel("component")
        ax.set_ylabel("energy (uJ)")
        ax.set_title("Total energy per component")
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8)
        tails = "; ".join(f"{run.label}: {run.caption_tail}" for run in runs)
        figs["compare_components.png"] = (
            png(fig),
            f"Total energy per component (uJ), baseline {runs[0].label}. {tails}.",
        )
    return figs


def _fig_text(s: str) -> str:
    """A name as figure text: control characters (newlines, CR, tabs) as spaces."""
    return re.sub(r"[\x00-\x1f\x7f]+", " ", str(s))


def _layer_axes(ax: Any, x: list[int], names: list[str], ylabel: str, title: str, top: float) -> None:
    ax.set_xticks(x, [_fig_text(n) for n in names], rotation=90, fontsize=8)
    ax.set_xlabel("layer (scope)")
    ax.set_ylabel(ylabel)
    ax.set_title(_fig_text(title))
    ax.grid(axis="y", alpha=0.3)
    ax.margins(x=0.01)
    if top > 0:
        ax.set_ylim(0, top)


def _palette(n: int) -> list[Any]:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


# ---------------------------------------------------------------------------------------------- document

# A document is a list of blocks rendered to both Markdown and HTML:
# ("h1"|"h2"|"h3"|"p", text) | ("list", [text]) | ("table", headers, rows) | ("figure", png_name, caption)
# A text is a plain string or a list of pieces: plain strings and ("b", s) / ("code", s) for bold and
# code. Plain strings (labels, workload and arch names, file names: anything from the user) are
# escaped by each renderer, so no name can inject Markdown or HTML; the markup is only the pieces'.
Block = tuple[Any, ...]
Text = str | list[Any]


def _bold(s: Any) -> tuple[str, str]:
    return ("b", str(s))


def _code(s: Any) -> tuple[str, str]:
    return ("code", str(s))


def _fmt_uj(pj: float) -> str:
    uj = pj / PJ_PER_UJ
    return f"{uj:.4g}" if 0 < abs(uj) < 1 else f"{uj:,.3f}"


def _fmt_cycles(c: float) -> str:
    return f"{c:,.0f}" if float(c).is_integer() else f"{c:,.2f}"


def _fmt_us(us: float | None) -> str:
    return "n/a" if us is None else f"{us:,.3f}"


def _pct(new: float, base: float) -> str:
    """Difference in percent relative to ``base``: ``100 * (new - base) / base``."""
    if base == 0:
        return "+0.00%" if new == 0 else "n/a (baseline 0)"
    return f"{100.0 * (new - base) / base:+.2f}%"


def _document(runs: list[_Run], figures: dict[str, tuple[bytes, str]], depth: int, title: str | None) -> list[Block]:
    workloads = list(dict.fromkeys(str(r.ledger.meta["workload"]) for r in runs if r.ledger.meta.get("workload")))
    if title is None:
        title = "npukit report" + (f": {', '.join(workloads)}" if workloads else "")
        title += f" ({len(runs)} ledgers)" if len(runs) > 1 else ""
    doc: list[Block] = [("h1", str(title))]

    # -- provenance
    doc.append(("h2", "Provenance"))
    items = []
    for i, run in enumerate(runs):
        role = " (baseline)" if i == 0 and len(runs) > 1 else ""
        src: list[Any] = ["file ", _code(run.source)] if run.source else ["in-memory ledger"]
        items.append(
            [_bold(run.label), f"{role}: ", *src, f"; workload {run.ledger.meta.get('workload', 'unknown')}; "
             f"{_arch_detail(run)}; energy table {run.table.name}"]
        )
    doc.append(("list", items))
    doc.append(("p", f"Layers are ledger scopes truncated to {depth} path component(s). Energy in uJ (1 uJ = 10^6 pJ), "
                     "latency in clock cycles and in microseconds at the arch clock."))
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
        doc.append(("list", [[_code(sec), f": {src}"] for sec, src in tab.sources().items()]))

    # -- totals
    doc.append(("h2", "Totals"))
    kinds = list(dict.fromkeys(k for run in runs for k in run.kinds))
    headers = ["ledger", "total energy (uJ)", "on-chip energy (uJ)", "total cycles", *(f"{k} cycles" for k in kinds),
               "latency (us)", "arch"]
    rows = [
        [run.label, _fmt_uj(run.energy_pj), _fmt_uj(run.energy_onchip_pj), _fmt_cycles(run.cycles),
         *(_fmt_cycles(run.kind_cycles(k)) for k in kinds),
         _fmt_us(run.latency_us(run.cycles)), run.arch_summary]
        for run in runs
    ]
    doc.append(("table", headers, rows))

    # -- comparison
    if len(runs) >= 2:
        base = runs[0]
        doc.append(("h2", f"Comparison with the baseline {base.label}"))
        if len({(r.table.name, r.table.path) for r in runs}) > 1:
            doc.append(("p", "Note: the ledgers are priced with different energy tables; pass --table to use one."))
        doc.append(("p", "Difference = 100 * (ledger - baseline) / baseline."))
        headers = ["metric", f"{base.label} (baseline)"]
        for run in runs[1:]:
            headers += [run.label, f"{run.label} vs baseline"]
        metrics: list[tuple[str, Any, Any]] = [
            ("total energy (uJ)", lambda r: r.energy_pj, _fmt_uj),
            ("on-chip energy (uJ)", lambda r: r.energy_onchip_pj, _fmt_uj),
            ("total cycles", lambda r: r.cycles, _fmt_cycles),
        ]
        for comp in _component_order(runs):
            metrics.append((f"{comp} energy (uJ)", lambda r, c=comp: r.components.get(c, 0.0), _fmt_uj))
        rows = []
        for name, get, fmt in metrics:
            row = [name, fmt(get(base))]
            for run in runs[1:]:
                row += [fmt(get(run)), _pct(get(run), get(base))]
            rows.append(row)
        doc.append(("table", headers, rows))
        doc.append(("figure", "compare_components.png", figures["compare_components.png"][1]))

    # -- per layer
    for i, run in enumerate(runs, 1):
        doc.append(("h2", f"Per layer: {run.label}"))
        headers = ["layer", "total cycles", "stall cycles", "latency (us)", "energy (uJ)", "top component (share)"]
        rows = []
        for layer in run.layers:
            tot = layer.total_energy_pj
            if layer.energy_pj and tot > 0:
                comp, e = max(layer.energy_pj.items(), key=lambda kv: kv[1])
                top = f"{comp} ({100 * e / tot:.1f}%)"
            else:
                top = "-"
            rows.append([layer.scope or "(root)", _fmt_cycles(layer.total_cycles), _fmt_cycles(layer.cycles.get("stall", 0.0)),
                         _fmt_us(run.latency_us(layer.total_cycles)), _fmt_uj(tot), top])
        doc.append(("table", headers, rows))
        for name in (f"energy_per_layer_{i}.png", f"latency_per_layer_{i}.png"):
            doc.append(("figure", name, figures[name][1]))
    return doc


def _arch_detail(run: _Run) -> str:
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
    for key, unit in (("dram_bandwidth_bytes_per_cycle", "DRAM bytes/cycle"), ("clock_ghz", "GHz clock")):
        if key in a:
            v = a[key]
            parts.append(f"{v:g} {unit}" if isinstance(v, int | float) and not isinstance(v, bool) else f"{key} {v}")
    return "; ".join(parts)


# ---------------------------------------------------------------------------------------------- renderers


def _md_code(s: str) -> str:
    """A Markdown code span of ``s`` (newlines as spaces): a backtick fence longer than any run of
    backticks inside, padded with spaces when ``s`` starts or ends with one."""
    s = s.replace("\r", " ").replace("\n", " ")
    fence = "`" * (max((len(r) for r in re.findall(r"`+", s)), default=0) + 1)
    pad = " " if s.startswith("`") or s.endswith("`") else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def _md_inline(text: Text) -> str:
    """Markdown of a text (see Block): plain pieces escaped, markup only from ("b", s) / ("code", s)."""
    pieces = [text] if isinstance(text, str) else text
    out = []
    for piece in pieces:
        if isinstance(piece, tuple):
            kind, s = piece
            out.append(f"**{md_cell(s)}**" if kind == "b" else _md_code(s))
        else:
            out.append(md_cell(piece))
    return md_line_start("".join(out))


def _to_markdown(doc: list[Block]) -> str:
    out: list[str] = []
    for block in doc:
        kind = block[0]
        if kind in ("h1", "h2", "h3"):
            out += [f"{'#' * int(kind[1])} {_md_inline(block[1])}", ""]
        elif kind == "p":
            out += [_md_inline(block[1]), ""]
        elif kind == "list":
            out += [f"- {_md_inline(item)}" for item in block[1]] + [""]
        elif kind == "table":
            headers, rows = block[1], block[2]
            out += [markdown_table(headers, rows, _numeric_columns(headers, rows)), ""]
        elif kind == "figure":
            out += [f"![{block[1]}]({block[1]})", "", f"*Figure ({block[1]}): {md_cell(block[2])}*", ""]
    return "\n".join(out)


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;max-width:1200px;margin:2em auto;
padding:0 1em;color:#222;line-height:1.45}
table{border-collapse:collapse;margin:0.8em 0;font-size:0.9em}
th,td{border:1px solid #ccc;padding:0.25em 0.6em}th{background:#f2f2f2}td.n{text-align:right;
font-variant-numeric:tabular-nums}
figure{margin:1.2em 0}figure img{max-width:100%;height:auto;border:1px solid #eee}
figcaption{font-size:0.9em;color:#444}code{background:#f5f5f5;padding:0 0.2em}
"""
_NUMERIC = re.compile(r"^[+-]?[\d,]*\.?\d+(e[+-]?\d+)?%?$|^n/a")


def _numeric_columns(headers: list[str], rows: list[list[Any]]) -> list[bool]:
    """Columns whose every cell is a number (right-aligned)."""
    return [bool(rows) and all(_NUMERIC.match(str(r[i])) for r in rows) for i in range(len(headers))]


def _inline_html(text: Text) -> str:
    """HTML of a text (see Block): plain pieces escaped, ("b", s) as <strong>, ("code", s) as <code>."""
    pieces = [text] if isinstance(text, str) else text
    out = []
    for piece in pieces:
        if isinstance(piece, tuple):
            tag = "strong" if piece[0] == "b" else "code"
            out.append(f"<{tag}>{html.escape(piece[1])}</{tag}>")
        else:
            out.append(html.escape(str(piece)))
    return "".join(out)


def _to_html(doc: list[Block], figures: dict[str, tuple[bytes, str]]) -> str:
    title = next((b[1] for b in doc if b[0] == "h1"), "npukit report")
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title>",
        f"<style>{_CSS}</style></head><body>",
    ]
    for block in doc:
        kind = block[0]
        if kind in ("h1", "h2", "h3"):
            out.append(f"<{kind}>{_inline_html(block[1])}</{kind}>")
        elif kind == "p":
            out.append(f"<p>{_inline_html(block[1])}</p>")
        elif kind == "list":
            out.append("<ul>" + "".join(f"<li>{_inline_html(item)}</li>" for item in block[1]) + "</ul>")
        elif kind == "table":
            headers, rows = block[1], block[2]
            head = "".join(f"<th>{html.escape(str(h))}</th>" for h in headers)
            out.append(f"<table><thead><tr>{head}</tr></thead><tbody>")
            numeric = _numeric_columns(headers, rows)
            for row in rows:
                cells = "".join(
                    f'<td class="n">{html.escape(str(c))}</td>' if numeric[i] else f"<td>{html.escape(str(c))}</td>"
                    for i, c in enumerate(row)
                )
                out.append(f"<tr>{cells}</tr>")
            out.append("</tbody></table>")
        elif kind == "figure":
            name, caption = block[1], block[2]
            data = base64.b64encode(figures[name][0]).decode("ascii")
            out.append(
                f'<figure><img alt="{html.escape(caption)}" src="data:image/png;base64,{data}">'
                f"<figcaption>{html.escape(caption)}</figcaption></figure>"
            )
    out.append("</body></html>")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------------- writing
