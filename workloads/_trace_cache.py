"""On-disk cache of traced workloads (JSON), so that a real model is traced once per configuration.

An entry is ``<cache dir>/<name>-<key>.json``; the cache dir is ``$NPUKIT_CACHE_DIR`` if set, else
``~/.cache/npukit/traces`` (never inside the repository). The key (see
:func:`npukit.workloads.real_models.workload_from_spec`) hashes everything a trace depends on, so an entry is
never stale, only unused. A corrupt or unreadable entry is ignored (the caller traces again and rewrites it);
a cache folder that cannot be written is skipped silently. Imports nothing heavy (no torch).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..sim import write_text
from ..sim.errors import WorkloadError
from ..sim.workload import Layer, VectorOp, Workload

FORMAT = 1  # bump when the entry layout changes
_LAYER_EXTRAS = ("shared",)  # optional Layer fields, written only when not 1


def cache_dir() -> Path:
    """The folder holding cached traces: ``$NPUKIT_CACHE_DIR`` or ``~/.cache/npukit/traces``."""
    env = os.environ.get("NPUKIT_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "npukit" / "traces"


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
    """The workload cached at ``path``, or None if there is none or it is corrupt."""
    try:
        return workload_from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, WorkloadError):
        return None


def store(path: Path, wl: Workload) -> None:
    """Write ``wl`` to ``path`` atomically (a temporary file, then a rename); errors are ignored."""
    try:
        write_text(path, json.dumps(workload_to_dict(wl), separators=(",", ":")))
    except OSError:
        pass  # a read-only or full cache folder: the trace is simply not cached
