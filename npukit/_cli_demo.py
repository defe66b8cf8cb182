"""``npukit demo``: the main job. ResNet-18 (224x224) on the 128x128 weight-stationary NPU with
32-bit and 8-bit psum buffers, ending in a report whose path it prints."""

from __future__ import annotations

import argparse
from pathlib import Path

from npukit.sim import check_out_dir, prepare_out_dir, write_csv


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="the main job: ResNet-18 on a 128x128 NPU at 32- vs 8-bit psums, to a report")
    p.add_argument("--out", default="out/demo", help="output folder (default out/demo)")
    p.add_argument("--arch", default="npu128", help="arch to run (default npu128)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the ledgers and CSVs of an earlier demo run in --out (default: refuse, exit 2)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from npukit.experiments.psumquant import check_cache_dir
    from npukit.sim import load_arch, load_table, render_result, simulate
    from npukit.sim import resnet18 as resnet18_shapes

    # every option before any import of torch, any work (tracing, training) or file: --out, --arch and
    # its energy table (at both psum widths), the digits CNN's weights cache folder
    check_out_dir(args.out)
    base = load_arch(args.arch)
    if base.dataflow != "ws":
        base = base.with_(dataflow="ws")
    table = load_table(base.energy_table)
    archs = {bits: base.with_(**{"bits.psum_buffer": bits}) for bits in (32, 8)}
    from npukit.sim import check_targets
    from npukit.sim.run_name import refuse_existing, single_core_stem

    stems = {bits: single_core_stem("resnet18", base, arch) for bits, arch in archs.items()}  # npukit.sim.run_name
    if Path(args.out).is_dir():  # another run's files are kept unless --overwrite, checked before any work
        refuse_existing(check_targets(args.out, [f"{stems[b]}{x}" for b in archs for x in (".ledger.json", ".csv")]),
                        args.overwrite)
    for arch in archs.values():  # the arch maps ResNet-18's layers (the analytical shapes; milliseconds)
        simulate(resnet18_shapes(), arch, table=table)
    check_cache_dir()

    from npukit.models.resnet18 import resnet18 as torch_resnet18
    from npukit.sim.report import write_report
    from npukit.workloads.trace import trace_workload

    out = prepare_out_dir(args.out)
    import torch

    torch.manual_seed(0)
    model = torch_resnet18().eval()
    print("tracing ResNet-18 (torchvision-free definition, 1x3x224x224) ...")
    workload = trace_workload(model, (torch.randn(1, 3, 224, 224),), name="resnet18")
    ledgers, labels, onchip = [], [], []
    for bits in (32, 8):
        arch = archs[bits]
        res = simulate(workload, arch, table=table)
        onchip.append(res.energy_onchip_pj)
        print(render_result(res, table.name, quiet=True))
        stem = stems[bits]
        print(f"wrote {res.ledger.save(Path(out) / f'{stem}.ledger.json')}")
        print(f"wrote {write_csv(Path(out) / f'{stem}.csv', res.rows())}")
        ledgers.append(res.ledger)
        labels.append(f"psum {bits}-bit")
        print()
    paths = write_report(ledgers, Path(out) / "report", labels=labels, table=table,
                         title="npukit demo: ResNet-18 on a 128x128 WS NPU, 32-bit vs 8-bit psum buffer")
    e32, e8 = (led.energy(table) for led in ledgers)
    print(f"psum buffer 32 -> 8 bits: total energy {e32 / 1e6:,.1f} -> {e8 / 1e6:,.1f} uJ "
          f"({100 * (e8 - e32) / e32:+.1f}%), on-chip {onchip[0] / 1e6:,.1f} -> {onchip[1] / 1e6:,.1f} uJ "
          f"({100 * (onchip[1] - onchip[0]) / onchip[0]:+.1f}%)")
    from npukit.experiments.psumquant import digits_demo_summary

    print("PsumQuant on real data: a digits CNN at 32-bit vs 8-bit psumquant psums (trained once, cached) ...")
    print(digits_demo_summary(out))
    from npukit.sim.report_render import MANIFEST

    for path in paths.values():  # report.md, report.html, the figures
        print(f"wrote {path}")
    print(f"wrote {Path(out) / 'report' / MANIFEST}")  # the files the report wrote, for a later --overwrite
    print(f"report: {paths['html']}")
    return 0
