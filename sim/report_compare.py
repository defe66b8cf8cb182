"""Report figures across ledgers: the roofline (every ledger's groups as points, the largest labelled),
total energy per component against the baseline, and per-group differences from the baseline.

Relative differences are ``100 * (x - baseline) / baseline``; bars are clipped to
[-100%, +:data:`REL_CAP`%] and every bar is labelled with its true value (and the ratio when it is
10x or more), next to the absolute values in uJ, so one tiny baseline cannot flatten the others.
"""

from __future__ import annotations

import math
from typing import Any

from .palette import HIGHER, LOWER, cycle_colors
from .report_figures import (
    FIG_WIDTH_IN,
    PJ_PER_UJ,
    _num,
    axis_label,
    bar_figure,
    component_order,
    fig_text,
    plain_log_ticks,
    png,
    tick_text,
)
from .report_groups import top_groups
from .report_model import LayerView, Run
from .report_render import fmt_rel

REL_CAP = 200.0  # % drawn at most on a relative-difference axis; beyond, the bar is clipped and labelled
ROOF_LABELS = 8  # points labelled on the roofline (the baseline's largest by energy)


def roofline(runs: list[Run]) -> tuple[bytes, str] | None:
    """Ops per DRAM byte vs achieved ops per cycle of every group, log-log, under each arch's roofs."""
    from matplotlib.figure import Figure

    pts = [(run, [(v, v.intensity, v.ops_per_cycle) for v in run.groups]) for run in runs]
    pts = [(run, [(v, x, y) for v, x, y in p if x and y]) for run, p in pts]
    if not any(p for _, p in pts) or not any(run.ridge for run in runs):
        return None
    xs = [x for _, p in pts for _, x, _ in p]
    roofs = list(dict.fromkeys((run.peak_ops_per_cycle, run.dram_bytes_per_cycle) for run in runs if run.ridge))
    lo = min([*xs, *(p / b for p, b in roofs)]) / 4
    hi = max([*xs, *(p / b for p, b in roofs)]) * 4
    fig = Figure(figsize=(FIG_WIDTH_IN, 6.4), layout="constrained")
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
    ymin = min(y for _, p in pts for _, _, y in p) / 3
    ymax = max(p for p, _ in roofs) * 2
    ax.text(lo * 1.2, ymin * 1.3, "memory-bound", fontsize=9, color="#b35a1f")
    ax.text(hi / 1.2, ymin * 1.3, "compute-bound", fontsize=9, color="#2f4b7c", ha="right")
    markers = "osD^v<>P*X"
    pal = cycle_colors(len(runs))
    for j, (run, p) in enumerate(pts):
        if p:
            # later ledgers hollow and smaller, so a point equal to the baseline's stays visible inside it
            ax.scatter([x for _, x, _ in p], [y for _, _, y in p], s=60 if j == 0 else 22,
                       marker=markers[j % len(markers)], facecolor=pal[j] if j == 0 else "none",
                       edgecolor=pal[j] if j else "black", linewidth=0.5 if j == 0 else 1.4,
                       label=fig_text(run.label), zorder=3 + j)
    ax.set_xlim(lo, hi)
    ax.set_ylim(ymin, ymax)
    plain_log_ticks(ax)
    noun = runs[0].group
    ax.set_xlabel("operational intensity (ops per DRAM byte; 1 MAC = 2 ops)")
    ax.set_ylabel("achieved ops per clock cycle (compute + stall cycles)")
    ax.set_title(f"Roofline: each {noun} a point")
    ax.grid(which="both", alpha=0.2)
    ax.legend(fontsize=8, loc="upper left")
    avoid = [(ridge * 1.1, peak / 1.5, f"ridge {ridge:,.4g} ops/B") for ridge, peak in
             ((p / b, p) for p, b in roofs)]  # the ridge labels stay readable
    labelled = _label_points(fig, ax, pts[0][1] or next(p for _, p in pts if p), avoid)
    roof_txt = "; ".join(f"peak {p:,.0f} ops/cycle, DRAM {b:g} bytes/cycle" for p, b in roofs)
    return png(fig), (f"Roofline of every {noun} (ops/byte vs achieved ops/cycle, log-log): roofs {roof_txt}; "
                      f"left of the ridge memory-bound, right compute-bound; labelled: the {labelled} "
                      f"{noun}s (or places) of {runs[0].label} with the most energy. "
                      + "; ".join(f"{run.label}: {run.caption_tail}" for run in runs) + ".")


