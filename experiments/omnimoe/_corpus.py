"""Offline English corpus for the tiny language model: the reStructuredText sources of the Python
documentation shipped by Debian's ``python3-doc`` (``/usr/share/doc/python3*-doc/html/_sources``)."""

from __future__ import annotations

import glob
from pathlib import Path

from npukit.sim.errors import ConfigError

PATTERNS = ("/usr/share/doc/python3-doc/html/_sources", "/usr/share/doc/python3.*-doc/html/_sources")


def find_corpus_dir() -> Path:
    """The first python3-doc ``_sources`` folder found; raises ConfigError when none is installed."""
    for pat in PATTERNS:
        for d in sorted(glob.glob(pat)):
            if Path(d).is_dir():
                return Path(d)
    raise ConfigError("the python3-doc corpus is missing (no /usr/share/doc/python3*-doc/html/_sources); "
                      "install it: sudo apt-get install python3-doc (or make tools)")


def load_corpus(max_bytes: int = 4_000_000, root: Path | None = None) -> bytes:
    """Up to ``max_bytes`` bytes of text: the ``*.txt`` files under the corpus folder in sorted path
    order, joined by blank lines, non-ASCII bytes kept (a byte-level model reads them)."""
    root = root or find_corpus_dir()
    files = sorted(p for p in Path(root).rglob("*.txt") if p.is_file())
    if not files:
        raise ConfigError(f"corpus folder '{root}' holds no .txt files; reinstall python3-doc")
    parts: list[bytes] = []
    total = 0
    for p in files:
        data = p.read_bytes()
        parts.append(data)
        total += len(data) + 2
        if total >= max_bytes:
            break
    return b"\n\n".join(parts)[:max_bytes]
