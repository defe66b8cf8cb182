"""Figures of a ledger report, drawn with matplotlib's Agg canvas (no pyplot state), as PNG bytes.

Per ledger: energy per layer stacked by component (uJ), latency per layer stacked by cycle kind (clock
cycles), utilization and mapping efficiency per layer (%). For all ledgers: a roofline (ops per DRAM
byte vs achieved ops per cycle, log-log, under the arch's roofs: 2 x rows x cols ops per cycle and DRAM
bytes per cycle x intensity). With two or more: total energy per component and per-layer differences
from the baseline (energy in uJ, cycles). Names are drawn as plain text (a ``$`` is not mathtext).
"""

from __future__ import annotations

import io
import re
from typing import Any

from .report_model import Run

PJ_PER_UJ = 1e6
KIND_COLORS = {"compute": "#4c72b0", "stall": "#dd8452"}


def fig_text(s: str) -> str:
    """A name as figure text: control characters (newlines, CR, tabs) as spaces."""
    return re.sub(r"[\x00-\x1f\x7f]+", " ", str(s))


def palette(n: int) -> list[Any]:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


def png(fig: Any) -> bytes:
    """A matplotlib Figure as PNG bytes (100 dpi, no software tag: the same figure gives the same bytes)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    return buf.getvalue()


def plain_log_ticks(ax: Any, x: bool = True, y: bool = True) -> None:
    """Log-axis tick labels as plain numbers (mathtext is off, so the default 10^n labels would show raw)."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    fmt = FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 else f"{v:g}")
    for on, axis in ((x, ax.xaxis), (y, ax.yaxis)):
        if on:
            axis.set_major_formatter(fmt)
            axis.set_minor_formatter(NullFormatter())


def short_names(scopes: list[str]) -> list[str]:
    """Drop a first path component shared by every scope (the workload) for tick labels."""
    heads = {s.split("/", 1)[0] for s in scopes}
    if len(heads) == 1 and all("/" in s for s in scopes):
        return [s.split("/", 1)[1] for s in scopes]
    return [s or "(root)" for s in scopes]


def component_order(runs: list[Run]) -> list[str]:
    seen: dict[str, None] = {}
    for run in runs:
        for comp in run.components:
            seen.setdefault(comp, None)
    return list(seen)


def render_figures(runs: list[Run]) -> dict[str, tuple[bytes, str]]:
    """All figures of a ledger report: file name -> (PNG bytes, caption)."""
    import matplotlib

    with matplotlib.rc_context({"text.parse_math": False}):
        figs: dict[str, tuple[bytes, str]] = {}
        _per_run(runs, figs)
        roof = _roofline(runs)
        if roof is not None:
            figs["roofline.png"] = roof
        for i, run in enumerate(runs, 1):  # multi-core ledgers: the schedule's timeline
            meta = run.ledger.meta.get("multicore")
            if isinstance(meta, dict) and meta.get("timeline"):
                from .multicore_report import timeline_from_meta

                fig = timeline_from_meta(meta, str(run.ledger.meta.get("workload", "")), run.cycles)
                figs[f"timeline_{i}.png"] = (png(fig), f"{run.label}: per-core timeline of the multi-core schedule")
        if len(runs) >= 2:
            figs["compare_components.png"] = _compare_components(runs)
            figs.update(_layer_deltas(runs))
        return figs


def _layer_axes(ax: Any, x: list[int], names: list[str], ylabel: str, title: str, top: float | None) -> None:
    ax.set_xticks(x, [fig_text(n) for n in names], rotation=90, fontsize=8)
    ax.set_xlabel("layer (scope)")
    ax.set_ylabel(ylabel)
    ax.set_title(fig_text(title))
    ax.grid(axis="y", alpha=0.3)
    ax.margins(x=0.01)
    if top is not None and top > 0:
        ax.set_ylim(0, top)


