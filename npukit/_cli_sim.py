"""``npukit sim``: one workload on one NPU, per-layer table, ledger JSON and CSV."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from npukit.sim import (
    check_out_dir,
    check_targets,
    path_inside,
    prepare_out_dir,
    render_result,
    write_csv,
    write_text,
)
from npukit.sim.datapath import DATAFLOWS, TIMING_MODES


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sim",
        help="simulate a workload on a systolic-array NPU",
        description="Simulate a workload on a systolic-array NPU: per-layer cycles, utilization and energy, "
        "written as a ledger JSON and a CSV. Prints the arch (array, widths, SRAM sizes, DRAM bandwidth; the keys an "
        "arch file left out and where they came from), the per-layer table with a legend of its mapping codes, and "
        "the totals: utilization = MACs / (rows x cols x cycles), over compute cycles and over all cycles (stalls "
        "included), DRAM bytes (per generated token for decode workloads), energy.",
    )
    p.add_argument("--arch", default="npu128",
                   help="built-in arch (npu128, npu32), npukit .toml (keys it leaves out come from its "
                   "base = \"npu128\" or \"npu32\", else npukit's defaults; printed), SCALE-Sim .cfg, "
                   "a ZigZag hardware file with optional spatial mapping (zigzag:HW.yaml[,MAPPING.yaml]), a Stream multi-core "
                   "hardware file (stream:CHIP.yaml; its core files beside it or in cores/), or a "
                   "multi-core arch: a .toml with [[core]] tables or a built-in preset (quad128, hetero4, tpu_v4)")
    p.add_argument("--schedule", default="search",
                   help="multi-core archs: search (default: the best by the objective) or POLICY/MODE with POLICY "
                   "none|blocks|chain|branches and MODE split|pipeline, e.g. blocks/pipeline")
    p.add_argument("--layer-cores", choices=("all", "search"),
                   help="multi-core archs: a GEMM alone in its step runs on all MAC cores, or (search) also on the "
                   "fastest 1, 2, 4, ... where that ranks better (default: the arch's layer_cores, else all)")
    p.add_argument(
        "--workload",
        default="resnet18",
        help="built-in (resnet18, minilm-l6, llama3-8b-layer[:seq=N,phase=prefill|decode], gemm:M=..,N=..,K=..), "
        "a SCALE-Sim topology .csv, an ONNX model.onnx, a whole real model traced on the meta device: "
        "llama-3.1-8b[:seq=N,batch=B,phase=prefill|decode,kv=L], "
        "flux.1-kontext-dev or qwen-image-edit[:res=R,seq=N,ref=K,batch=B,steps=S], "
        "hf:CONFIG.json[:...] (transformers) or diffusers:CONFIG.json[:...], "
        "or a PyTorch model: torch:resnet18, FILE.py:FACTORY or module:FACTORY "
        "(these two import and run that Python code: use only code you trust; sweep specs refuse them)",
    )
    p.add_argument("--input-shape", help="example input shape for a PyTorch model, e.g. 1,3,224,224; for a model.onnx "
                   "its input's shape or dynamic dims by name (batch_size=1,sequence_length=128)")
    p.add_argument("--dataflow", choices=DATAFLOWS, help="override the arch's dataflow")
    p.add_argument("--psum-buffer-bits", type=int, help="override bits.psum_buffer, the width of the running psums "
                   "between K-folds (bits; at most bits.pe_psum; --psum-bits is its deprecated name)")
    p.add_argument("--pe-psum-bits", type=int,
                   help="override bits.pe_psum, the accumulator width inside the array (bits; at least bits.psum_buffer)")
    p.add_argument("--timing", choices=TIMING_MODES, help="override the timing mode")
    p.add_argument("--memory", choices=("npukit", "scalesim"),
                   help="DRAM/SRAM accounting: npukit's unique-data model or SCALE-Sim v3's own (needs --mapping fixed)")
    p.add_argument("--mapping", choices=("search", "fixed"),
                   help="per-layer tiling and loop order: searched under --objective, or SCALE-Sim's fixed order")
    p.add_argument("--objective", choices=("edp", "energy", "latency"), help="what the mapping search minimises")
    p.add_argument("--table", help="energy table: horowitz45, aladdin40, a .toml path or an Accelergy ERT.yaml "
                   "(default: the arch's)")
    p.add_argument("--format", choices=("npukit", "scalesim", "accelergy"), default="npukit",
                   help="also write SCALE-Sim v3's COMPUTE/BANDWIDTH/DETAILED_ACCESS_REPORT.csv (scalesim) or "
                   "Accelergy action counts, action_counts.yaml (accelergy); the ledger JSON and CSV are always written")
    p.add_argument("--out", default="out/sim", help="output folder (default out/sim); files are named by what ran "
                   "(workload and its options, arch and overrides), e.g. llama-3.1-8b_prefill_seq2048_npu128_ws_psum32")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the files of an earlier run of the same name (default: refuse, exit 2)")
    p.add_argument("--quiet", action="store_true", help="print totals only")
    p.set_defaults(func=run)


def build_arch(args: argparse.Namespace):  # -> (base Arch, Arch)
    from npukit.sim.arch import load_arch

    base = load_arch(args.arch)
    changes = arch_changes(args)
    if args.objective:
        changes["objective"] = args.objective
    return base, (base.with_(**changes) if changes else base)


def _record(ledger_meta: dict, args: argparse.Namespace, workload, base, overrides: dict, stem: str) -> None:
    """``meta["run"]``: what the run ran (npukit.sim.run_name.run_meta)."""
    from npukit import __version__
    from npukit.sim.run_name import run_meta

    ledger_meta["run"] = run_meta(args.workload, args.input_shape, workload.meta.get("options"), args.arch, base,
                                  overrides, __version__, stem)


def run_multicore(args: argparse.Namespace) -> int:
    """``npukit sim --arch multicore.toml``: the per-layer table, per-core busy time, the ledger, CSVs, a timeline."""
    from dataclasses import replace

    from npukit.sim import ConfigError, load_chip, write_figure
    from npukit.sim.multicore_report import core_rows, render_multicore, timeline_figure
    from npukit.sim.multicore_sim import simulate_multicore
    from npukit.sim.schedule import MODES, POLICIES
    from npukit.sim.terminal import escape_controls

    warnings: list[str] = []  # the chip file's, printed once the simulation ran (a refusal is one line)
    march = load_chip(args.arch, warnings=warnings)
    changes = arch_changes(args)
    _refuse_nest_overrides(march, changes)
    if changes:
        march = replace(march, cores=tuple(replace(c, arch=c.arch.with_(**changes)) for c in march.cores))
    if args.objective:
        march = replace(march, objective=args.objective)
    if args.layer_cores:
        march = replace(march, layer_cores=args.layer_cores)
    sched = None if args.schedule == "search" else args.schedule
    if sched is not None:
        policy, _, mode = sched.partition("/")
        if policy not in POLICIES or mode not in MODES:
            raise ConfigError(f"--schedule {sched!r}: use search or POLICY/MODE with POLICY one of "
                              f"{', '.join(POLICIES)} and MODE one of {', '.join(MODES)}")
    if args.format != "npukit":
        raise ConfigError(f"--format {args.format} is for single-core archs; a multi-core arch writes npukit's files only")
    from npukit.workloads import load_workload

    workload = load_workload(args.workload, input_shape=args.input_shape, allow_code=True)
    check_out_dir(args.out)
    from npukit.sim.run_name import override_tokens, refuse_existing, run_stem, workload_label

    given = dict(changes, **({"objective": args.objective} if args.objective else {}),
                 **({"layer_cores": args.layer_cores} if args.layer_cores else {}))
    stem = run_stem([workload_label(args.workload, workload.name, args.input_shape), march.name,
                     *override_tokens(given, skip=()), *([sched.replace("/", "-")] if sched else [])])
    names = [f"{stem}.ledger.json", f"{stem}.csv", f"{stem}_cores.csv", f"{stem}_timeline.png"]
    refuse_existing([path_inside(args.out, n) for n in names], args.overwrite)  # before the simulation
    result = simulate_multicore(workload, march, sched)
    for line in warnings:
        print(escape_controls(line), file=sys.stderr)
    text = render_multicore(result, quiet=args.quiet)
    _check_ledger(result.ledger, multicore=True)
    fig = timeline_figure(result)  # drawn before the output folder is made (a failure leaves nothing behind)
    out = prepare_out_dir(args.out)
    targets = check_targets(out, names)
    refuse_existing(targets, args.overwrite)
    _record(result.ledger.meta, args, workload, None, given, stem)
    print(text)
    paths = [result.ledger.save(path_inside(out, f"{stem}.ledger.json")),
             write_csv(path_inside(out, f"{stem}.csv"), result.rows()),
             write_csv(path_inside(out, f"{stem}_cores.csv"), core_rows(result))]
    paths.append(write_figure(path_inside(out, f"{stem}_timeline.png"), fig, dpi=110))
    for path in paths:
        print(f"wrote {path}")
    return 0


def _check_ledger(ledger, multicore: bool) -> None:  # noqa: ANN001 (a Ledger)
    """:class:`WorkloadError` (one line, before the output folder is made) when the run's ledger holds a count, a
    cycle number or a multi-core field that ``npukit report`` (:meth:`Ledger.load`) would refuse: a workload so
    large that a count passes :data:`npukit.sim.bounded.MAX_INT` (e.g. ``gemm:M=N=K=4194304``, 2^66 MACs).
    Before, sim wrote the ledger and report then called it malformed."""
    from npukit.sim import WorkloadError
    from npukit.sim.errors import LedgerError
    from npukit.sim.multicore_meta import check_multicore_meta

    try:
        ledger.check_amounts()
        if multicore:
            check_multicore_meta(ledger.meta.get("multicore"), ledger.total_cycles(), "the run's ledger")
    except LedgerError as exc:
        raise WorkloadError(f"the run is too large for a ledger that npukit report reads ({exc}); simulate smaller "
                            "layers") from None


_FLAGS = {"dataflow": "--dataflow", "bits.psum_buffer": "--psum-buffer-bits", "bits.pe_psum": "--pe-psum-bits",
          "timing": "--timing", "memory": "--memory", "mapping": "--mapping", "energy_table": "--table"}


def _refuse_nest_overrides(march, changes: dict[str, object]) -> None:  # noqa: ANN001 (a MultiCoreArch)
    """A chip whose MAC cores are loop-nest cores (a Stream chip file) takes their dataflow, widths, mapping and
    energies from its core YAMLs and its DRAM, link and vector costs from its own table: the single-core overrides
    would change nothing (they were accepted and silently ignored), so they are refused with one line."""
    from npukit.sim import ConfigError

    if changes and any(c.nest is not None for c in march.cores):
        flags = ", ".join(dict.fromkeys(_FLAGS.get(k, k) for k in changes))
        raise ConfigError(f"{flags}: {march.name}'s MAC cores are loop-nest cores costed from their core YAMLs and "
                          "the chip's own energy table; edit the chip's files instead (only --objective applies)")


def arch_changes(args: argparse.Namespace) -> dict[str, object]:
    """The single-core overrides given on the command line (applied to every core of a multi-core arch)."""
    changes: dict[str, object] = {}
    if args.dataflow:
        changes["dataflow"] = args.dataflow
    if args.psum_buffer_bits is not None:
        changes["bits.psum_buffer"] = args.psum_buffer_bits
    if args.pe_psum_bits is not None:
        changes["bits.pe_psum"] = args.pe_psum_bits
    if args.timing:
        changes["timing"] = args.timing
    if args.memory:
        changes["memory"] = args.memory
        if args.memory == "scalesim" and not args.mapping:
            changes["mapping"] = "fixed"
    if args.mapping:
        changes["mapping"] = args.mapping
    if args.table:
        changes["energy_table"] = args.table
    return changes


def run_zigzag(args: argparse.Namespace) -> int:
    """``--arch zigzag:HW.yaml[,MAPPING.yaml]``: the loop-nest mapper on a ZigZag hardware description."""
    import json

    from npukit.sim.nest_sim import parse_zigzag_spec, simulate_nest
    from npukit.workloads import load_workload

    hw, spatial = parse_zigzag_spec(args.arch)
    workload = load_workload(args.workload, input_shape=args.input_shape, allow_code=True)
    check_out_dir(args.out)
    objective = args.objective or "energy"
    from npukit import __version__
    from npukit.sim.run_name import refuse_existing, run_meta, run_stem, workload_label

    parts = [p for p in args.arch.partition(":")[2].split(",") if p]
    stem = run_stem([workload_label(args.workload, workload.name, args.input_shape), hw.name,
                     *(["map-" + Path(parts[1]).stem] if len(parts) == 2 else []), objective])
    refuse_existing([path_inside(args.out, f"{stem}{x}") for x in (".csv", ".mapping.json")], args.overwrite)
    result = simulate_nest(workload, hw, spatial, objective)
    text = result.render(quiet=args.quiet)
    out = prepare_out_dir(args.out)
    targets = check_targets(out, [f"{stem}.csv", f"{stem}.mapping.json"])
    refuse_existing(targets, args.overwrite)
    print(text)
    run = run_meta(args.workload, args.input_shape, workload.meta.get("options"), args.arch, None,
                   {"objective": result.objective}, __version__, stem)
    csv_path = write_csv(path_inside(out, f"{stem}.csv"), result.rows())
    map_path = write_text(path_inside(out, f"{stem}.mapping.json"),
                          json.dumps({"run": run, "layers": result.mapping_json()}, indent=1))
    print(f"wrote {csv_path}")
    print(f"wrote {map_path}")
    return 0


def run(args: argparse.Namespace) -> int:
    from npukit.sim import check_arch_spec, is_multicore_spec

    multi = is_multicore_spec(args.arch)
    if not multi and (getattr(args, "layer_cores", None) or getattr(args, "schedule", "search") != "search"):
        from npukit.sim import ConfigError

        flag = "--layer-cores" if getattr(args, "layer_cores", None) else f"--schedule {args.schedule}"
        raise ConfigError(f"{flag} is for multi-core archs; {args.arch} has one core")
    if args.arch.startswith("zigzag:"):
        return run_zigzag(args)
    if multi:
        return run_multicore(args)
    check_arch_spec(args.arch)
    from npukit.sim.energy import load_table
    from npukit.sim.simulator import simulate

    base, arch = build_arch(args)
    table = load_table(arch.energy_table)
    from npukit.workloads import load_workload

    workload = load_workload(args.workload, input_shape=args.input_shape, allow_code=True)
    check_out_dir(args.out)
    from npukit.sim.run_name import arch_overrides, refuse_existing, single_core_stem, workload_label

    stem = single_core_stem(workload_label(args.workload, workload.name, args.input_shape), base, arch)
    names = [f"{stem}.ledger.json", f"{stem}.csv"]
    if args.format == "scalesim":
        from npukit.sim.scalesim_reports import BANDWIDTH_REPORT, COMPUTE_REPORT, DETAILED_ACCESS_REPORT

        names += [COMPUTE_REPORT, BANDWIDTH_REPORT, DETAILED_ACCESS_REPORT]
    elif args.format == "accelergy":
        names.append("action_counts.yaml")
    refuse_existing([path_inside(args.out, n) for n in names], args.overwrite)  # before the simulation
    result = simulate(workload, arch, table=table)
    from npukit.sim.arch import load_arch_source
    from npukit.sim.result_text import decode_tokens

    source = load_arch_source(args.arch)[1]  # the keys a partial arch file inherited, printed in the header
    text = render_result(result, table.name, quiet=args.quiet, source=source,  # totals checked finite before
                         tokens=decode_tokens(workload.meta))  # anything is written
    _check_ledger(result.ledger, multicore=False)
    out = prepare_out_dir(args.out)
    targets = check_targets(out, names)  # every output target (symlinks, folders, length) before the first byte
    refuse_existing(targets, args.overwrite)  # another run's files (same name, or fixed report names) are kept
    _record(result.ledger.meta, args, workload, base, arch_overrides(base, arch), stem)
    print(text)
    ledger_path = result.ledger.save(path_inside(out, f"{stem}.ledger.json"))
    csv_path = write_csv(path_inside(out, f"{stem}.csv"), result.rows())
    print(f"wrote {ledger_path}")
    print(f"wrote {csv_path}")
    if args.format == "scalesim":
        from npukit.sim.scalesim_reports import write_scalesim_reports

        for path in write_scalesim_reports(out, workload, result, table):
            print(f"wrote {path}")
    elif args.format == "accelergy":
        from npukit.sim.accelergy import action_counts_yaml

        print(f"wrote {write_text(path_inside(out, 'action_counts.yaml'), action_counts_yaml(result.ledger))}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit("run as: npukit sim")
