"""Reading user text files (arch TOML, SCALE-Sim .cfg, topology CSV, energy tables, sweep specs,
ledgers): one clear error line for a missing file, a folder, or bytes that are not UTF-8.

A UTF-8 byte-order mark is accepted and dropped (editors on Windows write one; TOML parsers reject it).
"""

from __future__ import annotations

from pathlib import Path

from .bounded import check_size
from .errors import NpukitError


def check_file(path: str | Path, what: str, error: type[NpukitError], hint: str = "") -> Path:
    """``path`` as a Path if it is a readable file, else ``error`` naming ``what`` it should be."""
    p = Path(path)
    tail = f"; {hint}" if hint else ""
    if p.is_dir():
        raise error(f"{what} '{p}' is a folder, not a file{tail}")
    if p.exists() and not p.is_file():  # a device or pipe (/dev/zero): reading it may never end
        raise error(f"{what} '{p}' is not a regular file{tail}")
    if not p.is_file():
        raise error(f"{what} '{p}' does not exist{tail}")
    return p


def read_text(path: str | Path, what: str, error: type[NpukitError]) -> str:
    """The text of ``path`` decoded as UTF-8 (BOM dropped); ``error`` when it is not UTF-8, unreadable or larger
    than :data:`npukit.sim.bounded.MAX_TEXT_BYTES`."""
    p = Path(path)
    check_size(p, what, error)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise error(f"cannot read {what} '{p}': {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise error(f"{what} '{p}' is not UTF-8 text (byte {exc.start} is 0x{data[exc.start]:02x}); "
                    "save it as UTF-8") from None