def _per_run(runs: list[Run], figs: dict[str, tuple[bytes, str]]) -> None:
    from matplotlib.figure import Figure

    comps = component_order(runs)
    cmap = palette(len(comps))
    color = {c: cmap[i] for i, c in enumerate(comps)}
    # One y scale per quantity across ledgers, so the per-ledger figures compare by eye.
    e_top = max((layer.total_energy_pj / PJ_PER_UJ for run in runs for layer in run.layers), default=0.0) * 1.05
    c_top = max((layer.total_cycles for run in runs for layer in run.layers), default=0.0) * 1.05
    for i, run in enumerate(runs, 1):
        names = short_names([layer.scope for layer in run.layers])
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
            png(fig), f"Energy per layer of {run.label} (uJ), stacked by component; {run.caption_tail}.")

        fig = Figure(figsize=(width, 4.8), layout="constrained")
        ax = fig.add_subplot()
        bottom = [0.0] * len(names)
        pal = palette(len(run.kinds) + 2)
        for j, kind in enumerate(run.kinds):
            vals = [layer.cycles.get(kind, 0.0) for layer in run.layers]
            ax.bar(x, vals, bottom=bottom, color=KIND_COLORS.get(kind, pal[j + 2]), label=kind, width=0.8)
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

        mac_layers = [(n, layer) for n, layer in zip(names, run.layers, strict=True) if layer.macs > 0]
        util = [run.utilization(layer) for _, layer in mac_layers]
        meff = [run.mapping_efficiency(layer) for _, layer in mac_layers]
        if any(u is not None for u in util + meff):
            x = list(range(len(mac_layers)))
            fig = Figure(figsize=(max(7.0, 0.38 * len(x) + 2.5), 4.2), layout="constrained")
            ax = fig.add_subplot()
            w = 0.4
            ax.bar([k - w / 2 for k in x], [100 * (m or 0.0) for m in meff], width=w, color="#55a868",
                   label="mapping efficiency")
            ax.bar([k + w / 2 for k in x], [100 * (u or 0.0) for u in util], width=w, color="#4c72b0",
                   label="utilization")
            _layer_axes(ax, x, [n for n, _ in mac_layers], "% of the PEs",
                        f"Utilization and mapping efficiency: {run.label}", 105)
            ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
            figs[f"utilization_per_layer_{i}.png"] = (
                png(fig),
                f"Utilization (MACs / (PEs x compute cycles)) and mapping efficiency (PEs a fold covers) per layer "
                f"with MACs of {run.label}, %; {run.caption_tail}.",
            )


def _roofline(runs: list[Run]) -> tuple[bytes, str] | None:
    from matplotlib.figure import Figure

    pts = [(run, [(layer.intensity, layer.ops_per_cycle) for layer in run.layers]) for run in runs]
    pts = [(run, [(x, y) for x, y in p if x and y]) for run, p in pts]
    if not any(p for _, p in pts) or not any(run.ridge for run in runs):
        return None
    xs = [x for _, p in pts for x, _ in p]
    roofs = list(dict.fromkeys((run.peak_ops_per_cycle, run.dram_bytes_per_cycle) for run in runs if run.ridge))
    lo = min([*xs, *(p / b for p, b in roofs)]) / 4
    hi = max([*xs, *(p / b for p, b in roofs)]) * 4
    fig = Figure(figsize=(8.5, 5.6), layout="constrained")
    ax = fig.add_subplot()
    ax.set_xscale("log")
    ax.set_yscale("log")
    for peak, bw in roofs:
        ridge = peak / bw
        ax.plot([lo, ridge, hi], [lo * bw, peak, peak], color="#333", lw=1.5)
        ax.axvline(ridge, color="#999", ls=":", lw=1)
        ax.text(ridge * 1.1, peak / 1.5, f"ridge {ridge:,.4g} ops/B", fontsize=8, color="#555")
        ax.text(hi / 1.1, peak * 1.1, f"peak {peak:,.0f} ops/cycle", fontsize=8, ha="right", color="#555")
    ridge0 = roofs[0][0] / roofs[0][1]
    ax.axvspan(lo, ridge0, color="#dd8452", alpha=0.07)
    ax.axvspan(ridge0, hi, color="#4c72b0", alpha=0.07)
    ymin = min(y for _, p in pts for _, y in p) / 3
    ax.text(lo * 1.2, ymin * 1.3, "memory-bound", fontsize=9, color="#b35a1f")
    ax.text(hi / 1.2, ymin * 1.3, "compute-bound", fontsize=9, color="#2f4b7c", ha="right")
    markers = "osD^v<>P*X"
    pal = palette(len(runs))
    for j, (run, p) in enumerate(pts):
        if p:
            # later ledgers hollow and smaller, so a point equal to the baseline's stays visible inside it
            ax.scatter([x for x, _ in p], [y for _, y in p], s=60 if j == 0 else 22, marker=markers[j % len(markers)],
                       facecolor=pal[j] if j == 0 else "none", edgecolor=pal[j] if j else "black",
                       linewidth=0.5 if j == 0 else 1.4, label=fig_text(run.label), zorder=3 + j)
    ax.set_xlim(lo, hi)
    ax.set_ylim(ymin, max(p for p, _ in roofs) * 2)
    plain_log_ticks(ax)
    ax.set_xlabel("operational intensity (ops per DRAM byte; 1 MAC = 2 ops)")
    ax.set_ylabel("achieved ops per clock cycle (compute + stall cycles)")
    ax.set_title("Roofline: each layer a point")
    ax.grid(which="both", alpha=0.2)
    ax.legend(fontsize=8, loc="upper left")
    roof_txt = "; ".join(f"peak {p:,.0f} ops/cycle, DRAM {b:g} bytes/cycle" for p, b in roofs)
    return png(fig), (f"Roofline of every layer (ops/byte vs achieved ops/cycle, log-log): roofs {roof_txt}; "
                      "left of the ridge memory-bound, right compute-bound. "
                      + "; ".join(f"{run.label}: {run.caption_tail}" for run in runs) + ".")


