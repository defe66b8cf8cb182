"""Command-line pieces the benchmarks share: an argument error is one line (exit 2), lists of integers are read
strictly, and ``--out`` is checked before any work (a folder that holds another run's results is refused)."""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from npukit.sim import ConfigError, short
from npukit.sim.output import check_out_dir, check_targets


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors: ``PROG: error: MESSAGE (see --help)`` and exit status 2."""

    def error(self, message: str) -> None:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def int_list(text: str, flag: str, lo: int, hi: int) -> tuple[int, ...]:
    """The comma-separated integers of ``text``, each from ``lo`` to ``hi``, none twice; ConfigError naming
    ``flag`` otherwise (an empty item, a sign, a decimal point or a digit outside ASCII included)."""
    items = [t.strip() for t in text.split(",")]
    out: list[int] = []
    for t in items:
        if not (t.isascii() and t.isdigit()) or len(t) > 18 or not lo <= int(t) <= hi:
            raise ConfigError(f"{flag}: {short(t)} is not an integer from {lo} to {hi}")
        if int(t) in out:
            raise ConfigError(f"{flag}: {t} is given twice")
        out.append(int(t))
    return tuple(out)


def out_folder(out: str, names: Sequence[str]) -> Path:
    """``out`` checked, creating nothing: a usable folder whose ``names`` are not there yet (each inside it, not a
    link, not too long); ConfigError otherwise. Call before any work; create it with ``prepare_out_dir``."""
    folder = check_out_dir(out)
    for p in check_targets(folder, names):
        if p.exists() or p.is_symlink():
            raise ConfigError(f"--out '{out}' already holds {p.name} from another run; pass a new or empty folder")
    return folder


def publish(out_dir: Path, name: str, write: Callable[[Path], Path]) -> Path:
    """``out_dir / name`` written by ``write`` (given the path to write) without ever replacing a file there: ``write``
    makes it in a hidden folder beside it, and a hard link puts it in place, which fails when the name is taken (two
    runs into one ``--out``: the later one is refused with ConfigError, the earlier one's file kept)."""
    final = out_dir / name
    stage = Path(tempfile.mkdtemp(dir=out_dir, prefix=f".{name}."))
    try:
        made = write(stage / name)
        try:
            try:
                os.link(made, final)
            except FileExistsError:
                raise
            except OSError:  # no hard links on this file system: claim the name, then move the file onto the claim
                os.close(os.open(final, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
                os.replace(made, final)
        except FileExistsError:
            raise ConfigError(f"'{final}' was written by another run while this one worked; it is kept (use a new "
                              "--out)") from None
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return final
