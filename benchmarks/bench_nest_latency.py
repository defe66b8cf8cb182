"""Loop-nest latency and energy on ZigZag's own mappings, layer by layer, against ZigZag 3.9.1's dumps.

npukit's latency (``npukit.sim.nest_latency``) and energy (``npukit.sim.loopnest``) of the mapping ZigZag chose.

Every ``*_complete.json`` dump under each ``--zigzag-dir`` (a folder of pair folders, as
``bench_vs_zigzag.py --all`` and ``bench_zigzag_variants.py`` keep them, or one pair folder) holds a layer,
the spatial and temporal mapping ZigZag chose and its latency terms and energy. Each is read back
(``npukit.sim.zigzag_dump``), evaluated on the pair's hardware YAML (found as ``<name>.yaml`` in a
``--hardware-dir``, the name being the pair folder's, less a ``_resnet18``/``_mobilenetv2``/``_alexnet``
suffix, or the dumped accelerator's) and compared: on-loading, computation (temporal + stall) and
off-loading (+ systolic drain), and the total energy. Printed per pair: layers, layers whose every latency
term is exact (1e-9 relative) and within 1% (total), the worst total latency difference, layers whose
energy is exact (1e-6 relative) and the worst energy difference; per-layer rows go to a CSV. Without any
dump it says so and exits 0.

    python benchmarks/bench_nest_latency.py [--zigzag-dir .peers/zzruns .peers/zzvariants]
        [--hardware-dir DIR ...] [--out out/bench]
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import io
import sys
from pathlib import Path

from npukit.sim import format_table, prepare_out_dir, write_csv

WORKLOADS = ("_resnet18", "_mobilenetv2", "_alexnet")
TERMS = (("onloading", "data_onloading"), ("computation", "computation"), ("offloading", "data_offloading"))


def pair_folders(dirs: list[str]) -> list[Path]:
    """Folders holding ``*_complete.json`` dumps: each dir itself or its sub-folders."""
    out: list[Path] = []
    for d in dirs:
        p = Path(d)
        if glob.glob(str(p / "*_complete.json")):
            out.append(p)
        if p.is_dir():
            out += [q for q in sorted(p.iterdir()) if q.is_dir() and glob.glob(str(q / "*_complete.json"))]
    return list(dict.fromkeys(out))


def hardware_for(folder: Path, accelerator: str, hw_dirs: list[Path], cache: dict):
    """The Hardware of a dump in ``folder`` whose accelerator is ``accelerator``, or None when no hardware
    YAML is found (the folder's name, less a workload suffix, first; then the accelerator's)."""
    from npukit.sim.zigzag_io import load_zigzag_hardware

    name = folder.name
    for w in WORKLOADS:
        name = name.removesuffix(w)
    for cand in dict.fromkeys((folder.name, name, accelerator)):
        for d in hw_dirs:
            path = d / f"{cand}.yaml"
            if path.is_file():
                if path not in cache:
                    with contextlib.redirect_stderr(io.StringIO()):  # unmodelled fields: irrelevant here
                        cache[path] = load_zigzag_hardware(path)
                return cache[path]
    return None


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-12)


def check_pair(folder: Path, hw_dirs: list[Path]) -> tuple[dict | None, list[dict]]:
    """(summary row, per-layer rows) of one pair folder; (None, []) without its hardware."""
    from npukit.sim.loopnest import evaluate
    from npukit.sim.nest_latency import nest_latency
    from npukit.sim.zigzag_dump import case_inputs, read_dump

    rows, cache = [], {}
    for f in sorted(glob.glob(str(folder / "*_complete.json"))):
        case = read_dump(f)
        base = hardware_for(folder, case.accelerator, hw_dirs, cache)
        if base is None:
            continue
        hw, layer = case_inputs(case, base)
        lat = nest_latency(hw, layer, case.spatial, case.temporal)
        ours = {"onloading": lat.onloading, "computation": lat.computation, "offloading": lat.offloading + lat.drain}
        row = {"pair": folder.name, "layer": layer.name}
        for k, zk in TERMS:
            row[f"{k}"], row[f"zigzag_{k}"] = ours[k], case.latency[zk]
        row["total"], row["zigzag_total"] = lat.total, sum(case.latency[zk] for _, zk in TERMS)
        row["energy_pj"], row["zigzag_energy_pj"] = evaluate(hw, layer, case.spatial, case.temporal).energy_pj, case.energy_pj
        row["latency_exact"] = all(abs(ours[k] - case.latency[zk]) <= 1e-9 * max(1.0, abs(case.latency[zk]))
                                   for k, zk in TERMS)
        row["energy_exact"] = _rel(row["energy_pj"], case.energy_pj) <= 1e-6
        rows.append(row)
    if not rows:
        return None, []
    summary = {
        "pair": folder.name, "layers": len(rows),
        "latency_exact": sum(r["latency_exact"] for r in rows),
        "latency_within_1pct": sum(_rel(r["total"], r["zigzag_total"]) <= 0.01 for r in rows),
        "latency_worst_pct": round(100 * max(_rel(r["total"], r["zigzag_total"]) for r in rows), 4),
        "energy_exact": sum(r["energy_exact"] for r in rows),
        "energy_worst_pct": round(100 * max(_rel(r["energy_pj"], r["zigzag_energy_pj"]) for r in rows), 4),
    }
    return summary, rows


def _default_hw_dirs() -> list[Path]:
    here = Path(__file__).resolve().parent.parent
    found = sorted(glob.glob(str(here / ".peers/zigzag/lib/python*/site-packages/zigzag/inputs/hardware")))
    return [here / "examples" / "zigzag" / "hardware"] + [Path(p) for p in found]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--zigzag-dir", nargs="+", default=[".peers/zzruns", ".peers/zzvariants"],
                    help="folders of ZigZag layer dumps (pair folders or folders of them)")
    ap.add_argument("--hardware-dir", nargs="*", default=[],
                    help="folders with the pairs' hardware YAMLs (searched first; then examples/zigzag/hardware)")
    ap.add_argument("--out", default="out/bench")
    args = ap.parse_args(argv)
    folders = pair_folders(args.zigzag_dir)
    if not folders:
        print(f"no ZigZag layer dumps (*_complete.json) under {' '.join(args.zigzag_dir)}: skipped")
        return 0
    hw_dirs = [Path(d) for d in args.hardware_dir] + _default_hw_dirs()
    summaries, layers = [], []
    for folder in folders:
        s, rows = check_pair(folder, hw_dirs)
        if s is None:
            print(f"{folder}: no hardware YAML found (pass --hardware-dir): skipped")
            continue
        summaries.append(s)
        layers += rows
    if not summaries:
        return 0
    print(format_table(list(summaries[0]), [list(s.values()) for s in summaries]))
    n = sum(s["layers"] for s in summaries)
    print(f"\nall: {n} layers in {len(summaries)} pairs; latency exact on {sum(s['latency_exact'] for s in summaries)}, "
          f"within 1% on {sum(s['latency_within_1pct'] for s in summaries)}, worst "
          f"{max(s['latency_worst_pct'] for s in summaries)}%; energy exact on "
          f"{sum(s['energy_exact'] for s in summaries)}, worst {max(s['energy_worst_pct'] for s in summaries)}%")
    out = prepare_out_dir(args.out)
    print(f"wrote {write_csv(out / 'nest_latency.csv', layers)}")
    print(f"wrote {write_csv(out / 'nest_latency_pairs.csv', summaries)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
