"""``npukit bench [NAME [options]]``: list every benchmark, or run one by name (prints a table, writes CSV).

The list is discovered, not registered: every ``benchmarks/bench_NAME.py`` script is benchmark ``NAME`` and its
docstring's first line is its description (read with :mod:`ast`; nothing is imported to list them). A script
runs in its own Python process (``python benchmarks/bench_NAME.py [options] --out DIR``), as it does stand-alone;
its ``--help`` is ``npukit bench NAME --help``. A module ``benchmarks/NAME.py`` that defines
``add_arguments(parser)`` and ``run(args) -> int`` (e.g. ``omnimoe``) runs in this process with its options
parsed here (bad input exits 2 before anything is written); a ``bench_NAME.py`` beside it is its stand-alone
wrapper and is not listed twice.

Output: ``--out DIR`` (default ``out/bench/NAME``, or ``out/bench/NAME-2``, ``-3``, ... when that one already
holds files). An explicit ``--out`` that already holds files is refused unless ``--overwrite`` is given (some
benchmarks reuse what is there, e.g. ``search``'s swept grid).
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

_PKG = "npukit.benchmarks"


@dataclass(frozen=True)
class Bench:
    """One benchmark: its name, description (first docstring line), file and whether it runs in-process."""

    name: str
    description: str
    path: Path
    in_process: bool


def _bench_dir() -> Path:
    import importlib.util

    spec = importlib.util.find_spec(_PKG)
    return Path(next(iter(spec.submodule_search_locations)))  # type: ignore[union-attr, arg-type]


def _read(path: Path) -> tuple[str, set[str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    doc = (ast.get_docstring(tree) or "").strip()
    first = doc.splitlines()[0].strip() if doc else "(no description)"
    funcs = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    return first, funcs


def discover(folder: Path | None = None) -> dict[str, Bench]:
    """Every benchmark in ``folder`` (default: the npukit.benchmarks package folder), by name, sorted."""
    folder = folder or _bench_dir()
    found: dict[str, Bench] = {}
    for path in sorted(folder.glob("*.py")):
        stem = path.stem
        if stem.startswith("bench_"):
            name = stem[len("bench_"):]
            if name in found and found[name].in_process:
                continue
            desc, _ = _read(path)
            found[name] = Bench(name, desc, path, False)
        elif not stem.startswith("_"):
            desc, funcs = _read(path)
            if {"add_arguments", "run"} <= funcs:
                found[stem] = Bench(stem, desc, path, True)
    return dict(sorted(found.items()))


class _PassThrough(argparse.ArgumentParser):
    """The sub-parser of a script benchmark: keeps every argument for the script (``args.rest``)."""

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]
        ns = namespace if namespace is not None else argparse.Namespace()
        for key, value in self._defaults.items():
            setattr(ns, key, value)
        ns.rest = list(args or [])
        return ns, []


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    benches = discover()
    p = subparsers.add_parser(
        "bench", help=f"benchmarks ({len(benches)}): list them, or run one: npukit bench NAME [--out DIR] [options]",
        description="Without NAME: list every benchmark with its description. With NAME: run it (prints a table of "
        "repeated measurements with their spread, writes CSV under --out). `npukit bench NAME --help` shows its "
        "options. --out DIR (default out/bench/NAME, a fresh -2, -3, ... when taken); an --out that already holds "
        "files is refused unless --overwrite.")
    p.set_defaults(func=run_list)
    sub = p.add_subparsers(dest="benchmark", metavar="NAME", parser_class=type(p))
    for b in benches.values():
        if b.in_process:
            import importlib

            mod = importlib.import_module(f"{_PKG}.{b.name}")
            bp = sub.add_parser(b.name, help=b.description, description=mod.__doc__ or "",
                                formatter_class=argparse.RawDescriptionHelpFormatter)
            mod.add_arguments(bp)
            if not any("--overwrite" in a.option_strings for a in bp._actions):
                bp.add_argument("--overwrite", action="store_true",
                                help="write into an --out that already holds files")
            bp.set_defaults(func=run, bench=b, out=None)  # None: a fresh out/bench/NAME[-i]
        else:
            sp = sub.add_parser(b.name, help=b.description, add_help=False)
            sp.__class__ = _PassThrough  # every argument goes to the script
            sp.set_defaults(func=run, bench=b)


def run_list(args: argparse.Namespace) -> int:
    """Print every benchmark with its one-line description."""
    benches = discover()
    width = max([4, *(len(n) for n in benches)])
    print(f"{'NAME'.ljust(width)}  description")
    for b in benches.values():
        print(f"{b.name.ljust(width)}  {b.description}")
    print(f"\n{len(benches)} benchmarks. Run one: npukit bench NAME [--out DIR] [options]; "
          "its options: npukit bench NAME --help")
    return 0


def _has_files(folder: Path) -> bool:
    return folder.is_dir() and any(folder.iterdir())


def fresh_out(name: str, base: Path = Path("out/bench")) -> Path:
    """``base/name``, or ``base/name-2``, ``-3``, ... : the first that does not hold files yet."""
    cand, i = base / name, 1
    while _has_files(cand):
        i += 1
        cand = base / f"{name}-{i}"
    return cand


def resolve_out(name: str, given: str | None, overwrite: bool) -> Path:
    """The output folder of a run: ``given`` (refused when it holds files, unless ``overwrite``) or a fresh one."""
    from npukit.sim import check_out_dir
    from npukit.sim.errors import ConfigError

    if given is None:
        return check_out_dir(fresh_out(name))
    out = check_out_dir(given)
    if _has_files(out) and not overwrite:
        raise ConfigError(f"--out '{out}' already holds files (another run?); pass a new --out, or --overwrite "
                          "to write into it")
    return out


def _split_out(rest: list[str]) -> tuple[str | None, bool, list[str]]:
    """Take ``--out DIR`` / ``--out=DIR`` and ``--overwrite`` out of a script's arguments."""
    out, overwrite, keep, i = None, False, [], 0
    while i < len(rest):
        a = rest[i]
        if a == "--out" and i + 1 < len(rest):
            out, i = rest[i + 1], i + 2
            continue
        if a.startswith("--out="):
            out = a.split("=", 1)[1]
        elif a == "--overwrite":
            overwrite = True
        else:
            keep.append(a)
        i += 1
    return out, overwrite, keep


def run(args: argparse.Namespace) -> int:
    """Run benchmark ``args.bench``: in-process (its ``run(args)``) or its script in a child Python process."""
    b: Bench = args.bench
    if b.in_process:
        import importlib

        args.out = str(resolve_out(b.name, args.out, args.overwrite))
        print(f"npukit bench {b.name}: output folder {args.out}", flush=True)
        return int(importlib.import_module(f"{_PKG}.{b.name}").run(args) or 0)
    rest = list(args.rest)
    if "-h" in rest or "--help" in rest:
        return subprocess.run([sys.executable, str(b.path), "--help"]).returncode
    out_arg, overwrite, rest = _split_out(rest)
    out = resolve_out(b.name, out_arg, overwrite)
    print(f"npukit bench {b.name}: python {b.path.name} {' '.join(rest)} --out {out}", flush=True)
    return subprocess.run([sys.executable, str(b.path), *rest, "--out", str(out)]).returncode
