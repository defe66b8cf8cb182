"""Sweep reports: a sweep database (SQLite written by ``npukit sweep``, or its CSV export) -> ``report.md``,
a self-contained ``report.html`` and PNG figures.

The swept parameters are the grid columns (arch fields, :func:`~npukit.sweeps.grid_keys`) whose value
differs between rows, in grid order. Every workload is reported on its own (their energies do not
compare). Per workload:

* energy (uJ) and latency (us) vs each swept parameter: every point, and a line through the best one
  at each value;
* Pareto fronts: energy vs latency, and energy vs area (mm^2, the ``area_mm2`` column of
  :mod:`npukit.sim.area`; databases of an npukit without it get no area front); a point is on a front
  when no other point is at most as large in both and smaller in one. Configurations with the same two
  values are one front point (their configs joined by ``|``); axes are logarithmic where the values span
  more than a factor of 20. Front points are labelled with their config (the swept values);
* a heat map of two swept parameters (``x`` columns, ``y`` rows; default the first two), each cell the
  best (lowest) energy and latency over the other parameters.

``x``, ``y`` and ``color`` (the parameter that colours the Pareto plots' points; default the third
swept parameter, else the first) name swept parameters by their column (``rows``, ``dataflow``,
``bits_psum_buffer``) or grid key (``bits.psum_buffer``); anything else is a :class:`ConfigError` naming the choices.
"""

from __future__ import annotations

import csv
import io
import math
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..sim.errors import ConfigError
from ..sim.output import check_out_dir
from ..sim.palette import cycle_colors
from ..sim.report_figures import fig_text, plain_log_ticks, png
from ..sim.report_render import Block, code, write_document
from ..sim.textfile import read_text

PJ_PER_UJ = 1e6
NEEDED = ("workload", "energy_total_pj", "latency_s")
MAX_LABELLED = 14  # front points labelled in a figure (all are in the table)


@dataclass
class Point:
    """One row: its swept values, energy (pJ), latency (s), area (mm^2) and the whole row."""

    params: dict[str, Any]
    energy_pj: float
    latency_s: float
    area_mm2: float | None
    row: dict[str, Any]

    def label(self, names: list[str]) -> str:
        return " ".join(f"{_short(n)}={_fmt_value(self.params[n])}" for n in names)


def _short(name: str) -> str:
    return name.replace("bits_", "").replace("sram_kib_", "sram_") if name.startswith(("bits_", "sram_kib_")) else name


