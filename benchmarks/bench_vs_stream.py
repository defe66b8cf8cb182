"""Benchmark: npukit's multi-core simulator side by side with Stream (``stream-dse==2.1.1``).

Stream runs in its own virtualenv (``.peers/stream``, Python >= 3.12, created with ``--install``; never an npukit
dependency) through ``benchmarks/_stream_driver.py``, which reads Stream's shipped hardware YAMLs and solves its
test workloads on each of ``--hardware`` (default :data:`SIDE_BY_SIDE`, all seven chips Stream ships for them:
``tpu_like_quad_core``, the two eyeriss-like chips, ``simba_small``, ``meta_prototype_dual_core_simd_offchip``, the
36-chiplet ``simba`` and the two-chip ``tpu_v7_ironwood`` slice) layer by layer (Stream's
``fusion_cut_points = "per-layer"``) and fused (Stream's own fusion groups). npukit reads the same chip file with its
Stream reader (:func:`npukit_arch`, :func:`npukit.sim.stream_io.load_stream_hardware`: the MAC cores, as npukit's 2-D
ws cores on ``tpu_like_quad_core`` and as loop-nest cores of their core YAML on the others; the vector cores and the
bus to them; the off-chip port and the links to it; the links between cores; an energy table of the file's own
costs), then runs the same workloads ``none/split`` and with fusion (``chain/split``). Prints per hardware a table
(latency and energy per pair, their ratio, wall times: npukit's first, cold call and its later calls, which reuse the
loop-nest mapper's cache) and Stream's latency by its terms, and
writes CSV (``bench_vs_stream.csv``; ``npukit_layers.csv``: npukit's per-layer rows); skips cleanly (exit 0) when
Stream is absent. See docs/multicore.md for what differs and why.

    python benchmarks/bench_vs_stream.py [--out out/bench_stream] [--install] [--stream-python PATH]
        [--hardware NAME,...] [--cases NAME,...] [--stream-json stream_runs.json] [--layer-cores all|search]
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # noqa: E402 - run as a script from the checkout

from npukit.benchmarks._args import Parser, out_folder, publish  # noqa: E402
from npukit.sim import ConfigError  # noqa: E402

HERE = Path(__file__).resolve().parent
VENV = HERE.parent / ".peers" / "stream"
# npukit's per-layer rows kept in npukit_layers.csv
LAYER_COLUMNS = ("name", "step", "split", "start_cycle", "cycles", "compute_cycles", "stall_cycles",
                 "interconnect_cycles", "dram_bytes", "interconnect_bytes", "core_mapping")


SIDE_BY_SIDE = ("tpu_like_quad_core", "eyeriss_like_dual_core", "eyeriss_like_quad_core", "simba_small",
                "meta_prototype_dual_core_simd_offchip", "simba", "tpu_v7_ironwood")
ARCH_CORES = ("tpu_like_quad_core",)  # MAC cores npukit's 2-D weight-stationary Arch describes (tpu_like.yaml)
CASES = ("2conv_16_16", "2conv_32_32", "attention_head", "swiglu", "resnet_subgraph", "conv_relu_gemm")
# two-conv sizes no part of npukit was checked or tuned on before they ran (docs/multicore.md, "Held-out sizes")
HELD_OUT = ("2conv_8_8", "2conv_24_16", "2conv_16_48", "2conv_40_24")


def parse_cases(text: str) -> tuple[str, ...]:
    """The cases a ``--cases`` value names: Stream's test workloads (:data:`CASES`), ``2conv_H_C`` for any image
    side ``H`` and channel count ``C`` from 1 to 1024 (Stream's two-conv maker), ``default`` (:data:`CASES`) and
    ``held-out`` (:data:`HELD_OUT`); ValueError naming the first case it cannot read."""
    out: list[str] = []
    for case in (c.strip() for c in text.split(",")):
        if case in ("default", "held-out"):
            out += CASES if case == "default" else HELD_OUT
            continue
        parts = case.split("_")
        if case.startswith("2conv_") and len(parts) == 3 and all(p.isascii() and p.isdigit() and 1 <= int(p) <= 1024
                                                                            for p in parts[1:]):
            out.append(f"2conv_{int(parts[1])}_{int(parts[2])}")
        elif case in CASES:
            out.append(case)
        else:
            raise ValueError(f"--cases: unknown case {case!r} (use {', '.join(CASES)}, 2conv_H_C with H and C "
                             "from 1 to 1024, default or held-out)")
    return tuple(dict.fromkeys(out))


def core_yaml(path: str) -> Path:
    """A core YAML recorded in a Stream summary: the path itself, or, when the summary came from another
    checkout or machine (``--stream-json``), the same file under this checkout's Stream install (the part of
    the path from ``site-packages/`` on)."""
    p = Path(path)
    if p.exists():
        return p
    tail = path.split("site-packages/", 1)[-1]
    for site in sorted(VENV.glob("lib/python3*/site-packages")):
        if (site / tail).exists():
            return site / tail
    raise SystemExit(f"bench_vs_stream: Stream's core file {_shown(path)} is not here and {_shown(tail)} is not under "
                     f"{VENV}; install Stream (--install) or rerun Stream")


def _shown(text: str, limit: int = 200) -> str:
    """``text`` for an error line: control characters escaped (a NUL or an escape sequence never reaches the
    terminal raw), cut to ``limit`` characters."""
    out = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return out if len(out) <= limit else out[: limit - 3] + "..."


# ONNX operator types of the workloads' GEMMs and convs, and of their elementwise ops (Stream sends a core only the
# operator types its ``operator_types`` lists)
def chip_yaml(hw: dict) -> Path:
    """The Stream chip file of a hardware summary: ``NAME.yaml`` beside its core files (their folder, or the
    folder above a ``cores/`` folder), under this checkout's Stream install (:func:`core_yaml`)."""
    core = core_yaml(next(iter(hw["cores"].values()))["path"])
    root = core.parent.parent if core.parent.name == "cores" else core.parent
    return root / f"{hw['name']}.yaml"


