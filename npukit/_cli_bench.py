"""``npukit bench NAME``: microbenchmarks (print a table, write CSV). ``omnimoe`` is the first.

Each benchmark is a module of ``benchmarks/`` (``npukit.benchmarks``) with a plain-text docstring (its
``--help``), ``add_arguments(parser)`` and ``run(args) -> int`` that keeps its heavy imports (torch, triton)
inside ``run``; register new ones in :data:`BENCHMARKS`.
"""

from __future__ import annotations

import argparse
import importlib

# name -> (module, one-line help)
BENCHMARKS: dict[str, tuple[str, str]] = {
    "omnimoe": ("npukit.benchmarks.omnimoe",
                "OmniMoE router/scheduler/expert kernels vs PEER and the torch reference, plus the NPU model"),
}


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("bench", help="microbenchmarks: " + ", ".join(BENCHMARKS),
                              description="Run a microbenchmark; prints a table and writes CSV to --out.")
    sub = p.add_subparsers(dest="benchmark", metavar="BENCHMARK", parser_class=type(p))
    sub.required = True
    for name, (module, help_text) in BENCHMARKS.items():
        mod = importlib.import_module(module)
        bp = sub.add_parser(name, help=help_text, description=mod.__doc__ or "",
                            formatter_class=argparse.RawDescriptionHelpFormatter)
        mod.add_arguments(bp)
        bp.set_defaults(func=run, bench_module=module)


def run(args: argparse.Namespace) -> int:
    return int(importlib.import_module(args.bench_module).run(args) or 0)
