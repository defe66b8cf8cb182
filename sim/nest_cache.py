"""On-disk cache of the loop-nest mapper's results (:func:`npukit.sim.nest_sim.simulate_nest`), so that a
second run of the same workload shapes on the same hardware does not search again.

One entry per (hardware, layer shapes and spatial mappings, objective) in npukit's cache folder
(:mod:`npukit.sim.disk_cache`: ``$NPUKIT_CACHE_DIR``, checksummed entries; a corrupt, edited or foreign
entry is ignored and the layers mapped again; an unwritable folder is skipped silently). The key also
hashes the source of the mapper (its batch and scalar allocation too) and the cost model, so an entry
is never stale. An entry holds each distinct layer shape's chosen spatial and temporal mapping and its
cost, as floats that JSON round-trips exactly: a cached result equals a fresh one number for number.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from . import hardware, loopnest, nest_alloc, nest_batch, nest_latency, nest_mapper, nest_transfers
from .disk_cache import cache_dir, load_entry, source_digest, store_entry
from .loopnest import NestCost, NestLayer

KIND = "nest-mappings"
_COST_FIELDS = ("mac_pj", "temporal_cycles", "stall_cycles", "onload_cycles", "offload_cycles", "drain_cycles")


def entry_path(hw: hardware.Hardware, keys: list[tuple], objective: str, extra: str) -> Path:
    """The entry of mapping the layers ``keys`` ((layer shape key, spatial mapping) each) on ``hw``;
    ``extra``: the caller's own source file (its mapping rules)."""
    digest = source_digest(nest_mapper.__file__, nest_batch.__file__, nest_alloc.__file__, loopnest.__file__,
                           nest_latency.__file__, nest_transfers.__file__, hardware.__file__, extra)
    text = "\n".join([repr(hw), repr(sorted(set(keys), key=repr)), objective, str(nest_mapper.LPF_LIMIT), digest])
    return cache_dir() / f"nest-{hashlib.sha256(text.encode()).hexdigest()[:40]}.json"


def to_body(mappings: dict[str, nest_mapper.NestMapping]) -> dict[str, Any]:
    """JSON values of the mappings by ``repr`` of their (layer key, spatial) key."""
    out = {}
    for k, m in mappings.items():
        c = m.cost
        out[k] = {"spatial": m.spatial, "temporal": {op: [[list(x) for x in lv] for lv in lvs] for op, lvs in m.temporal.items()},
                  "accesses": c.accesses, "energy": c.energy, **{f: getattr(c, f) for f in _COST_FIELDS}}
    return out


def from_body(body: Any, key: str, layer: NestLayer) -> nest_mapper.NestMapping | None:
    """The cached mapping of ``layer`` under ``key``, or None if the entry lacks it or is malformed."""
    try:
        d = body[key]
        temporal = {op: [[(str(x[0]), x[1]) for x in lv] for lv in lvs] for op, lvs in d["temporal"].items()}
        cost = NestCost(accesses=d["accesses"], energy=d["energy"], **{f: d[f] for f in _COST_FIELDS})
        return nest_mapper.NestMapping(layer, d["spatial"], temporal, cost)
    except (KeyError, TypeError, IndexError):
        return None


def load(entry: Path) -> Any | None:
    """The body at ``entry`` (a dict), or None."""
    body = load_entry(entry, KIND)
    return body if isinstance(body, dict) else None


def store(entry: Path, mappings: dict[str, nest_mapper.NestMapping]) -> None:
    """Cache ``mappings`` (see :func:`to_body`) at ``entry``."""
    store_entry(entry, KIND, to_body(mappings))