def _compare_components(runs: list[Run]) -> tuple[bytes, str]:
    from matplotlib.figure import Figure

    from .report_render import pct

    comps = component_order(runs)
    fig = Figure(figsize=(max(7.0, 1.1 * len(comps) * max(1, len(runs) / 2) + 2), 4.8), layout="constrained")
    ax = fig.add_subplot()
    w = 0.8 / len(runs)
    pal = palette(len(runs))
    for j, run in enumerate(runs):
        xs = [k + (j - (len(runs) - 1) / 2) * w for k in range(len(comps))]
        bars = ax.bar(xs, [run.components.get(c, 0.0) / PJ_PER_UJ for c in comps], width=w,
                      label=fig_text(run.label), color=pal[j])
        if j:
            pcts = [pct(run.components.get(c, 0.0), runs[0].components.get(c, 0.0)) for c in comps]
            ax.bar_label(bars, labels=[p if p.endswith("%") else "" for p in pcts], fontsize=7, padding=2)
    ax.set_xticks(range(len(comps)), comps, rotation=30, ha="right", fontsize=9)
    ax.set_xlabel("component")
    ax.set_ylabel("energy (uJ)")
    ax.set_title("Total energy per component")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    tails = "; ".join(f"{run.label}: {run.caption_tail}" for run in runs)
    return png(fig), f"Total energy per component (uJ), baseline {runs[0].label}. {tails}."


def _layer_deltas(runs: list[Run]) -> dict[str, tuple[bytes, str]]:
    """Per-layer difference from the baseline (energy uJ and cycles), one figure per other ledger;
    layers matched by scope, a layer missing on one side counts as 0 there."""
    from matplotlib.figure import Figure

    base = runs[0]
    out: dict[str, tuple[bytes, str]] = {}
    for i, run in enumerate(runs[1:], 2):
        b = {layer.scope: layer for layer in base.layers}
        r = {layer.scope: layer for layer in run.layers}
        every = list(dict.fromkeys([*b, *r]))
        names_all = short_names(every)

        def delta(s: str, r: dict = r, b: dict = b) -> tuple[float, float]:
            e = ((r[s].total_energy_pj if s in r else 0.0) - (b[s].total_energy_pj if s in b else 0.0)) / PJ_PER_UJ
            return e, (r[s].total_cycles if s in r else 0.0) - (b[s].total_cycles if s in b else 0.0)

        keep = [k for k, s in enumerate(every) if any(delta(s))] or list(range(len(every)))
        scopes, names = [every[k] for k in keep], [names_all[k] for k in keep]
        de = [delta(s)[0] for s in scopes]
        dc = [delta(s)[1] for s in scopes]
        same = len(every) - len(scopes)
        width = max(7.0, 0.38 * len(names) + 2.5)
        fig = Figure(figsize=(width, 7.0), layout="constrained")
        ax1, ax2 = fig.subplots(2, 1, sharex=True)
        x = list(range(len(scopes)))
        for ax, vals, unit in ((ax1, de, "energy (uJ)"), (ax2, dc, "cycles")):
            ax.bar(x, vals, color=["#55a868" if v < 0 else "#c44e52" for v in vals], width=0.8)
            ax.axhline(0, color="black", lw=0.8)
            ax.set_ylabel(f"difference in {unit}")
            if not any(vals):
                ax.text(0.5, 0.7, f"no layer differs in {unit}", transform=ax.transAxes, ha="center", color="#555")
            ax.grid(axis="y", alpha=0.3)
            ax.margins(x=0.01)
        ax1.set_title(fig_text(f"Per layer: {run.label} minus {base.label} (green: lower, red: higher)"))
        ax2.set_xticks(x, [fig_text(n) for n in names], rotation=90, fontsize=8)
        ax2.set_xlabel("layer (scope)")
        out[f"layer_delta_{i}.png"] = (
            png(fig),
            f"Per-layer difference {run.label} minus baseline {base.label}: energy (uJ, top) and clock cycles "
            f"(bottom)" + (f", {same} layer(s) equal in both left out" if same else "")
            + f"; {run.label}: {run.caption_tail}; {base.label}: {base.caption_tail}.",
        )
    return out