def _fmt_value(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


# ---------------------------------------------------------------------------------------------- reading


def is_sweep_file(path: str | Path) -> bool:
    """True for an SQLite file (by its header) or a ``.csv`` (a sweep export); ledgers are JSON."""
    p = Path(path)
    if p.suffix.lower() == ".csv":
        return True
    try:
        with p.open("rb") as f:
            return f.read(16) == b"SQLite format 3\x00"
    except OSError:
        return p.suffix.lower() in (".sqlite", ".sqlite3", ".db")


def read_sweep(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a sweep database or CSV export (numbers as numbers). Raises :class:`ConfigError`."""
    p = Path(path)
    if p.suffix.lower() == ".csv":
        if p.is_dir() or not p.is_file():
            raise ConfigError(f"sweep CSV '{p}' {'is a folder' if p.is_dir() else 'does not exist'}; "
                              "pass a CSV written by npukit sweep export")
        text = read_text(p, "sweep CSV", ConfigError)
        rows = [{k: _parse(v) for k, v in r.items() if k is not None} for r in csv.DictReader(io.StringIO(text))]
    else:
        from . import read_rows

        rows = read_rows(p)
    if not rows:
        raise ConfigError(f"sweep file '{p}' has no points; run npukit sweep SPEC.toml first")
    missing = [c for c in NEEDED if c not in rows[0]]
    if missing:
        raise ConfigError(f"'{p}' is not an npukit sweep (no column {', '.join(missing)}); "
                          "pass a sweep .sqlite or its CSV export")
    return rows


def _parse(v: str) -> Any:
    try:
        f = float(v)
    except ValueError:
        return v
    return int(f) if f.is_integer() and "." not in v and "e" not in v.lower() else f


def swept_parameters(rows: list[dict[str, Any]]) -> list[str]:
    """Grid columns whose value differs between rows, in grid order."""
    from . import column_name, grid_keys

    cols = [column_name(k) for k in grid_keys(multicore=True)]  # a single-core database has no chip columns
    return [c for c in cols if c in rows[0] and len({str(r.get(c)) for r in rows}) > 1]


def resolve_parameter(name: str | None, swept: list[str], flag: str) -> str | None:
    """A swept column from ``name`` (a column or grid key); None passes through."""
    if name is None:
        return None
    from . import column_name

    col = column_name(name.strip())
    if col not in swept:
        choices = ", ".join(swept) if swept else "none: every point has the same arch"
        raise ConfigError(f"{flag} '{name}' is not a swept parameter of this sweep; choose one of: {choices}")
    return col


def area_mm2(row: dict[str, Any]) -> float | None:
    """The row's ``area_mm2`` (mm^2); None when it has none (a database of an older npukit)."""
    try:
        v = float(row["area_mm2"])
    except (KeyError, TypeError, ValueError):
        return None
    return v if math.isfinite(v) and v > 0 else None


def unique_front(front: list[Point], key: Any, swept: list[str]) -> list[tuple[str, Point]]:
    """The front with points of equal ``key`` values merged: (label with the differing values joined by
    '|', the first such point)."""
    groups: dict[Any, list[Point]] = {}
    for p in front:
        groups.setdefault(key(p), []).append(p)
    out = []
    for same in groups.values():
        label = " ".join(f"{_short(n)}={'|'.join(_fmt_value(v) for v in _values([p.params for p in same], n))}"
                         for n in swept)
        out.append((label or "-", same[0]))
    return out


def pareto(points: list[Point], key: Any) -> list[Point]:
    """Points no other point dominates on the two values of ``key(point)`` (both minimised), by the first;
    points with equal values are all on the front."""
    vals = sorted(((key(p), p) for p in points), key=lambda t: (t[0][0], t[0][1]))
    front: list[Point] = []
    best = math.inf
    last: tuple[float, float] | None = None
    for ab, p in vals:
        if ab[1] < best or ab == last:
            front.append(p)
            best, last = ab[1], ab
    return front


# ---------------------------------------------------------------------------------------------- API


def write_sweep_report(
    path: str | Path, out_dir: str | Path, *, x: str | None = None, y: str | None = None, color: str | None = None,
    title: str | None = None, overwrite: bool = True,
) -> dict[str, Path]:
    """Write the sweep report of ``path`` (SQLite or CSV) into ``out_dir``; returns ``{'md': path, 'html':
    path, '<figure>.png': path, ...}``. ``x``/``y``: the heat map's parameters, ``color``: the Pareto
    plots' colouring parameter. Every option is checked before anything is drawn or written. Like a ledger report
    it also writes ``report.manifest.json`` (not in the returned dict); ``overwrite=False`` refuses any file it would
    write that exists, and with ``overwrite`` the files an earlier report listed that this one does not write are
    removed (:func:`~npukit.sim.report_render.write_document`)."""
    rows = read_sweep(path)
    swept = swept_parameters(rows)
    xs, ys, cs = (resolve_parameter(v, swept, f) for v, f in ((x, "--x"), (y, "--y"), (color, "--color")))
    if xs is not None and xs == ys:
        raise ConfigError(f"--x and --y are both '{xs}'; the heat map needs two different swept parameters")
    out = check_out_dir(out_dir)
    hx = xs or next((s for s in swept if s != ys), None)
    hy = ys or next((s for s in swept if s != hx), None)
    cpar = cs or (swept[2] if len(swept) > 2 else swept[0] if swept else None)

    by_wl: dict[str, list[Point]] = {}
    for r in rows:
        e, t = r.get("energy_total_pj"), r.get("latency_s")
        if not all(isinstance(v, int | float) and math.isfinite(v) for v in (e, t)):
            raise ConfigError(f"'{path}' row {r.get('key', '?')} has no numeric energy_total_pj/latency_s; re-run the sweep")
        by_wl.setdefault(str(r["workload"]), []).append(Point({s: r[s] for s in swept}, float(e), float(t), area_mm2(r), r))

    import matplotlib

    figures: dict[str, tuple[bytes, str]] = {}
    doc: list[Block] = [("h1", title or f"npukit sweep report: {Path(path).name}")]
    doc.append(("p", ["Source ", code(str(path)), f": {len(rows)} points, {len(by_wl)} workload(s), swept parameters: "
                      + (", ".join(swept) if swept else "none") + "."]))
    doc.append(("p", "Energy in uJ (total, DRAM included), latency in microseconds at each point's clock; area in mm^2 "
                     "(PEs, registers, SRAMs, vector unit: npukit.sim.area, sources in docs/accounting.md; on a multi-core "
                     "chip also its NoC and shared memory: npukit.sim.multicore_ppa). Pareto front: "
                     "no other point is as low in both and lower in one; equal points are one row."))
    values = [[s, ", ".join(_fmt_value(v) for v in _values(rows, s))] for s in swept]
    if values:
        doc.append(("table", ["swept parameter", "values"], values))
    with matplotlib.rc_context({"text.parse_math": False}):
        for i, (wl, pts) in enumerate(by_wl.items(), 1):
            _workload_section(doc, figures, i, wl, pts, swept, hx, hy, cpar)
    return write_document(out, doc, figures, overwrite=overwrite, manifest=True)


def _values(rows: list[dict[str, Any]], col: str) -> list[Any]:
    vals = list(dict.fromkeys(r[col] for r in rows))
    try:
        return sorted(vals)
    except TypeError:
        return sorted(vals, key=str)


def _workload_section(doc: list[Block], figs: dict[str, tuple[bytes, str]], i: int, wl: str, pts: list[Point],
                      swept: list[str], hx: str | None, hy: str | None, cpar: str | None) -> None:
    doc.append(("h2", f"Workload {wl}"))
    best_e = min(pts, key=lambda p: p.energy_pj)
    best_t = min(pts, key=lambda p: p.latency_s)
    doc.append(("table", ["best", "config", "energy (uJ)", "latency (us)"], [
        ["lowest energy", best_e.label(swept) or "-", f"{best_e.energy_pj / PJ_PER_UJ:,.3f}", f"{best_e.latency_s * 1e6:,.3f}"],
        ["lowest latency", best_t.label(swept) or "-", f"{best_t.energy_pj / PJ_PER_UJ:,.3f}", f"{best_t.latency_s * 1e6:,.3f}"],
    ]))
    if swept:
        name = f"sweep_{i}_vs_parameters.png"
        figs[name] = (_vs_parameters(wl, pts, swept), f"Energy (uJ) and latency (us) of {wl} vs each swept parameter: "
                      "every point (grey) and the best at each value (line).")
        doc.append(("figure", name, figs[name][1]))
    front = pareto(pts, lambda p: (p.latency_s, p.energy_pj))
    name = f"sweep_{i}_pareto_latency.png"
    figs[name] = (_pareto_fig(wl, pts, front, swept, cpar, "latency"),
                  f"Energy vs latency of {wl}: {len(pts)} points, the Pareto front ({len(front)} point(s)) joined and "
                  f"labelled by config; colour: {cpar or 'none'}.")
    doc.append(("h3", "Pareto front: energy vs latency"))
    doc.append(("figure", name, figs[name][1]))
    doc.append(("table", ["config", "latency (us)", "energy (uJ)"],
                [[label, f"{p.latency_s * 1e6:,.3f}", f"{p.energy_pj / PJ_PER_UJ:,.3f}"]
                 for label, p in unique_front(front, lambda p: (p.latency_s, p.energy_pj), swept)]))
    with_area = [p for p in pts if p.area_mm2 is not None]
    if with_area:
        front_a = pareto(with_area, lambda p: (p.area_mm2, p.energy_pj))
        uniq = unique_front(front_a, lambda p: (p.area_mm2, p.energy_pj), swept)
        name = f"sweep_{i}_pareto_area.png"
        figs[name] = (_pareto_fig(wl, with_area, front_a, swept, cpar, "area"),
                      f"Energy vs area (mm^2) of {wl}: the Pareto front ({len(uniq)} point(s)) labelled by config.")
        doc.append(("h3", "Pareto front: energy vs area"))
        doc.append(("figure", name, figs[name][1]))
        doc.append(("table", ["config", "area (mm^2)", "energy (uJ)", "latency (us)"],
                    [[label, f"{p.area_mm2 or 0:,.3f}", f"{p.energy_pj / PJ_PER_UJ:,.3f}", f"{p.latency_s * 1e6:,.3f}"]
                     for label, p in uniq]))
    if not (hx and hy):
        doc.append(("p", f"No heat map: it needs two swept parameters, this sweep has {len(swept)}."))
    else:
        name = f"sweep_{i}_heatmap.png"
        figs[name] = (_heatmap(wl, pts, hx, hy), f"Best energy (uJ, left) and latency (us, right) of {wl} for each "
                      f"{hx} (columns) x {hy} (rows), over the other swept parameters.")
        doc.append(("h3", f"Heat map: {hx} x {hy}"))
        doc.append(("figure", name, figs[name][1]))


def _vs_parameters(wl: str, pts: list[Point], swept: list[str]) -> bytes:
    from matplotlib.figure import Figure

    n = len(swept)
    fig = Figure(figsize=(max(7.0, 3.2 * n), 6.2), layout="constrained")
    axes = fig.subplots(2, n, squeeze=False)
    for j, s in enumerate(swept):
        vals = _values([p.params for p in pts], s)
        pos = {v: k for k, v in enumerate(vals)}
        for row, (metric, unit) in enumerate(((lambda p: p.energy_pj / PJ_PER_UJ, "energy (uJ)"),
                                              (lambda p: p.latency_s * 1e6, "latency (us)"))):
            ax = axes[row][j]
            xs = [pos[p.params[s]] + 0.12 * (((zlib.crc32(str(p.row.get("key", k)).encode()) % 7) - 3) / 3)
                  for k, p in enumerate(pts)]  # a fixed jitter per point
            ax.scatter(xs, [metric(p) for p in pts], s=10, color="#999", alpha=0.6)
            best = [min(metric(p) for p in pts if p.params[s] == v) for v in vals]
            ax.plot(range(len(vals)), best, color="#c44e52", marker="o", lw=1.5, label="best")
            ax.set_xticks(range(len(vals)), [fig_text(_fmt_value(v)) for v in vals], fontsize=8)
            _scale(ax, [metric(p) for p in pts], "y")
            ax.grid(alpha=0.3)
            if j == 0:
                ax.set_ylabel(unit)
            if row == 1:
                ax.set_xlabel(fig_text(s))
    fig.suptitle(fig_text(f"{wl}: energy and latency vs each swept parameter"))
    return png(fig)


def _pareto_fig(wl: str, pts: list[Point], front: list[Point], swept: list[str], cpar: str | None, against: str) -> bytes:
    from matplotlib.figure import Figure

    def xval(p: Point) -> float:
        return p.latency_s * 1e6 if against == "latency" else p.area_mm2 or 0.0

    fig = Figure(figsize=(10, 6.5), layout="constrained")
    ax = fig.add_subplot()
    if cpar:
        vals = _values([p.params for p in pts], cpar)
        pal = cycle_colors(len(vals))
        for k, v in enumerate(vals):
            sel = [p for p in pts if p.params[cpar] == v]
            ax.scatter([xval(p) for p in sel], [p.energy_pj / PJ_PER_UJ for p in sel], s=18, color=pal[k], alpha=0.55,
                       label=fig_text(f"{cpar}={_fmt_value(v)}"))
    else:
        ax.scatter([xval(p) for p in pts], [p.energy_pj / PJ_PER_UJ for p in pts], s=18, color="#999")
    ax.plot([xval(p) for p in front], [p.energy_pj / PJ_PER_UJ for p in front], color="black", lw=1.2, marker="o",
            markersize=6, markerfacecolor="none", label="Pareto front", zorder=4)
    # equal points share one label: the values that differ between them joined by '|'
    groups: dict[tuple[float, float], list[Point]] = {}
    for p in front:
        groups.setdefault((xval(p), p.energy_pj / PJ_PER_UJ), []).append(p)
    step = max(1, math.ceil(len(groups) / MAX_LABELLED))
    for k, (xy, same) in enumerate(groups.items()):
        if k % step == 0 or k == len(groups) - 1:
            text = " ".join(f"{_short(n)}={'|'.join(_fmt_value(v) for v in _values([p.params for p in same], n))}"
                            for n in swept)
            ax.annotate(fig_text(text), xy, fontsize=7, xytext=(6, 6) if k % 2 == 0 else (6, -12), textcoords="offset points",
                        color="#222")
    _scale(ax, [xval(p) for p in pts], "x")
    _scale(ax, [p.energy_pj for p in pts], "y")
    ax.set_xlabel("latency (us)" if against == "latency" else "area (mm^2)")
    ax.set_ylabel("energy (uJ)")
    ax.set_title(fig_text(f"{wl}: energy vs {against}"))
    ax.grid(which="both", alpha=0.2)
    ax.legend(fontsize=8, loc="best")
    return png(fig)


def _scale(ax: Any, values: list[float], axis: str) -> None:
    """Log scale (plain tick labels) when the values span more than a factor of 20, else linear."""
    pos = [v for v in values if v > 0]
    if pos and max(pos) / min(pos) > 20:
        (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
        plain_log_ticks(ax, x=axis == "x", y=axis == "y")


def _heatmap(wl: str, pts: list[Point], hx: str, hy: str) -> bytes:
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    xv = _values([p.params for p in pts], hx)
    yv = _values([p.params for p in pts], hy)
    fig = Figure(figsize=(max(8.0, 1.3 * len(xv) * 2 + 3), max(3.5, 0.6 * len(yv) + 2)), layout="constrained")
    axes = fig.subplots(1, 2)
    for ax, (metric, unit, cmap) in zip(axes, ((lambda p: p.energy_pj / PJ_PER_UJ, "energy (uJ)", "viridis"),
                                               (lambda p: p.latency_s * 1e6, "latency (us)", "magma")), strict=True):
        grid = [[math.nan] * len(xv) for _ in yv]
        for p in pts:
            r, c = yv.index(p.params[hy]), xv.index(p.params[hx])
            v = metric(p)
            if math.isnan(grid[r][c]) or v < grid[r][c]:
                grid[r][c] = v
        finite = [v for row in grid for v in row if not math.isnan(v)]
        im = ax.imshow(grid, cmap=cmap, aspect="auto", origin="lower")
        mid = (min(finite) + max(finite)) / 2
        for r, row in enumerate(grid):
            for c, v in enumerate(row):
                if not math.isnan(v):
                    ax.text(c, r, f"{v:,.4g}", ha="center", va="center", fontsize=8,
                            color="white" if v < mid else "black")
        ax.set_xticks(range(len(xv)), [fig_text(_fmt_value(v)) for v in xv])
        ax.set_yticks(range(len(yv)), [fig_text(_fmt_value(v)) for v in yv])
        ax.set_xlabel(fig_text(hx))
        ax.set_ylabel(fig_text(hy))
        ax.set_title(f"best {unit}")
        bar = fig.colorbar(im, ax=ax, shrink=0.85)
        bar.formatter = FuncFormatter(lambda v, _: f"{v:,.4g}")
        bar.update_ticks()
    fig.suptitle(fig_text(f"{wl}: best over the other parameters"))
    return png(fig)
