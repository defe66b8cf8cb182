"""A multi-core result as text (``npukit sim --arch multicore.toml``), its per-core CSV rows and its timeline
figure (one bar per core per layer, cycles on x)."""

from __future__ import annotations

import re
from typing import Any

from .multicore_sim import MultiCoreResult
from .output import format_table
from .palette import cycle_colors
from .report_render import no_surrogates
from .result_text import arch_header, ppa_line
from .terminal import escape_controls


def render_multicore(result: MultiCoreResult, quiet: bool = False) -> str:
    """The per-layer table, the per-core busy cycles, the searched schedules and the totals; control characters in
    names (from user files) are escaped (:func:`npukit.sim.terminal.escape_controls`)."""
    m = result.arch
    kinds = ", ".join(f"{sum(c.kind == k for c in m.cores)} {k}" for k in ("mac", "simd") if any(c.kind == k for c in m.cores))
    ic = m.interconnect
    lines = [f"{result.workload} on {m.name}: {len(m.cores)} cores ({kinds}), interconnect "
             f"{ic.bandwidth_bytes_per_cycle:g} B/cycle/link, {ic.latency_cycles:g} cycles, {ic.energy_pj_per_bit:g} pJ/bit "
             f"({ic.topology}, {ic.source}), shared memory {m.shared_memory.kib:g} KiB, DRAM {m.dram.channels} x "
             f"{m.dram.bandwidth_bytes_per_cycle:g} B/cycle; schedule {result.schedule.label} (objective {m.objective})"]
    groups: dict[Any, list[Any]] = {}
    for c in m.cores:  # one header per distinct core: array, widths, number formats, memories
        groups.setdefault((c.arch, c.kind, id(c.nest), c.vector_unit), [c]).append(c.name)
    for (arch, kind, _, vector), (first, *names) in groups.items():
        nest = first.nest
        lines.append(f"  cores {', '.join(names)}: {nest.name if nest is not None else arch.name}")
        lines += [f"    {x}" for x in _core_header(arch, kind, nest, vector, m.energy_table, m.objective)]
    lines.append("")
    if not quiet:
        headers = ["layer", "step", "split", "cores", "start", "cycles", "interconnect cyc", "DRAM MB", "link MB", "uJ"]
        rows = [[r["name"], r["step"], r["split"], r["cores"], round(r["start_cycle"]), round(r["cycles"]),
                 round(r["interconnect_cycles"]), r["dram_bytes"] / 1e6, r["interconnect_bytes"] / 1e6,
                 r["energy_total_pj"] / 1e6] for r in result.layer_rows]
        lines += [format_table(headers, rows), ""]
        lines += [format_table(["core", "kind", "busy cycles", "busy %"],
                               [[c.name, c.kind, round(b), 100 * b / result.total_cycles if result.total_cycles else 0.0]
                                for c, b in zip(m.cores, result.core_busy, strict=True)]), ""]
    if result.searched:
        lines += ["schedules searched: " + "; ".join(
            f"{s['schedule']} {s['cycles']:,.0f} cycles {s['energy_pj'] / 1e6:,.1f} uJ" for s in result.searched)]
    lines.append(f"total: {result.macs:,} MACs, {result.total_cycles:,.0f} cycles ({result.latency_s * 1e3:.3f} ms at "
                 f"{m.clock_ghz:g} GHz), utilization {100 * result.utilization:.1f}% over all cycles, "
                 f"energy {result.energy_pj / 1e6:,.1f} uJ, "
                 f"DRAM {sum(r['dram_bytes'] for r in result.layer_rows):,.0f} bytes, "
                 f"interconnect {result.interconnect_bytes / 1e6:,.2f} MB"
                 + (f" (of which the bus to the simd core {result.ledger.meta['multicore'].get('bus_bytes', 0) / 1e6:,.2f}"
                    " MB)" if m.bus is not None else "")
                 + f" ({100 * result.interconnect_share:.1f}% of the time waiting on it)")
    ppa = result.ledger.meta.get("ppa")
    if ppa:  # area, leakage and power (npukit.sim.multicore_ppa), as the simulation recorded them
        lines.append(ppa_line(ppa, "cores, NoC and shared memory"))
    lines.append("utilization = MACs / (PEs of all MAC cores x total cycles), stalls and interconnect waits included; "
                 "busy % = the cycles a core works / total cycles")
    return escape_controls("\n".join(lines))


