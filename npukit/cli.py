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
import warnings

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
    verb = argv[0] if argv else None
    if verb in VERBS:  # deprecated flags (npukit.sim.datapath's alias layer): one stderr line each
        from npukit.sim.datapath import rename_flags

        argv = [verb, *rename_flags(argv[1:], verb, lambda line: print(f"npukit {verb}: {line}", file=sys.stderr))]
    parser = build_parser(verb)
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

    caught: list[warnings.WarningMessage] = []
    try:
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", DeprecationWarning)
                # a name in a script the plot's font lacks is drawn as boxes, not reported glyph by glyph
                warnings.filterwarnings("ignore", message=r"Glyph \d+ .*missing from", category=UserWarning)
                rc = args.func(args)
        finally:  # deprecated names in input files (e.g. TOML [bits] psum): one stderr line each; reported once
            # the recording has stopped, so that a warning shown again is not recorded again (an endless loop)
            _report_warnings(args.verb, caught)
    except NpukitError as exc:
        print(f"npukit {args.verb}: error: {escape_controls(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"npukit {args.verb}: interrupted", file=sys.stderr)
        return 130
    return int(rc or 0)


def _report_warnings(verb: str, caught: list[warnings.WarningMessage]) -> None:
    """The alias layer's deprecation warnings as one ``npukit VERB: warning: ...`` line each; others as usual."""
    seen: set[str] = set()
    for w in caught:
        msg = str(w.message)
        if issubclass(w.category, DeprecationWarning) and "is deprecated, use" in msg:
            if msg not in seen:
                seen.add(msg)
                print(f"npukit {verb}: warning: {msg}", file=sys.stderr)
        else:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)


if __name__ == "__main__":
    raise SystemExit(main())
