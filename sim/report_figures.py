"""Figures of a ledger report, drawn with matplotlib's Agg canvas (no pyplot state), as PNG bytes.

Per ledger, one horizontal bar per group (layer, block or operator type: :mod:`npukit.sim.report_groups`),
the top N groups and one "other" bar for the rest: energy stacked by component (uJ), latency stacked by
cycle kind (clock cycles), utilization and mapping efficiency (%). Every figure is
:data:`FIG_WIDTH_IN` wide and at most :data:`MAX_FIG_HEIGHT_IN` high (100 dpi), whatever the layer
count; names sit on the y axis, horizontal. The roofline and the comparison figures are drawn by
:mod:`npukit.sim.report_compare`. Colours come from :mod:`npukit.sim.palette` (one per component
everywhere). Names are drawn as plain text (a ``$`` is not mathtext).
"""

from __future__ import annotations

import io
import re
from typing import Any

from .palette import KIND_COLORS, component_colors
from .report_groups import is_other, top_groups
from .report_model import LayerView, Run
from .report_render import no_surrogates

PJ_PER_UJ = 1e6
FIG_WIDTH_IN = 10.0  # 1,000 px at 100 dpi
MAX_FIG_HEIGHT_IN = 16.0  # 1,600 px
LEGEND_OUTSIDE: dict[str, Any] = {"loc": "upper left", "bbox_to_anchor": (1.01, 1.0), "borderaxespad": 0.0}
MAX_LABEL = 44  # characters of a name on an axis; longer ones lose their middle


def fig_text(s: str) -> str:
    """A name as figure text: control characters (newlines, CR, tabs) as spaces, a non-UTF-8 byte (an unpaired
    surrogate, which matplotlib cannot draw) as its ``\\udcNN`` escape."""
    return no_surrogates(re.sub(r"[\x00-\x1f\x7f]+", " ", str(s)))


def drawable(fig: Any) -> Any:
    """``fig`` with every text on it (titles, ticks, legends, annotations) free of unpaired surrogates
    (:func:`no_surrogates`): a name from a hostile ledger that reached a figure by another way still draws."""
    from matplotlib.text import Text

    for t in fig.findobj(Text):
        s = t.get_text()
        if isinstance(s, str) and s != (clean := no_surrogates(s)):
            t.set_text(clean)
    return fig