def _label_points(fig: Any, ax: Any, pts: list[tuple[LayerView, float, float]],
                  avoid: list[tuple[float, float, str]]) -> int:
    """Label the :data:`ROOF_LABELS` distinct places with the most energy (several groups at one place:
    the largest's name and how many more), each label at the first offset that overlaps no other label."""
    places: dict[tuple[float, float], list[LayerView]] = {}
    for v, x, y in pts:
        places.setdefault((round(math.log10(x), 2), round(math.log10(y), 2)), []).append(v)
    ranked = sorted(places.values(), key=lambda vs: -sum(v.total_energy_pj for v in vs))[:ROOF_LABELS]
    fig.get_layout_engine().execute(fig)  # final axes position, so data -> pixel is right
    to_px = ax.transData.transform
    def width(text: str) -> float:
        return 5.2 * len(text) * 100 / 72 * 0.72  # 7-pt text at 100 dpi, estimated (pixels)

    boxes = [(x, y, x + width(t) * 8 / 7, y + 12.0) for x, y, t in ((*to_px(xy[:2]), xy[2]) for xy in avoid)]
    offsets = [(8, 6), (8, -14), (-8, 6), (-8, -14), (8, 20), (8, -28), (-8, 20), (-8, -28), (8, 34), (-8, 34)]
    for vs in ranked:
        vs = sorted(vs, key=lambda v: -v.total_energy_pj)
        v = vs[0]
        text = axis_label(v.scope, 36) + (f" (+{len(vs) - 1} more)" if len(vs) > 1 else "")
        px, py = to_px((v.intensity, v.ops_per_cycle))
        w, h = width(text), 11.0
        for dx, dy in offsets:
            x0 = px + dx * 100 / 72 - (w if dx < 0 else 0)
            y0 = py + dy * 100 / 72
            box = (x0, y0, x0 + w, y0 + h)
            if not any(b[0] < box[2] and box[0] < b[2] and b[1] < box[3] and box[1] < b[3] for b in boxes):
                break
        boxes.append(box)
        ax.annotate(text, (v.intensity, v.ops_per_cycle), xytext=(dx, dy), textcoords="offset points", fontsize=7,
                    ha="right" if dx < 0 else "left", color="#222", zorder=10,
                    bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.75},
                    arrowprops={"arrowstyle": "-", "color": "#777", "lw": 0.6})
    return len(ranked)


def _rel(new: float, base: float) -> float | None:
    return None if base == 0 else 100.0 * (new - base) / base


def compare_components(runs: list[Run]) -> tuple[bytes, str]:
    """Left: total energy per component per ledger (uJ, log scale); right: each ledger's difference from
    the baseline (%), clipped at -100% / +REL_CAP% and labelled with the true value."""
    comps = component_order(runs)
    base = runs[0]
    fig = bar_figure(len(comps) * len(runs), extra_in=2.0, width_in=FIG_WIDTH_IN * 1.2)
    ax1, ax2 = fig.subplots(1, 2, sharey=True, width_ratios=[1.1, 1.0])
    h = 0.8 / len(runs)
    pal = cycle_colors(len(runs))
    ys = list(range(len(comps)))
    vals_all = [run.components.get(c, 0.0) / PJ_PER_UJ for run in runs for c in comps]
    pos = [v for v in vals_all if v > 0]
    for j, run in enumerate(runs):
        yj = [y + (j - (len(runs) - 1) / 2) * h for y in ys]
        vals = [run.components.get(c, 0.0) / PJ_PER_UJ for c in comps]
        ax1.barh(yj, vals, height=h, color=pal[j], label=fig_text(run.label))
        for y, v in zip(yj, vals, strict=True):
            if v > 0:
                ax1.annotate(_num(v), (v, y), xytext=(2, 0), textcoords="offset points", va="center", fontsize=6)
        if j == 0:
            continue
        rel = [_rel(run.components.get(c, 0.0), base.components.get(c, 0.0)) for c in comps]
        drawn = [0.0 if r is None else max(-100.0, min(REL_CAP, r)) for r in rel]
        ax2.barh(yj, drawn, height=h, color=[LOWER if d < 0 else HIGHER for d in drawn],
                 edgecolor=pal[j], linewidth=1.0, hatch=["//" if r is not None and r > REL_CAP else "" for r in rel])
        for y, c, d in zip(yj, comps, drawn, strict=True):
            text = fmt_rel(run.components.get(c, 0.0), base.components.get(c, 0.0))
            inside = d > REL_CAP * 0.55
            ax2.annotate(text, (d, y), xytext=(-3 if inside else (3 if d >= 0 else -3), 0), textcoords="offset points",
                         va="center", ha="right" if inside or d < 0 else "left", fontsize=7,
                         color="white" if inside else "#222")
    ax1.set_xscale("log")
    if pos:
        ax1.set_xlim(min(pos) / 2, max(pos) * 8)
    plain_log_ticks(ax1, y=False)
    ax1.set_yticks(ys, comps, fontsize=8)
    ax1.set_ylim(len(comps) - 0.5, -0.5)
    ax1.set_xlabel("energy (uJ, log scale)")
    ax1.set_title("Total energy per component", fontsize=10)
    ax1.grid(axis="x", alpha=0.3)
    ax1.legend(fontsize=8, loc="lower right", framealpha=0.9)
    ax2.axvline(0, color="black", lw=0.8)
    ax2.set_xlim(-140, REL_CAP * 1.45)
    ax2.set_xlabel(f"difference from {fig_text(base.label)} (%; bars clipped at +{REL_CAP:.0f}%, label = true value)")
    ax2.set_title("Relative difference (green: lower, red: higher)", fontsize=10)
    ax2.grid(axis="x", alpha=0.3)
    tails = "; ".join(f"{run.label}: {run.caption_tail}" for run in runs)
    return png(fig), (f"Total energy per component (uJ, log scale) and the difference from the baseline {base.label} "
                      f"(%; bars beyond +{REL_CAP:.0f}% are clipped, hatched and labelled with their true value). "
                      f"{tails}.")


