"""Helpers shared by the CLI verbs: output folders, atomic file writes, tables."""

from __future__ import annotations

import csv
import io
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from npukit.sim.errors import ConfigError
from npukit.sim.ledger import atomic_write_text


def prepare_out_dir(path: str | Path) -> Path:
    """Create ``path`` if needed and check it is a writable folder; raises ConfigError otherwise."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"output path '{out}' exists and is not a folder; pass --out a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create output folder '{out}' ({exc.strerror}); pass a writable --out") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise ConfigError(f"output folder '{out}' is not writable; pass a writable --out")
    return out


def write_text(path: Path, text: str) -> Path:
    """Atomic text write; returns the path."""
    atomic_write_text(path, text)
    return path


def write_figure(path: Path, fig: Any, **savefig_kw: Any) -> Path:
    """Atomic write of a matplotlib figure (``fig.savefig(tmp, **savefig_kw)``, then rename); returns the path.

    A failed save leaves nothing at ``path`` and no temporary file. The caller closes the figure.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=path.suffix or ".png")
    os.close(fd)
    try:
        fig.savefig(tmp, **savefig_kw)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_csv(path: Path, rows: Sequence[dict[str, Any]]) -> Path:
    """Atomic CSV write of dict rows (columns from the first row)."""
    buf = io.StringIO()
    if rows:
        w = csv.DictWriter(buf, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return write_text(path, buf.getvalue())


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Plain aligned text table (numbers right-aligned)."""
    cells = [[_fmt(v) for v in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.rjust(w) if i else h.ljust(w) for i, (h, w) in enumerate(zip(headers, widths, strict=True)))]
    lines.append("  ".join("-" * w for w in widths))
    for r in cells:
        lines.append("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))))
    return "\n".join(lines)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:,.3f}" if abs(v) < 1000 else f"{v:,.0f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)