def axis_label(s: str, limit: int = MAX_LABEL) -> str:
    """A name as an axis label: figure text, its middle cut to ``...`` when longer than ``limit``."""
    s = fig_text(s)
    if len(s) <= limit:
        return s
    keep = limit - 3
    return s[: keep // 2] + "..." + s[len(s) - (keep - keep // 2):]


def png(fig: Any) -> bytes:
    """A matplotlib Figure as PNG bytes (100 dpi, no software tag: the same figure gives the same bytes)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(drawable(fig))
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


def bar_figure(n_bars: int, extra_in: float = 1.8, width_in: float = FIG_WIDTH_IN) -> Any:
    """A Figure for ``n_bars`` horizontal bars: :data:`FIG_WIDTH_IN` wide, 0.26 in per bar plus
    ``extra_in`` (title, axis, legend) high, at most :data:`MAX_FIG_HEIGHT_IN`."""
    from matplotlib.figure import Figure

    height = min(MAX_FIG_HEIGHT_IN, extra_in + 0.26 * max(n_bars, 2))
    return Figure(figsize=(min(width_in, FIG_WIDTH_IN * 1.4), height), layout="constrained")


def component_order(runs: list[Run]) -> list[str]:
    seen: dict[str, None] = {}
    for run in runs:
        for comp in run.components:
            seen.setdefault(comp, None)
    return list(seen)


def render_figures(runs: list[Run], top: int = 25) -> dict[str, tuple[bytes, str]]:
    """All figures of a ledger report: file name -> (PNG bytes, caption); ``top``: groups per figure
    before "other"."""
    import matplotlib

    from .report_compare import compare_components, layer_deltas, roofline

    with matplotlib.rc_context({"text.parse_math": False}):
        figs: dict[str, tuple[bytes, str]] = {}
        _per_run(runs, figs, top)
        roof = roofline(runs)
        if roof is not None:
            figs["roofline.png"] = roof
        for i, run in enumerate(runs, 1):  # multi-core ledgers: the schedule's timeline
            meta = run.multicore
            if meta is not None and meta["timeline"]:
                from .multicore_report import timeline_from_meta

                fig = timeline_from_meta(meta, str(run.ledger.meta.get("workload", "")), run.cycles)
                figs[f"timeline_{i}.png"] = (png(fig), f"{run.label}: per-core timeline of the multi-core schedule")
        if len(runs) >= 2:
            figs["compare_components.png"] = compare_components(runs)
            figs.update(layer_deltas(runs, top))
        return figs


def _bar_axes(ax: Any, views: list[LayerView], xlabel: str, title: str, noun: str, right: float | None) -> None:
    ys = list(range(len(views)))
    ax.set_yticks(ys, [axis_label(v.scope) for v in views], fontsize=8)
    for tick, v in zip(ax.get_yticklabels(), views, strict=True):
        if is_other(v):
            tick.set_fontstyle("italic")
    ax.set_ylim(len(views) - 0.5, -0.5)  # the first group on top
    ax.set_ylabel(noun)
    ax.set_xlabel(xlabel)
    ax.set_title(fig_text(title), fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    if right is not None and right > 0:
        ax.set_xlim(0, right)
    from matplotlib.ticker import FuncFormatter

    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: tick_text(v)))


def _shown(run: Run, top: int, key: str) -> tuple[list[LayerView], str]:
    """The groups a figure draws and a caption phrase saying which."""
    views = top_groups(run.groups, top, key, run.group)
    if len(views) == len(run.groups):
        return views, f"all {len(views)} {run.group}s in model order"
    by = {"energy": "energy", "cycles": "cycles", "macs": "MACs"}[key]
    return views, f"the {top} {run.group}s with the most {by} (largest first) and the other {len(run.groups) - top} as one"


def _stack(ax: Any, views: list[LayerView], series: list[tuple[str, str, Any]]) -> list[float]:
    """Stacked horizontal bars: ``series`` = (label, colour, view -> value); returns the bar totals."""
    left = [0.0] * len(views)
    ys = list(range(len(views)))
    hatch = ["//" if is_other(v) else "" for v in views]
    for label, color, get in series:
        vals = [get(v) for v in views]
        if not any(vals):
            continue
        ax.barh(ys, vals, left=left, color=color, label=label, height=0.75, hatch=hatch, edgecolor="white",
                linewidth=0.3)
        left = [a + b for a, b in zip(left, vals, strict=True)]
    return left


def tick_text(v: float) -> str:
    """An axis tick: ``1.5G``, ``20M`` from a million on (so long ticks never overlap), ``12,500``, ``0.5``."""
    a = abs(v)
    if a >= 1e9:
        return f"{v / 1e9:g}G"
    if a >= 1e6:
        return f"{v / 1e6:g}M"
    return f"{v:,.0f}" if a >= 10 or v == 0 else f"{v:g}"


def _num(v: float) -> str:
    """A bar's value: thousands separated from 100 on, else 3 significant digits."""
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


def _end_labels(ax: Any, totals: list[float], texts: list[str]) -> None:
    for y, (t, s) in enumerate(zip(totals, texts, strict=True)):
        if t > 0:
            ax.annotate(s, (t, y), xytext=(3, 0), textcoords="offset points", va="center", fontsize=7, color="#333")


def _per_run(runs: list[Run], figs: dict[str, tuple[bytes, str]], top: int) -> None:
    comps = component_order(runs)
    color = component_colors(comps)
    noun = runs[0].group if runs else "layer"
    shown = {i: {k: _shown(run, top, k) for k in ("energy", "cycles", "macs")} for i, run in enumerate(runs)}
    # One x scale per quantity across ledgers, so the per-ledger figures compare by eye (1.18: room for labels).
    e_top = max((v.total_energy_pj / PJ_PER_UJ for s in shown.values() for v in s["energy"][0]), default=0.0) * 1.18
    c_top = max((v.total_cycles for s in shown.values() for v in s["cycles"][0]), default=0.0) * 1.18
    for i, run in enumerate(runs, 1):
        views, which = shown[i - 1]["energy"]
        fig = bar_figure(len(views))
        ax = fig.add_subplot()
        tot = run.energy_pj or 1.0
        totals = _stack(ax, views, [(c, color[c], lambda v, c=c: v.energy_pj.get(c, 0.0) / PJ_PER_UJ) for c in comps])
        _end_labels(ax, totals, [f"{_num(t)} ({100 * v.total_energy_pj / tot:.1f}%)" for t, v in zip(totals, views,
                                                                                                   strict=True)])
        _bar_axes(ax, views, "energy (uJ); label: uJ (share of the total)", f"Energy per {noun}: {run.label}", noun,
                  e_top)
        if any(totals):
            ax.legend(fontsize=7, **LEGEND_OUTSIDE, title="component", title_fontsize=8)
        figs[f"energy_per_layer_{i}.png"] = (
            png(fig), f"Energy per {noun} of {run.label} (uJ), stacked by component: {which}; {run.caption_tail}.")

        views, which = shown[i - 1]["cycles"]
        fig = bar_figure(len(views))
        ax = fig.add_subplot()
        cyc = run.cycles or 1.0
        totals = _stack(ax, views, [(k, KIND_COLORS.get(k, "#8172b3"), lambda v, k=k: v.cycles.get(k, 0.0))
                                    for k in run.kinds])
        _end_labels(ax, totals, [f"{t:,.0f} ({100 * t / cyc:.1f}%)" for t in totals])
        _bar_axes(ax, views, "latency (clock cycles); label: cycles (share of the total)",
                  f"Latency per {noun}: {run.label}", noun, c_top)
        ax.legend(fontsize=8, **LEGEND_OUTSIDE, title="cycles")
        if run.clock_ghz:
            per_us = run.clock_ghz * 1e3  # cycles per microsecond
            sec = ax.secondary_xaxis("top", functions=(lambda c, k=per_us: c / k, lambda u, k=per_us: u * k))
            sec.set_xlabel(f"latency (us at {run.clock_ghz:g} GHz)", fontsize=8)
            from matplotlib.ticker import FuncFormatter

            sec.xaxis.set_major_formatter(FuncFormatter(lambda v, _: tick_text(v)))
        clk = f"{run.clock_ghz:g} GHz clock" if run.clock_ghz else "clock unknown"
        figs[f"latency_per_layer_{i}.png"] = (
            png(fig), f"Latency per {noun} of {run.label} (clock cycles, {' vs '.join(run.kinds)} stacked; {clk}): "
                      f"{which}; {run.caption_tail}.")

        views, which = shown[i - 1]["macs"]
        views = [v for v in views if v.macs > 0]
        util = [run.utilization(v) for v in views]
        meff = [run.mapping_efficiency(v) for v in views]
        if any(u is not None for u in util + meff):
            fig = bar_figure(len(views))
            ax = fig.add_subplot()
            ys = list(range(len(views)))
            h = 0.38
            ax.barh([y - h / 2 for y in ys], [100 * (m or 0.0) for m in meff], height=h, color="#55a868",
                    label="mapping efficiency")
            ax.barh([y + h / 2 for y in ys], [100 * (u or 0.0) for u in util], height=h, color="#4c72b0",
                    label="utilization")
            _bar_axes(ax, views, "% of the PEs", f"Utilization and mapping efficiency: {run.label}", noun, 105)
            ax.legend(fontsize=8, **LEGEND_OUTSIDE)
            figs[f"utilization_per_layer_{i}.png"] = (
                png(fig),
                f"Utilization (MACs / (PEs x compute cycles)) and mapping efficiency (PEs a fold covers) per {noun} "
                f"with MACs of {run.label}, %: {which}; {run.caption_tail}.",
            )
