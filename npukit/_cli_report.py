"""``npukit report``: ledgers -> report.md, a self-contained report.html and PNG figures."""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "report",
        help="write a Markdown + self-contained HTML report (energy and latency figures) from ledgers",
        description=(
            "Write report.md, report.html (figures embedded) and the PNG figures from one or more ledger "
            "JSON files; with two or more, compare each with the first (the baseline) in percent."
        ),
    )
    p.add_argument("ledgers", nargs="+", metavar="LEDGER.json", help="ledger files written by npukit sim (first = baseline)")
    p.add_argument("--labels", help="comma-separated names, one per ledger (default: file names)")
    p.add_argument(
        "--table",
        help="energy table: horowitz45, aladdin40 or a .toml path (default: the ledger's own, else horowitz45)",
    )
    p.add_argument("--out", default="out/report", help="output folder (default: out/report)")
    p.add_argument("--depth", type=int, default=2, help="scope path components per layer (default: 2 = per layer)")
    p.add_argument("--title", help="report title")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
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
    written = write_report(
        ledgers, args.out, labels=labels, table=args.table, depth=args.depth, title=args.title, sources=args.ledgers
    )
    for path in written.values():
        print(f"wrote {path}")
    return 0
