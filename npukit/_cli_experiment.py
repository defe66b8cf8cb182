"""``npukit experiment NAME [--quick] [--out DIR]``: one command per paper that reproduces its numbers.

Experiments are registered in :data:`EXPERIMENTS` (name -> module path and help). A module either
exposes ``cli_main(args) -> int`` (the common ``--quick/--out/--no-progress`` flags are added here,
extra flags by an optional ``_args.add_arguments`` sibling), or, listed in :data:`SELF_PARSING`,
``add_arguments(parser)`` for all its flags and ``run(args) -> int``. Adding an experiment is one
more dict entry. Modules keep heavy imports (torch) inside their run functions.

Every experiment also gets the executor flags ``--scheduler tcp://HOST:PORT``, ``--dask-local N`` and
``--connect-timeout S`` (:func:`npukit._cli_sweep.add_executor_arguments`). An experiment listed in
:data:`EXECUTOR_AWARE` builds its executor from them (``npukit.sim.sweep.make_executor``, e.g. via
:func:`npukit._cli_sweep.executor_from_args`) and runs its grid on it; for the others the flags are
accepted, a note says the grid runs on this machine, and nothing else changes.
"""

from __future__ import annotations

import argparse
import importlib

EXPERIMENTS: dict[str, tuple[str, str]] = {
    "psumquant": ("npukit.experiments.psumquant.cli",
                  "PsumQuant: psum bits x scale policy on a digits CNN, MiniLM and a small LM, plus NPU energy"),
    "omnimoe": ("npukit.experiments.omnimoe.run",
                "OmniMoE: Cartesian vs dense router cost, expert- vs token-centric crossover, tiny-LM training"),
    "cacheedit": ("npukit.experiments.cacheedit.run",
                  "CacheEdit: adaptive activation cache for multi-round DiT editing vs baselines, DLE plots, NPU cost"),
}
SELF_PARSING = {"omnimoe", "cacheedit"}
EXECUTOR_AWARE = {"omnimoe", "cacheedit", "psumquant"}  # experiments whose grid runs on the --scheduler / --dask-local executor


def add_parser(sub: argparse._SubParsersAction) -> None:
    from npukit._cli_sweep import add_executor_arguments

    p = sub.add_parser("experiment", help="reproduce a paper's evaluation offline: " + ", ".join(EXPERIMENTS))
    exp = p.add_subparsers(dest="experiment", metavar="NAME")
    exp.required = True
    for name, (module, help_text) in EXPERIMENTS.items():
        q = exp.add_parser(name, help=help_text, description=help_text)
        if name in SELF_PARSING:
            importlib.import_module(module).add_arguments(q)
            if "--scheduler" not in q._option_string_actions:
                add_executor_arguments(q)
            q.set_defaults(func=run, experiment_module=module, experiment_entry="run")
            continue
        q.add_argument("--quick", action="store_true", help="small training budgets, fewer settings (minutes)")
        q.add_argument("--out", default=f"out/experiment/{name}", help=f"output folder (default out/experiment/{name})")
        q.add_argument("--no-progress", action="store_true", help="no progress bars")
        _extra_arguments(module, q)
        add_executor_arguments(q)
        q.set_defaults(func=run, experiment_module=module, experiment_entry="cli_main")


def _extra_arguments(module: str, parser: argparse.ArgumentParser) -> None:
    """Let the experiment add flags without importing its heavy dependencies (an ``_args`` sibling)."""
    try:
        mod = importlib.import_module(module.rpartition(".")[0] + "._args")
    except ModuleNotFoundError:
        return
    mod.add_arguments(parser)


def run(args: argparse.Namespace) -> int:
    import sys

    if args.experiment not in EXECUTOR_AWARE and (getattr(args, "scheduler", None) or getattr(args, "dask_local", None)):
        print(f"npukit experiment {args.experiment}: note: this experiment does not distribute its grid yet; "
              "--scheduler/--dask-local are ignored and it runs on this machine", file=sys.stderr)
    mod = importlib.import_module(args.experiment_module)
    return int(getattr(mod, args.experiment_entry)(args) or 0)
