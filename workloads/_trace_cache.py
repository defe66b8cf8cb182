"""On-disk cache of traced workloads (JSON), so that a real model is traced once per configuration.

An entry is ``<cache dir>/<name>-<key>.json``; the cache dir is ``$NPUKIT_CACHE_DIR`` if set, else
``~/.cache/npukit/traces`` (never inside the repository). The key (see
:func:`npukit.workloads.real_models.workload_from_spec`) hashes everything a trace depends on, so an entry is
never stale, only unused. Each entry carries a sha256 of its content; an entry whose content does not match
it (edited by hand), a corrupt or unreadable entry is ignored (the caller traces again and rewrites it);
a cache folder that cannot be written is skipped silently. Imports nothing heavy (no torch).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from ..sim import check_size, load_json, write_text
from ..sim.disk_cache import cache_dir as cache_dir  # the one cache folder (real_models uses it)
from ..sim.errors import WorkloadError
from ..sim.workload import Layer, VectorOp, Workload

FORMAT = 2  # bump when the entry layout changes (2: a sha256 checksum of the content)
_LAYER_EXTRAS = ("shared",)  # optional Layer fields, written only when not 1


def workload_to_dict(wl: Workload) -> dict[str, Any]:
    """A JSON-ready dict of ``wl`` (its ``meta`` must hold JSON values only)."""
    layers: list[dict[str, Any]] = []
    for ly in wl.layers:
        if isinstance(ly, VectorOp):
            layers.append({"type": "vector", "name": ly.name, "op": ly.op, "elements": ly.elements, "reduce": ly.reduce,
                           "inputs": ly.inputs, "params": ly.params, "batch": ly.batch})
        else:
            row = {"type": "gemm", "name": ly.name, "M": ly.M, "N": ly.N, "K": ly.K, "batch": ly.batch,
                   "kind": ly.kind, "conv": list(ly.conv) if ly.conv is not None else None}
            extra = {f: getattr(ly, f) for f in _LAYER_EXTRAS if getattr(ly, f, 1) != 1}
            layers.append({**row, **extra})
    body = {"format": FORMAT, "name": wl.name, "meta": wl.meta, "layers": layers}
    return {**body, "sha256": _checksum(body)}


def _checksum(body: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of an entry's content (everything but the checksum itself)."""
    content = {k: body[k] for k in ("format", "name", "meta", "layers")}
    return hashlib.sha256(json.dumps(content, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def workload_from_dict(d: Any) -> Workload:
    """The :class:`Workload` :func:`workload_to_dict` wrote; raises :class:`WorkloadError` if ``d`` is not one."""
    try:
        if d["format"] != FORMAT or not isinstance(d["meta"], dict) or not isinstance(d["name"], str):
            raise WorkloadError("not a trace cache entry of this version")
        if d.get("sha256") != _checksum(d):
            raise WorkloadError("trace cache entry does not match its checksum (edited or corrupt)")
        if not d["layers"]:
            raise WorkloadError("trace cache entry has no layers")
        layers: list[Layer | VectorOp] = []
        for x in d["layers"]:
            if x["type"] == "vector":
                layers.append(VectorOp(x["name"], x["op"], x["elements"], x["reduce"], x["inputs"], x["params"], x["batch"]))
            elif x["type"] == "gemm":
                conv = tuple(x["conv"]) if x["conv"] is not None else None
                extra = {f: x[f] for f in _LAYER_EXTRAS if f in x}
                layers.append(Layer(x["name"], x["M"], x["N"], x["K"], x["batch"], x["kind"], conv, **extra))
            else:
                raise WorkloadError(f"unknown layer type {x['type']!r}")
    except (KeyError, TypeError) as e:
        raise WorkloadError(f"malformed trace cache entry ({type(e).__name__}: {e})") from None
    return Workload(d["name"], layers, d["meta"])


def load(path: Path) -> Workload | None:
    """The workload cached at ``path``, or None if there is none, it is corrupt, too large or too deep, or its
    content does not match its checksum (an entry edited by hand is traced again, never used)."""
    try:
        check_size(path, "trace cache entry", WorkloadError)
        return workload_from_dict(load_json(path.read_text(encoding="utf-8"), "trace cache entry", WorkloadError))
    except (OSError, ValueError, WorkloadError):
        return None


def store(path: Path, wl: Workload) -> None:
    """Write ``wl`` to ``path`` atomically (a temporary file, then a rename); errors are ignored."""
    try:
        write_text(path, json.dumps(workload_to_dict(wl), separators=(",", ":")))
    except OSError:
        pass  # a read-only or full cache folder: the trace is simply not cached
