"""The ``npukit`` command: ``npukit VERB ...``.

Each verb lives in its own private module ``npukit._cli_<verb>`` exposing ``add_parser(subparsers)``
(which sets ``func``) and keeps heavy imports (torch, triton, matplotlib) inside its run function,
so ``npukit sim`` starts fast. Any :class:`~npukit.sim.errors.NpukitError` becomes one line on
stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys

VERBS = ("demo", "sim", "sweep", "report", "rtl", "bench", "experiment")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser(verb: str | None = None) -> argparse.ArgumentParser:
    """The ``npukit`` parser; with ``verb``, only that verb's module is imported (a fast start)."""
    parser = _Parser(prog="npukit", description="npukit: PyTorch model -> NPU cycles, joules and verified RTL")
    from npukit import __version__

    parser.add_argument("--version", action="version", version=f"npukit {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB", parser_class=_Parser)
    sub.required = True
    for name in VERBS if verb not in VERBS else (verb,):
        try:
            mod = importlib.import_module(f"npukit._cli_{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"npukit._cli_{name}":
                raise
            continue
        mod.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv[0] if argv else None)
    from npukit.sim.terminal import quiet_broken_pipe, tolerant_streams

    tolerant_streams()  # an ASCII terminal gets \u escapes for non-ASCII names, not a UnicodeEncodeError
    try:
        return _run(parser, argv)
    except BrokenPipeError:  # the reader went away (npukit sim ... | head -1): end quietly
        return quiet_broken_pipe()


def _run(parser: argparse.ArgumentParser, argv: list[str]) -> int:
    args = parser.parse_args(argv)
    from npukit.sim.errors import NpukitError
    from npukit.sim.terminal import escape_controls

    try:
        rc = args.func(args)
    except NpukitError as exc:
        print(f"npukit {args.verb}: error: {escape_controls(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"npukit {args.verb}: interrupted", file=sys.stderr)
        return 130
    return int(rc or 0)


if __name__ == "__main__":
    raise SystemExit(main())