def _core_header(arch: Any, kind: str, nest: Any, vector: bool, table: str, chip_objective: str | None = None
                 ) -> list[str]:
    """A core as printed above a multi-core result: a simd core's vector unit; a loop-nest core's array and memory
    levels (its YAML's, with their sizes, operands and costs); else the 2-D core's :func:`arch_header`, naming the
    objective its shares are mapped under (the chip's, ``chip_objective``)."""
    v = arch.vector
    vec = f"vector unit {v.lanes} lanes {v.number}{v.bits} at {arch.clock_ghz:g} GHz, energy table {table}"
    if kind == "simd":  # its buffers price the vector unit's reads and writes
        return [vec, arch_header(arch, table, dram=False, chip_objective=chip_objective)[2]]
    if nest is None:
        head = arch_header(arch, table, dram=False, chip_objective=chip_objective)
        return head if vector else head[:1] + ["no vector unit (vector ops run on the simd core)"]
    dims = " x ".join(f"{d} {n}" for d, n in nest.array.dims.items())
    mems = "; ".join(f"{mem.name} {mem.size_bits / 8:,.0f} B ({', '.join(mem.operands)}; {mem.r_cost_pj:g}/"
                     f"{mem.w_cost_pj:g} pJ per access)" for mem in nest.memories)
    b = nest.bits
    return [f"loop-nest core: array {dims} ({nest.array.units:,} PEs, {nest.array.unit_energy_pj:g} pJ per MAC), "
            f"mapped by the loop-nest mapper; operands I {b['I']} b, W {b['W']} b, partial sums {b['O']} b, "
            f"outputs {b['O_final']} b",
            f"memories: {mems}",
            vec if vector else "no vector unit (vector ops run on the simd core)"]


def core_rows(result: MultiCoreResult) -> list[dict[str, Any]]:
    """One row per core: its kind and busy cycles."""
    return [{"core": c.name, "kind": c.kind, "busy_cycles": b,
             "busy_fraction": b / result.total_cycles if result.total_cycles else 0.0}
            for c, b in zip(result.arch.cores, result.core_busy, strict=True)]


DISTINCT = 20  # colours cycle_colors gives before it repeats


def _series(name: str) -> str:
    """A layer's series in the timeline: its name with block and layer numbers as ``#`` (every block's q
    projection one colour), so a model of many repeated blocks still gets a legend of its layer roles."""
    return re.sub(r"\d+", "#", name)


def timeline_figure(result: MultiCoreResult, max_bars: int = 4000) -> Any:
    """A matplotlib Figure: per core, a bar per layer it works on (x: cycles); the caller saves and closes it."""
    m, meta = result.arch, result.ledger.meta["multicore"]  # the simulator's own output: read as it is
    fields = {"schedule": result.schedule.label, "core_names": [c.name for c in m.cores],
              "core_kinds": [c.kind for c in m.cores], "arch_name": m.name,
              "timeline": [(int(c), float(a), float(b), str(n)) for c, a, b, n in meta["timeline"]]}
    return timeline_from_meta(fields, result.workload, result.total_cycles, max_bars)


def timeline_from_meta(meta: dict[str, Any], workload: str, total_cycles: float, max_bars: int = 4000) -> Any:
    """The timeline figure from a ledger's ``meta['multicore']`` as :func:`npukit.sim.multicore_meta.
    check_multicore_meta` returns it (read here: core names and kinds, timeline, schedule, arch name)."""
    from matplotlib.figure import Figure

    cores, kinds, timeline = meta["core_names"], meta["core_kinds"], meta["timeline"]
    fig = Figure(figsize=(11, 1.2 + 0.45 * max(1, len(cores))))
    ax = fig.add_subplot(1, 1, 1)
    keys = {n: _series(n) for n in dict.fromkeys(str(t[3]) for t in timeline)}
    series = list(dict.fromkeys(keys.values()))
    colors = dict(zip(series, cycle_colors(len(series)), strict=True))
    span = max(total_cycles, 1)
    for core, start, end, name in timeline[:max_bars]:
        ax.barh(core, end - start, left=start, height=0.7, color=colors[keys[str(name)]], edgecolor="white",
                linewidth=0.3)
        if (end - start) / span >= 0.06:  # wide enough to carry its name
            ax.text((start + end) / 2, core, _drawn(name)[:24], ha="center", va="center", fontsize=6, clip_on=True)
    ax.set_yticks(range(len(cores)), [no_surrogates(escape_controls(f"{c} ({k})")) for c, k in zip(cores, kinds,
                                                                                                    strict=True)])
    ax.invert_yaxis()
    ax.set_xlabel("cycle")
    cut = f", first {max_bars} bars" if len(timeline) > max_bars else ""
    ax.set_title(_drawn(f"{workload} on {meta['arch_name']}: schedule {meta['schedule']}{cut}"))
    ax.set_xlim(0, span)
    ax.grid(axis="x", alpha=0.3)
    from matplotlib.patches import Patch

    shown = series[:DISTINCT]
    handles = [Patch(color=colors[k], label=_drawn(k)) for k in shown]
    if len(series) > len(shown):  # colours repeat from here on: say so rather than mislabel
        handles.append(Patch(color="none", label=f"+ {len(series) - len(shown)} more (colours repeat)"))
    ax.legend(handles=handles, fontsize=6, loc="upper left", bbox_to_anchor=(1.0, 1.0),
              ncol=1 + len(handles) // 16)
    fig.tight_layout()
    return fig


def _drawn(text: str) -> str:
    """A name as timeline text: control characters and non-UTF-8 bytes (unpaired surrogates, from a file name that is
    not UTF-8, which matplotlib cannot draw) escaped, ``$`` not mathtext."""
    return no_surrogates(escape_controls(text)).replace("$", r"\$")