def npukit_arch(hw: dict, bits: int, layer_cores: str = "all"):  # -> MultiCoreArch
    """The npukit multi-core arch of a Stream hardware summary: its chip file read by npukit's Stream reader
    (:func:`npukit.sim.stream_io.load_stream_hardware`: MAC cores as loop-nest cores of their YAML, the vector cores
    pooled into one ``simd`` core and its bus, DRAM channels, the narrowest link), its operands at the workload's
    ``bits`` as Stream's cost estimator takes them; on ``tpu_like_quad_core`` (:data:`ARCH_CORES`) the MAC cores are
    npukit's 2-D weight-stationary arrays of the YAML's size instead (the core's largest memory split over the four
    buffers); ``layer_cores``: the arch's ``layer_cores`` (``search``: a layer alone may run on fewer cores)."""
    from dataclasses import replace

    from npukit.sim.stream_io import load_stream_hardware

    m = replace(load_stream_hardware(chip_yaml(hw), "latency", operand_bits=bits, warn=False), layer_cores=layer_cores)
    if hw["name"] in ARCH_CORES:
        m = replace(m, cores=tuple(replace(c, nest=None) if c.kind == "mac" else c for c in m.cores))
    return m


def npukit_workload(case: str):  # -> (Workload, bits)
    """The npukit workload of a Stream test case (the shapes of Stream's ONNX makers)."""
    from npukit.sim import Layer, VectorOp, Workload, conv_layer

    if case.startswith("2conv"):
        _, h, c = case.split("_")
        h, c = int(h), int(c)
        return Workload(case, [conv_layer("Conv1", h + 2, h + 2, 3, 3, c, c, 1),
                               conv_layer("Conv2", h + 2, h + 2, 3, 3, c, c, 1)]), 8
    if case == "attention_head":  # SEQ 128, DMODEL 512, DHEAD 64, bf16
        return Workload(case, [Layer("Q", 128, 64, 512), Layer("K", 128, 64, 512), Layer("V", 128, 64, 512),
                               Layer("scores", 128, 128, 64, kind="attention"),
                               VectorOp("softmax", "softmax", 128 * 128, reduce=128),
                               Layer("context", 128, 64, 128, kind="attention")]), 16
    if case == "swiglu":  # seq 1, embedding 16, hidden 32, bf16
        return Workload(case, [Layer("Gemm_Left", 1, 32, 16), Layer("Gemm_Right", 1, 32, 16),
                               VectorOp("Silu", "silu", 32), VectorOp("Elt_Mul", "mul", 32, inputs=2),
                               Layer("Gemm_Down", 1, 16, 32)]), 16
    if case == "resnet_subgraph":  # BASIC_RESIDUAL: 8 channels, 16 x 16, 3x3 pad 1, bf16
        return Workload(case, [conv_layer("Conv1", 18, 18, 3, 3, 8, 8, 1), VectorOp("Relu1", "other", 16 * 16 * 8),
                               conv_layer("Conv2", 18, 18, 3, 3, 8, 8, 1),
                               VectorOp("Add1", "add", 16 * 16 * 8, inputs=2)]), 16
    if case == "conv_relu_gemm":  # 8 -> 16 channels, 16 x 16, 3x3 pad 1, flatten, 4096 -> 10, bf16
        return Workload(case, [conv_layer("Conv1", 18, 18, 3, 3, 8, 16, 1), VectorOp("Relu1", "other", 16 * 16 * 16),
                               Layer("Gemm1", 1, 10, 16 * 16 * 16)]), 16
    raise ValueError(case)


