"""On-disk cache of traced workloads (JSON), so that a real model is traced once per configuration.

An entry is ``<cache dir>/<name>-<key>.json``; the cache dir is ``traces`` under npukit's cache root
(``$NPUKIT_CACHE_DIR`` if set, else ``~/.cache/npukit``; never inside the repository). The key (see
:func:`npukit.workloads.real_models.workload_from_spec`) hashes everything a trace depends on, so an entry is
never stale, only unused. Entries are :mod:`npukit.sim.disk_cache` entries (a sha256 of the content): an entry
whose content does not match it (edited by hand), a corrupt or unreadable entry is ignored (the caller traces
again and rewrites it); a cache folder that cannot be written is skipped silently. The same layout stores the
lowered ONNX files (:mod:`npukit.workloads._onnx_cache`, another entry kind). Imports nothing heavy (no torch).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..sim import cache_subdir
from ..sim.dataflow import Dataflow
from ..sim.disk_cache import load_entry, store_entry
from ..sim.errors import WorkloadError
from ..sim.workload import Layer, VectorOp, Workload

FORMAT = 3  # bump when the entry layout changes (3: in a disk_cache entry, which carries the checksum)
KIND = "trace-workload"
_LAYER_EXTRAS = ("shared",)  # optional Layer fields, written only when not 1


def cache_dir() -> Path:
    """The folder holding cached traces: ``traces`` under npukit's cache root (``$NPUKIT_CACHE_DIR`` or
    ``~/.cache/npukit``, :func:`npukit.sim.cache_root`)."""
    return cache_subdir("traces")


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
    return {"format": FORMAT, "name": wl.name, "meta": wl.meta, "layers": layers}


def workload_from_dict(d: Any) -> Workload:
    """The :class:`Workload` :func:`workload_to_dict` wrote; raises :class:`WorkloadError` if ``d`` is not one."""
    try:
        if d["format"] != FORMAT or not isinstance(d["meta"], dict) or not isinstance(d["name"], str):
            raise WorkloadError("not a trace cache entry of this version")
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
    wl = Workload(d["name"], layers, d["meta"])
    Dataflow.of(wl)  # a malformed dataflow (or repeated names beside one) is a WorkloadError here, not at simulation
    return wl


def load(path: Path, kind: str = KIND) -> Workload | None:
    """The workload cached at ``path``, or None if there is none, it is corrupt, too large or too deep, of another
    kind, or its content does not match its checksum (an entry edited by hand is traced again, never used)."""
    body = load_entry(path, kind)
    if body is None:
        return None
    try:
        return workload_from_dict(body)
    except WorkloadError:
        return None


def store(path: Path, wl: Workload, kind: str = KIND) -> Workload:
    """Write ``wl`` to ``path`` atomically (errors ignored: an unwritable folder is simply not cached); returns
    ``wl`` as a later :func:`load` gives it (JSON values: lists where ``meta`` had tuples)."""
    body = json.loads(json.dumps(workload_to_dict(wl)))
    store_entry(path, kind, body)
    return workload_from_dict(body)
