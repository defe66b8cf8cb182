"""npukit's on-disk cache folder and its checksummed JSON entries (lowered ONNX files, loop-nest mappings).

One root for every npukit cache: ``$NPUKIT_CACHE_DIR`` if set, else ``~/.cache/npukit`` (never inside the
repository; ``NPUKIT_CACHE``, an old name of the same root, is still read when ``NPUKIT_CACHE_DIR`` is unset, with
one DeprecationWarning). Each cache has its sub-folder: ``entries`` (these checksummed entries), ``traces``
(traced real models, :mod:`npukit.workloads._trace_cache`), ``psumquant`` (the experiment's trained weights).
An entry is one JSON file
``{"format", "kind", "body", "sha256"}``; its name carries a key that hashes everything the cached result
depends on (inputs, options and the source of the code that computed it, :func:`source_digest`), so an
entry is never stale, only unused. On reading, an entry that is corrupt, too large or too deep, of another
``kind`` or format, or whose content does not match its checksum (edited by hand) is ignored: the caller
computes the result again and rewrites it. A folder that cannot be written is skipped silently. Imports
nothing heavy.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from pathlib import Path
from typing import Any

from .bounded import check_size, load_json
from .errors import ConfigError
from .output import write_text

FORMAT = 1  # bump when the entry layout changes


ENV = "NPUKIT_CACHE_DIR"
_OLD_ENV = "NPUKIT_CACHE"


def cache_root() -> Path:
    """The root folder of npukit's caches (not created here): ``$NPUKIT_CACHE_DIR`` or ``~/.cache/npukit``."""
    env = os.environ.get(ENV)
    if not env and os.environ.get(_OLD_ENV):
        env = os.environ[_OLD_ENV]
        warnings.warn(f"{_OLD_ENV} is deprecated; set {ENV} (the same folder: the root of npukit's caches)",
                      DeprecationWarning, stacklevel=2)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "npukit"


def cache_subdir(name: str) -> Path:
    """The folder of one cache, ``cache_root() / name`` (not created here)."""
    return cache_root() / name


def cache_dir() -> Path:
    """The folder of the checksummed entries of this module: ``entries`` under :func:`cache_root`."""
    return cache_subdir("entries")


def source_digest(*modules: str) -> str:
    """sha256 of the source files of ``modules`` (``__file__`` paths): a cache key part that changes whenever
    the code computing a cached result does (stronger than the package version in an editable install)."""
    h = hashlib.sha256()
    for f in modules:
        h.update(Path(f).read_bytes())
    return h.hexdigest()


def _checksum(kind: str, body: Any) -> str:
    return hashlib.sha256(json.dumps([FORMAT, kind, body], sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def load_entry(path: Path, kind: str) -> Any | None:
    """The body of the ``kind`` entry at ``path``, or None if there is none or it is not a valid one (see the
    module docstring)."""
    try:
        check_size(path, "cache entry", ConfigError)
        d = load_json(path.read_text(encoding="utf-8"), "cache entry", ConfigError)
    except (OSError, ValueError, ConfigError):
        return None
    if not isinstance(d, dict) or d.get("format") != FORMAT or d.get("kind") != kind or "body" not in d:
        return None
    if d.get("sha256") != _checksum(kind, d["body"]):
        return None
    return d["body"]


def store_entry(path: Path, kind: str, body: Any) -> None:
    """Write ``body`` (JSON values only) as a ``kind`` entry at ``path`` atomically; an unwritable folder is
    skipped silently."""
    try:
        write_text(path, json.dumps({"format": FORMAT, "kind": kind, "body": body,
                                     "sha256": _checksum(kind, body)}, separators=(",", ":")))
    except OSError:
        pass  # a read-only or full cache folder: the result is simply not cached
