"""On-disk cache of lowered ONNX files, so that a second run on the same file never imports ``onnx``.

An entry is ``<cache dir>/onnx-<key>.json`` in npukit's cache folder (``$NPUKIT_CACHE_DIR``, see
:mod:`npukit.sim.disk_cache`, which also gives the integrity rules: a checksummed entry, a corrupt, edited
or foreign one is ignored and the file lowered again, an unwritable folder is skipped silently). The key
hashes the file's bytes (sha256), the input-shape and dim overrides, the source of npukit's ONNX lowering
and the installed ``onnx`` package (its ``__init__.py``'s path, size and mtime; found without importing it),
so an entry is never stale. The workload is stored as :mod:`npukit.workloads._trace_cache` writes one; its
name and ``meta['path']`` are the caller's, not the entry's.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from ..sim import Workload
from ..sim.disk_cache import cache_dir, source_digest
from . import _onnx_gemm, _onnx_graph, _onnx_lower, _trace_cache

KIND = "onnx-workload"


def _onnx_stamp() -> str:
    """The installed onnx package as path, size and mtime of its ``__init__.py`` ('' if absent)."""
    import importlib.util

    spec = importlib.util.find_spec("onnx")
    if spec is None or not spec.origin:
        return ""
    st = os.stat(spec.origin)
    return f"{spec.origin}:{st.st_size}:{st.st_mtime_ns}"


def entry_path(path: Path, overrides: Any, lowering_file: str) -> Path:
    """The cache entry of ONNX file ``path`` lowered with ``overrides`` by the module ``lowering_file``."""
    return entry_for(entry_key(path, overrides, lowering_file))


def entry_for(key: str) -> Path:
    """The cache entry of the key :func:`entry_key` gives."""
    return cache_dir() / f"onnx-{key[:40]}.json"  # no name in it: a copy of the file is a hit


def entry_key(path: Path, overrides: Any, lowering_file: str) -> str:
    """The key (sha256 hex) of ONNX file ``path`` lowered with ``overrides`` by the module ``lowering_file``."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    files = (lowering_file, _onnx_graph.__file__, _onnx_lower.__file__, _onnx_gemm.__file__, _trace_cache.__file__)
    return hashlib.sha256("\n".join([h.hexdigest(), repr(overrides), source_digest(*files), _onnx_stamp(),
                                     str(_trace_cache.FORMAT)]).encode()).hexdigest()


def load(entry: Path, key: str | None = None) -> Workload | None:
    """The workload cached at ``entry``, or None (absent, corrupt, edited, foreign, stored for another ``key``:
    another file or other overrides)."""
    return _trace_cache.load(entry, KIND, key)


def store(entry: Path, wl: Workload, key: str | None = None) -> Workload:
    """Cache ``wl`` at ``entry`` with the ``key`` it was made for; returns it as a cached read would (JSON values:
    lists for tuples)."""
    return _trace_cache.store(entry, wl, KIND, key)