def node_round_trip_bytes(op, bits: int) -> float:
    """Bytes a vector op moves off chip and back under Stream's per-layer mode, which cuts the graph after every
    ONNX node (``fusion_cut_points = "per-layer"``), so each node reads its inputs from and writes its output to the
    off-chip core. Stream's ONNX parser splits a softmax into four nodes (max, exp, sum, div: ``Op5_max`` ... in its
    results), whose full-size tensors cross six times (x to max, x to exp, e from exp, e to sum, e to div, y from
    div; the row vectors, 1/row-length of that, are left out); an elementwise op moves its ``inputs`` and its
    output. npukit's layer-by-layer schedule moves ``inputs`` + 1 tensors for every vector op, the softmax one
    operator (x in, y out)."""
    n = op.batch * op.elements * bits / 8
    return 6 * n if op.op == "softmax" else (op.inputs + 1) * n


def per_node(res, wl, bits: int, march, table) -> tuple[float, float, float]:  # noqa: ANN001
    """npukit's layer-by-layer cycles and pJ with Stream's per-layer off-chip round trips
    (:func:`node_round_trip_bytes`) in place of npukit's own for each vector op: each vector node becomes its round
    trip over the off-chip port in series with its compute (Stream's transfer, node, transfer slots), instead of
    npukit's row (its DRAM transfers streamed beside its lanes, so the longer of the two); the DRAM (and any bus)
    energy of the row is replaced by the round trip's. Returns (cycles, pJ, round-trip bytes)."""
    dram = march.cores[march.mac_cores[0]].arch.dram_bandwidth_bytes_per_cycle
    rows = {r["name"]: r for r in res.rows()}
    cycles, pj, trip = res.total_cycles, res.energy_pj, 0.0
    for op in wl.layers:
        if op.kind != "vector":
            continue
        b = node_round_trip_bytes(op, bits)
        r = rows[op.name]
        trip += b
        cycles += b / dram + r["compute_cycles"] - r["cycles"]
        pj += b * 8 * table.dram_bit() - r.get("energy_bus_pj", 0.0) - r.get("energy_dram_pj", 0.0)
    return cycles, pj, trip


def _positive(run: dict, key: str, where: str) -> None:
    v = run.get(key)
    if isinstance(v, bool) or not isinstance(v, int | float) or not 0 < v < 1e300:
        raise ValueError(f"{where}: {key} must be a positive finite number, got {str(v)[:40]!r}")


def _link_energy(link: dict, where: str) -> None:
    """A link's ``unit_energy_cost`` (pJ/bit): null (none given) or a finite number >= 0; ValueError otherwise."""
    if "unit_energy_cost" not in link:
        raise ValueError(f"{where} lacks unit_energy_cost (pJ/bit; null when none is given)")
    v = link["unit_energy_cost"]
    if v is not None and (isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v < 1e300):
        raise ValueError(f"{where}: unit_energy_cost must be a finite number >= 0 (pJ/bit) or null, got "
                         f"{_shown(str(v), 40)!r}")


