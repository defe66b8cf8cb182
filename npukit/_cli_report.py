"""``npukit report``: ledgers -> report.md, a self-contained report.html and PNG figures; a sweep
database (SQLite or its CSV export) -> the same, with energy/latency vs each swept parameter, Pareto
fronts and a heat map."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "report",
        help="write a Markdown + self-contained HTML report from ledgers or from a sweep database",
        description=(
            "Write report.md, report.html (figures embedded) and the PNG figures. From one or more ledger "
            "JSON files: totals, per-layer utilization, mapping efficiency, roofline and energy; with two or more, "
            "compare each with the first (the baseline). From one sweep database (SQLite from npukit sweep, or "
            "its CSV export): energy and latency vs each swept parameter, Pareto fronts (energy vs latency and vs "
            "area in mm^2) and a heat map of two swept parameters."
        ),
    )
    p.add_argument("ledgers", nargs="+", metavar="FILE",
                   help="ledger .json files written by npukit sim (first = baseline), or one sweep .sqlite/.csv")
    p.add_argument("--labels", help="ledgers: comma-separated names, one per ledger (default: file names)")
    p.add_argument(
        "--table",
        help="ledgers: energy table: horowitz45, aladdin40, a .toml or an Accelergy ERT.yaml "
        "(default: the ledger's own, else horowitz45)",
    )
    p.add_argument("--out", default="out/report", help="output folder (default: out/report); one that already holds a "
                   "report, or any file the report would write, is refused unless --overwrite")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the files in --out that the report writes, and remove the ones an earlier report "
                   "wrote there (listed in its report.manifest.json) that this one does not")
    p.add_argument("--depth", type=int, default=2, help="ledgers: scope path components per layer (default: 2 = per layer)")
    p.add_argument("--group", choices=("layer", "block", "op"), default="layer",
                   help="ledgers: one row and bar per layer (default), per block (model.layers.3, layer2.0: from the "
                        "layer names) or per operator type (q_proj, softmax, conv1)")
    p.add_argument("--top", type=int, default=25,
                   help="ledgers: groups shown in tables and figures, the rest as one 'other' (1-60, default 25; "
                        "per_<group>_<i>.csv lists all)")
    p.add_argument("--block-depth", type=int,
                   help="ledgers with --group block: name parts (split on . and /) per block "
                        "(default: up to the block index, e.g. model.layers.3)")
    p.add_argument("--title", help="report title")
    p.add_argument("--x", help="sweep: swept parameter for the heat map's columns (e.g. rows, bits.psum_buffer)")
    p.add_argument("--y", help="sweep: swept parameter for the heat map's rows")
    p.add_argument("--color", help="sweep: swept parameter that colours the Pareto plots' points")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from npukit.sim.errors import ConfigError
    from npukit.sim.report_render import MANIFEST, no_surrogates
    from npukit.sweeps.report import is_sweep_file

    out = Path(args.out)
    if not args.overwrite and any((out / n).exists() or (out / n).is_symlink()
                                  for n in ("report.md", "report.html", MANIFEST)):
        raise ConfigError(f"--out '{out}' already holds a report (an earlier run wrote it); pass another --out, or "
                          "--overwrite to replace it")
    sweeps = [is_sweep_file(f) for f in args.ledgers]
    if any(sweeps):
        if len(args.ledgers) != 1:
            raise ConfigError("a sweep report takes one sweep database (.sqlite or .csv) and no ledgers; "
                              "run npukit report once per sweep")
        for flag, value in (("--labels", args.labels), ("--table", args.table)):
            if value is not None:
                raise ConfigError(f"{flag} applies to ledger reports, not to a sweep database; drop it")
        for flag, bad in (("--depth", args.depth != 2), ("--group", args.group != "layer"), ("--top", args.top != 25),
                          ("--block-depth", args.block_depth is not None)):
            if bad:
                raise ConfigError(f"{flag} applies to ledger reports, not to a sweep database; drop it")
        from npukit.sweeps.report import write_sweep_report

        title = None if args.title is None else no_surrogates(args.title)  # a non-UTF-8 byte: its \udcNN escape
        written = write_sweep_report(args.ledgers[0], args.out, x=args.x, y=args.y, color=args.color, title=title,
                                     overwrite=args.overwrite)
    else:
        for flag, value in (("--x", args.x), ("--y", args.y), ("--color", args.color)):
            if value is not None:
                raise ConfigError(f"{flag} applies to a sweep report (npukit report SWEEP.sqlite); drop it for ledgers")
        written = _ledger_report(args)
    for path in written.values():
        print(f"wrote {path}")
    print(f"wrote {written['md'].parent / MANIFEST}")  # the files it wrote, for a later --overwrite (write_document)
    return 0


def _ledger_report(args: argparse.Namespace) -> dict:
    from npukit.sim.errors import LedgerError
    from npukit.sim.ledger import Ledger
    from npukit.sim.report import write_report

    ledgers = []
    for path in args.ledgers:
        try:
            ledgers.append(Ledger.load(path))
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not a text file"
            raise LedgerError(f"cannot read ledger file '{path}' ({reason}); pass a ledger JSON written by npukit") from None
        except (TypeError, ValueError) as exc:  # e.g. a "meta" that is not an object
            raise LedgerError(f"{path} is a malformed ledger ({exc}); regenerate it with npukit sim") from None
    labels = [s.strip() for s in args.labels.split(",")] if args.labels is not None else None
    return write_report(
        ledgers, args.out, labels=labels, table=args.table, depth=args.depth, title=args.title, sources=args.ledgers,
        group=args.group, top=args.top, block_depth=args.block_depth, overwrite=args.overwrite,
    )