def layer_deltas(runs: list[Run], top: int) -> dict[str, tuple[bytes, str]]:
    """Per-group difference from the baseline (energy uJ and cycles), one figure per other ledger; groups
    matched by name (a group missing on one side counts as 0 there); the ``top`` largest energy changes and
    the rest as one "other"."""
    from matplotlib.ticker import FuncFormatter

    base = runs[0]
    noun = base.group
    out: dict[str, tuple[bytes, str]] = {}
    empty = LayerView("", {}, {})
    for i, run in enumerate(runs[1:], 2):
        b = {v.scope: v for v in base.groups}
        r = {v.scope: v for v in run.groups}
        diffs = []
        for s in dict.fromkeys([*b, *r]):
            bv, rv = b.get(s, empty), r.get(s, empty)
            de, dc = rv.total_energy_pj - bv.total_energy_pj, rv.total_cycles - bv.total_cycles
            if de or dc:
                diffs.append(LayerView(s, {"delta": dc}, {"delta": de}, abs(de), 0.0, {}))  # macs: the ranking key
        same = len(dict.fromkeys([*b, *r])) - len(diffs)
        shown = top_groups(diffs, top, "macs", noun)  # ranked by |energy difference|
        fig = bar_figure(max(len(shown), 1), width_in=FIG_WIDTH_IN * 1.2)
        ax1, ax2 = fig.subplots(1, 2, sharey=True)
        ys = list(range(len(shown)))
        for ax, vals, unit in ((ax1, [v.energy_pj.get("delta", 0.0) / PJ_PER_UJ for v in shown], "energy (uJ)"),
                               (ax2, [v.cycles.get("delta", 0.0) for v in shown], "clock cycles")):
            ax.barh(ys, vals, color=[LOWER if v < 0 else HIGHER for v in vals], height=0.75)
            ax.axvline(0, color="black", lw=0.8)
            ax.set_xlabel(f"difference in {unit}")
            if not any(vals):
                ax.text(0.5, 0.5, f"no {noun} differs in {unit}", transform=ax.transAxes, ha="center", color="#555")
            ax.grid(axis="x", alpha=0.3)
            ax.margins(x=0.12)
            ax.xaxis.set_major_formatter(FuncFormatter(lambda t, _: tick_text(t)))
            for y, v in zip(ys, vals, strict=True):
                if v:
                    sign = "+" if v > 0 else "-"
                    ax.annotate(sign + _num(abs(v)), (v, y), xytext=(3 if v > 0 else -3, 0), textcoords="offset points",
                                va="center", ha="left" if v > 0 else "right", fontsize=7)
        ax1.set_yticks(ys, [axis_label(v.scope) for v in shown], fontsize=8)
        ax1.set_ylim(max(len(shown), 1) - 0.5, -0.5)  # no row differs: one empty row, not a zero-height axis
        ax1.set_ylabel(noun)
        fig.suptitle(fig_text(f"Per {noun}: {run.label} minus {base.label} (green: lower, red: higher)"), fontsize=10)
        which = (f"the {top} {noun}s with the largest energy change and the other {len(diffs) - top} as one"
                 if len(diffs) > top else f"every {noun} that differs")
        out[f"layer_delta_{i}.png"] = (
            png(fig),
            f"Per-{noun} difference {run.label} minus baseline {base.label}: energy (uJ, left) and clock cycles "
            f"(right), {which}" + (f"; {same} {noun}(s) equal in both left out" if same else "")
            + f"; {run.label}: {run.caption_tail}; {base.label}: {base.caption_tail}.",
        )
    return out