def load_runs(path: str, cases: tuple[str, ...] | None, hardware: tuple[str, ...] | None) -> dict:
    """A ``stream_runs.json`` of this benchmark, checked whole before anything is written and kept to ``cases`` and
    ``hardware`` (None: all); ValueError (one line) when it is not one: each hardware a summary naming its chip file
    under this checkout's Stream install, each run a known case on one of them, fused true or false, its cycles,
    energy and wall time positive and finite (or an ``error``), no pair twice, Stream's slots readable."""
    from npukit.sim import NpukitError
    from npukit.sim.bounded import load_json
    from npukit.sim.stream_io import load_stream_hardware
    from npukit.sim.textfile import check_file, read_text

    try:
        p = check_file(path, "--stream-json", ValueError, "pass the stream_runs.json of an earlier --out")
        data = load_json(read_text(p, "--stream-json", ConfigError), f"--stream-json '{path}'", ConfigError)
    except NpukitError as exc:
        raise ValueError(str(exc)) from None
    where = f"--stream-json '{path}'"
    if not isinstance(data, dict) or not isinstance(data.get("runs"), list) or not isinstance(data.get("hardware"), list):
        raise ValueError(f"{where}: not a stream_runs.json of this benchmark (needs 'hardware' and 'runs' lists)")
    names = set()
    for hw in data["hardware"]:
        if not isinstance(hw, dict) or not re.fullmatch(r"[A-Za-z0-9_]+", str(hw.get("name"))):
            raise ValueError(f"{where}: each hardware needs a 'name' of letters, digits and _")
        if not isinstance(hw.get("cores"), dict) or not hw["cores"] or not isinstance(hw.get("links"), list):
            raise ValueError(f"{where}: hardware {hw['name']} needs 'cores' (a non-empty table) and 'links' (a list)")
        try:
            chip = chip_yaml(hw)
            for link in hw["links"]:
                _positive(link, "bandwidth_bits", f"{where}: a link of {hw['name']}")
                if not isinstance(link["type"], str):
                    raise TypeError(f"a link's type must be a string, got {_shown(str(link['type']), 40)!r}")
                _link_energy(link, f"{where}: a link of {hw['name']}")
        except (KeyError, TypeError, AttributeError, SystemExit) as exc:
            raise ValueError(f"{where}: hardware {hw['name']}: {exc}") from None
        if not chip.is_file():
            raise ValueError(f"{where}: hardware {hw['name']}'s chip file {chip} is not there")
        try:
            load_stream_hardware(chip, warn=False)
        except NpukitError as exc:
            raise ValueError(f"{where}: hardware {hw['name']}: {exc}") from None
        if hw["name"] in names:
            raise ValueError(f"{where}: hardware {hw['name']} is there twice")
        names.add(hw["name"])
    runs, pairs = [], set()
    for i, run in enumerate(data["runs"]):
        at = f"{where}: run {i}"
        if not isinstance(run, dict):
            raise ValueError(f"{at} is not a table")
        case, name = run.get("case"), run.get("hardware", "tpu_like_quad_core")
        try:
            known = isinstance(case, str) and parse_cases(case) == (case,)
        except ValueError:
            known = False
        if not known:
            raise ValueError(f"{at}: case {str(case)[:40]!r} is not one this benchmark runs")
        if name not in names:
            raise ValueError(f"{at}: hardware {str(name)[:40]!r} is not among its hardware")
        if not isinstance(run.get("fused"), bool):
            raise ValueError(f"{at}: fused must be true or false")
        if (name, case, run["fused"]) in pairs:
            raise ValueError(f"{at}: {name} {case} fused={run['fused']} is there twice")
        pairs.add((name, case, run["fused"]))
        if "error" not in run:
            for key in ("cycles", "energy_pj", "wall_s"):
                _positive(run, key, at)
            try:
                stream_terms(run)
            except (KeyError, TypeError, AttributeError, ZeroDivisionError, ValueError, OverflowError) as exc:
                raise ValueError(f"{at}: Stream's slots are not readable ({type(exc).__name__}: "
                                 f"{_shown(str(exc))})") from None
        if (cases is None or case in cases) and (hardware is None or name in hardware):
            runs.append(run)
    if not runs:
        raise ValueError(f"{where}: no run of the --cases and --hardware given")
    return {**data, "runs": runs}


def stream_terms(run: dict) -> dict:
    """Stream's latency of one run by its terms, summed over its fusion groups (``slots`` of ``_stream_driver``):
    each group's ``total = iterations x per_iteration - (iterations - 1) x overlap + fill``, a slot lasting as long
    as the slowest node or transfer in it. Returns the groups, iterations (the largest of any group), cycles of the
    slots that hold a node (``node_slot_cycles``) and of those that hold only transfers, overlap and fill.
    ValueError when a latency term or a slot's cycles is not a finite number >= 0, or a sum overflows."""
    out = {"groups": 0, "iterations": 0, "node_slot_cycles": 0.0, "transfer_slot_cycles": 0.0, "overlap": 0.0,
           "fill": 0.0}
    for g in run.get("slots") or []:
        lat = {k: _cycles(g["latency"][k], f"latency {k}") for k in ("total", "per_iteration", "overlap", "fill")}
        step = lat["per_iteration"] - lat["overlap"]
        q = (lat["total"] - lat["fill"] - lat["per_iteration"]) / step if step > 0 else 0.0
        if not math.isfinite(q):
            raise ValueError("the iterations of a group overflow (latency total / (per_iteration - overlap))")
        its = round(q) + 1 if step > 0 else 1
        out["groups"] += 1
        out["iterations"] = max(out["iterations"], its)
        for sl in g["slots"]:
            out["node_slot_cycles" if sl["nodes"] else "transfer_slot_cycles"] += _cycles(sl["cycles"], "slot cycles")
        out["overlap"] += lat["overlap"]
        out["fill"] += lat["fill"]
    if not all(math.isfinite(v) for v in out.values()):
        raise ValueError("the slots' cycles overflow when summed")
    return out


def _cycles(v: object, what: str) -> float:
    """A cycle count of Stream's slots: a finite number >= 0 (bool refused); ValueError otherwise."""
    if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v < 1e300:
        raise ValueError(f"{what} must be a finite number >= 0, got {_shown(str(v), 40)!r}")
    return v


def check_stream_python(path: str) -> None:
    """``--stream-python``: ValueError (one line) when it is empty, or names a folder or a file this user cannot
    run. A path that does not exist is left to the caller (Stream absent: the benchmark skips)."""
    if not path.strip():
        raise ValueError("--stream-python is empty; pass the python of a virtualenv with stream-dse, or leave it out "
                         "(default .peers/stream)")
    p = Path(path)
    if p.is_dir():
        raise ValueError(f"--stream-python '{_shown(path)}' is a folder; pass its bin/python")
    if p.exists() and not os.access(p, os.X_OK):
        raise ValueError(f"--stream-python '{_shown(path)}' is not an executable file; pass the python of a "
                         "virtualenv with stream-dse")


def main() -> int:
    ap = Parser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="out/bench_stream")
    ap.add_argument("--install", action="store_true", help="create .peers/stream with stream-dse==2.1.1 if absent")
    ap.add_argument("--stream-python", help="python of a virtualenv with stream-dse (default .peers/stream)")
    ap.add_argument("--cases", help="comma-separated: Stream's test workloads, 2conv_H_C, default (the six test "
                    "workloads) or held-out (four two-conv sizes); with --stream-json, only these of its runs")
    ap.add_argument("--hardware", help="Stream hardware YAMLs to run side by side (default: all seven chips); with "
                    "--stream-json, only these of its runs")
    ap.add_argument("--layer-cores", choices=("all", "search"), default="all",
                    help="npukit's layer_cores: a layer alone on every MAC core (default) or also on the first 1, 2, 4, ...")
    ap.add_argument("--stream-json", help="reuse Stream's results (stream_runs.json of an earlier --out) instead of "
                    "running Stream again")
    args = ap.parse_args()
    from benchmarks._peers import newer_python, peer_python
    from npukit.sim import NpukitError, format_table, prepare_out_dir, write_csv
    from npukit.sim.multicore_sim import simulate_multicore
    from npukit.sim.stream_io import load_stream_hardware

    try:
        if args.cases is not None and not args.cases.strip():
            raise ValueError("--cases is empty; name cases, default or held-out")
        if args.hardware is not None and not args.hardware.strip():
            raise ValueError("--hardware is empty; name Stream hardware YAMLs, e.g. tpu_like_quad_core")
        if args.stream_python is not None:
            check_stream_python(args.stream_python)
        cases = parse_cases(args.cases or "default")
        hardware = tuple(dict.fromkeys(h.strip() for h in (args.hardware or ",".join(SIDE_BY_SIDE)).split(",")))
        if bad := [h for h in hardware if not re.fullmatch(r"[A-Za-z0-9_]+", h)]:
            raise ValueError(f"--hardware: {bad[0]!r} is not the name of a Stream hardware YAML (e.g. {SIDE_BY_SIDE[0]})")
        data = None
        if args.stream_json is not None:
            data = load_runs(args.stream_json, cases if args.cases else None, hardware if args.hardware else None)
        out_folder(args.out, ("bench_vs_stream.csv", "npukit_layers.csv", "stream_runs.json"))
        if data is None:
            py = peer_python(args.stream_python, "NPUKIT_STREAM_PYTHON", VENV, ("stream-dse==2.1.1", "six"),
                             "import stream.api", args.install, base=newer_python(3, 12))
            if py is None:
                print("Stream (stream-dse 2.1.1) not found: skipping (create .peers/stream with --install; it needs "
                      "Python >= 3.12)")
                return 0
        out = prepare_out_dir(args.out)
    except (ValueError, NpukitError) as exc:
        print(f"bench_vs_stream: error: {exc}", file=sys.stderr)
        return 2
    if data is None:
        proc = subprocess.run([py, str(HERE / "_stream_driver.py"), str(Path(out) / "stream"), "--cases", ",".join(cases),
                               "--hardware", ",".join(hardware)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            print(proc.stderr[-2000:], file=sys.stderr)
            return 1
        data = json.loads(proc.stdout)

        def dump(p: Path) -> Path:  # Stream's per-node numbers, for comparing by layer
            p.write_text(proc.stdout, encoding="utf-8")
            return p
        try:
            publish(Path(out), "stream_runs.json", dump)
        except NpukitError as exc:
            print(f"bench_vs_stream: error: {exc}", file=sys.stderr)
            return 2
    print(f"Stream: {len(data['runs'])} solves, {sum(r.get('wall_s', 0) for r in data['runs']):.1f} s")
    hw_rows = []
    for hw in data["hardware"]:  # the MAC cores as npukit's Stream reader classifies them
        read = load_stream_hardware(chip_yaml(hw), warn=False)
        nests = [read.cores[i].nest for i in read.mac_cores]
        links = [e for e in hw["links"] if e["type"] == "link"]
        buses = [e for e in hw["links"] if e["type"] == "bus"]
        big = max((m.size_bits for n in nests for m in n.memories), default=0)
        hw_rows.append([hw["name"], len(hw["cores"]), len(nests), "x".join(map(str, nests[0].array.dims.values())),
                        big / 8 / 1024, min((e["bandwidth_bits"] for e in links), default=0),
                        max((e["bandwidth_bits"] for e in buses), default=0),
                        max((e["unit_energy_cost"] or 0 for e in hw["links"]), default=0)])
    print(format_table(["hardware", "cores", "mac cores", "array", "largest core memory KiB", "link bits/cycle",
                        "bus bits/cycle", "link pJ/bit"], hw_rows))
    hws = {h["name"]: h for h in data["hardware"]}
    rows, layer_rows, alive = [], [], []
    for run in data["runs"]:
        name = run.get("hardware", "tpu_like_quad_core")
        if "error" in run:
            rows.append({"hardware": name, "case": run["case"], "fused": run["fused"], "error": run["error"]})
            continue
        hw = hws[name]
        wl, bits = npukit_workload(run["case"])
        # a new loop-nest Hardware per pair: the mapper's cache (by identity) is cold
        march = npukit_arch(hw, bits, args.layer_cores)
        alive.append(march)  # kept, so that no later Hardware reuses its identity
        walls = []
        for _ in range(3):  # the first call is cold; the later ones reuse the mapper's in-process cache
            t1 = time.perf_counter()
            res = simulate_multicore(wl, march, "chain/split" if run["fused"] else "none/split")
            walls.append(time.perf_counter() - t1)
        wall, warm = walls[0], min(walls[1:])
        layer_rows += [{"hardware": name, "case": run["case"], "fused": run["fused"],
                        **{k: v for k, v in lr.items() if k in LAYER_COLUMNS}} for lr in res.rows()]
        node_cycles, node_pj, trip = per_node(res, wl, bits, march, march.table) if not run["fused"] else \
            (res.total_cycles, res.energy_pj, 0.0)
        rows.append({"hardware": name, "case": run["case"], "fused": run["fused"], "stream_cycles": run["cycles"],
                     "npukit_cycles": res.total_cycles, "cycles_ratio": res.total_cycles / run["cycles"],
                     "stream_energy_pj": run["energy_pj"], "npukit_energy_pj": res.energy_pj,
                     "energy_ratio": res.energy_pj / run["energy_pj"] if run["energy_pj"] else float("nan"),
                     "node_trip_bytes": trip, "per_node_cycles_ratio": node_cycles / run["cycles"],
                     "per_node_energy_ratio": node_pj / run["energy_pj"] if run["energy_pj"] else float("nan"),
                     "stream_s": run["wall_s"], "npukit_s": wall, "speedup": run["wall_s"] / wall,
                     "npukit_warm_s": warm, "speedup_warm": run["wall_s"] / warm})
    for name in dict.fromkeys(r["hardware"] for r in rows):
        mine = [r for r in rows if r["hardware"] == name]
        inside = sum(abs(r.get("cycles_ratio", 9) - 1) <= 0.15 for r in mine), \
            sum(abs(r.get("energy_ratio", 9) - 1) <= 0.15 for r in mine)
        print(f"{name}: within 15%: cycles {inside[0]}/{len(mine)}, energy {inside[1]}/{len(mine)}")
        print(format_table(["case", "fused", "Stream cycles", "npukit cycles", "ratio", "Stream uJ", "npukit uJ",
                            "ratio", "+trips cyc ratio", "+trips uJ ratio", "Stream s", "npukit s", "x faster",
                            "x faster warm"],
                           [[r["case"], r["fused"], r.get("stream_cycles", r.get("error", "")),
                             r.get("npukit_cycles", ""), r.get("cycles_ratio", ""), r.get("stream_energy_pj", 0) / 1e6,
                             r.get("npukit_energy_pj", 0) / 1e6, r.get("energy_ratio", ""),
                             r.get("per_node_cycles_ratio", ""), r.get("per_node_energy_ratio", ""),
                             r.get("stream_s", ""), r.get("npukit_s", ""), r.get("speedup", ""),
                             r.get("speedup_warm", "")] for r in mine]))
    terms = [(r, stream_terms(r)) for r in data["runs"] if r.get("slots")]
    if terms:
        print("Stream's latency by its terms (per group: iterations x slots - (iterations - 1) x overlap + fill; "
              "slots summed over groups, for one iteration)")
        print(format_table(["hardware", "case", "fused", "groups", "iterations", "node slot cycles",
                            "transfer-only slot cycles", "overlap", "fill"],
                           [[r.get("hardware", ""), r["case"], r["fused"], t["groups"], t["iterations"],
                             t["node_slot_cycles"], t["transfer_slot_cycles"], t["overlap"], t["fill"]]
                            for r, t in terms]))
    try:  # never over another run's files (one started into the same --out while this one worked)
        print(f"wrote {publish(Path(out), 'bench_vs_stream.csv', lambda p: write_csv(p, rows))}")
        print(f"wrote {publish(Path(out), 'npukit_layers.csv', lambda p: write_csv(p, layer_rows))}")
    except NpukitError as exc:
        print(f"bench_vs_stream: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
