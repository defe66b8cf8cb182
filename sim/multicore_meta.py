"""The multi-core part of a ledger's meta (``meta['multicore']``, written by
:func:`npukit.sim.multicore_sim.simulate_multicore`), checked before a report reads it.

A ledger file is user input: :func:`check_multicore_meta` refuses, with one :class:`LedgerError` line, any field of
the wrong type, any number that is negative, not finite or beyond :data:`npukit.sim.bounded.MAX_INT`, a timeline bar
on a core that is not there or outside ``[0, total cycles]``, a core busy for more than the total cycles, lists
whose lengths disagree, names longer than :data:`MAX_NAME` characters or with unpaired surrogates, and keys it does
not know. Units: cycles and bytes.
"""

from __future__ import annotations

import math
from typing import Any

from .bounded import MAX_INT, short
from .errors import LedgerError
from .multicore import MAX_CORES  # as many cores as a multi-core arch may have

MAX_NAME = 65536  # characters of a core, layer, schedule or arch name (names from user files; drawn in seconds)
MAX_TIMELINE = 2_000_000  # timeline bars
KEYS = ("schedule", "steps", "core_names", "core_busy_cycles", "interconnect_bytes", "bus_bytes",
        "interconnect_exposed_cycles", "arch", "timeline", "searched")
REQUIRED = ("schedule", "core_names", "core_busy_cycles", "interconnect_bytes", "interconnect_exposed_cycles", "arch",
            "timeline")


def _number(v: Any, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or (isinstance(v, int) and abs(v) > MAX_INT) \
            or not math.isfinite(v) or not 0 <= v <= MAX_INT:
        raise LedgerError(f"{what} must be a finite number from 0 to {MAX_INT:,}, got {short(v)}")
    return float(v)


def _rounded(v: Any, total: float) -> Any:
    """``v`` with a float rounding error below 0 (a pipelined step's bar at -3.6e-12 cycles) read as 0."""
    return 0.0 if isinstance(v, float) and -1e-9 * max(total, 1.0) <= v < 0 else v


def _name(v: Any, what: str) -> str:
    if not isinstance(v, str) or len(v) > MAX_NAME:
        raise LedgerError(f"{what} must be a string of at most {MAX_NAME} characters, got {short(v)}")
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:
        raise LedgerError(f"{what} holds an unpaired surrogate, not text") from None
    return v


def _list(v: Any, what: str, limit: int) -> list[Any]:
    if not isinstance(v, list) or len(v) > limit:
        raise LedgerError(f"{what} must be a list of at most {limit:,} entries, got {short(v)}")
    return v


def check_multicore_meta(meta: Any, total_cycles: float, where: str) -> dict[str, Any] | None:
    """``meta`` (a ledger's ``meta.get('multicore')``) checked and normalised for a report, or None when the ledger
    is single-core (``meta`` is None); ``total_cycles``: the ledger's cycles, which no timeline bar may pass;
    ``where``: the ledger's name in the error. Returns ``schedule``, ``core_names``, ``core_kinds``,
    ``core_busy_cycles``, ``interconnect_bytes``, ``interconnect_exposed_cycles``, ``arch_name``, ``timeline``
    (``(core, start, end, name)`` tuples), ``mac_pes`` (PEs of all MAC cores together) and ``dram_bytes_per_cycle``
    (all DRAM channels together); those two are None where the ledger does not give them."""
    if meta is None:
        return None
    at = f"{where}: meta.multicore"
    if not isinstance(meta, dict):
        raise LedgerError(f"{at} must be a table, got {short(meta)}")
    if unknown := [k for k in meta if k not in KEYS]:
        raise LedgerError(f"{at} has an unknown key {short(unknown[0])} (known: {', '.join(KEYS)})")
    if missing := [k for k in REQUIRED if k not in meta]:
        raise LedgerError(f"{at} lacks '{missing[0]}'; regenerate the ledger with npukit sim")
    names = [_name(n, f"{at}.core_names[{i}]") for i, n in enumerate(_list(meta["core_names"], f"{at}.core_names",
                                                                           MAX_CORES))]
    if not names:
        raise LedgerError(f"{at}.core_names is empty")
    busy = [_number(b, f"{at}.core_busy_cycles[{i}]")
            for i, b in enumerate(_list(meta["core_busy_cycles"], f"{at}.core_busy_cycles", MAX_CORES))]
    arch = meta["arch"]
    if not isinstance(arch, dict):
        raise LedgerError(f"{at}.arch must be a table, got {short(arch)}")
    cores = _list(arch.get("cores"), f"{at}.arch.cores", MAX_CORES)
    if not all(isinstance(c, dict) for c in cores):
        raise LedgerError(f"{at}.arch.cores must be tables")
    kinds = [_name(c.get("kind"), f"{at}.arch.cores[{i}].kind") for i, c in enumerate(cores)]
    if not len(busy) == len(kinds) == len(names):
        raise LedgerError(f"{at}: {len(names)} core names, {len(busy)} busy cycles and {len(kinds)} cores in arch; "
                          "they must agree")
    total = _number(total_cycles, f"{where}: total cycles")
    for i, b in enumerate(busy):  # a core works at most the whole run (rounding allowed, as for the bars below)
        if b > total * (1 + 1e-9) + 1:
            raise LedgerError(f"{at}.core_busy_cycles[{i}] is {b:g} cycles, more than the run's {total:g} cycles")
    timeline = []
    for i, bar in enumerate(_list(meta["timeline"], f"{at}.timeline", MAX_TIMELINE)):
        if not isinstance(bar, list) or len(bar) != 4:
            raise LedgerError(f"{at}.timeline[{i}] must be [core, start, end, name], got {short(bar)}")
        core, start, end, name = bar
        if isinstance(core, bool) or not isinstance(core, int) or not 0 <= core < len(names):
            raise LedgerError(f"{at}.timeline[{i}]: core {short(core)} is not one of the {len(names)} cores")
        s, e = (_number(_rounded(v, total), f"{at}.timeline[{i}] {what}") for v, what in ((start, "start"), (end, "end")))
        if not s <= e <= total * (1 + 1e-9) + 1:
            raise LedgerError(f"{at}.timeline[{i}]: the bar {s:g}..{e:g} is not within the {total:g} cycles")
        timeline.append((core, s, e, _name(name, f"{at}.timeline[{i}] name")))
    for key in ("steps", "searched"):
        if key in meta:
            _list(meta[key], f"{at}.{key}", MAX_TIMELINE)
    if "bus_bytes" in meta:
        _number(meta["bus_bytes"], f"{at}.bus_bytes")
    return {"schedule": _name(meta["schedule"], f"{at}.schedule"), "core_names": names, "core_kinds": kinds,
            "mac_pes": _mac_pes(cores, at), "dram_bytes_per_cycle": _dram(arch.get("dram"), at),
            "core_busy_cycles": busy, "interconnect_bytes": _number(meta["interconnect_bytes"], f"{at}.interconnect_bytes"),
            "interconnect_exposed_cycles": _number(meta["interconnect_exposed_cycles"],
                                                   f"{at}.interconnect_exposed_cycles"),
            "arch_name": _name(arch.get("name", ""), f"{at}.arch.name"), "timeline": timeline}


def _mac_pes(cores: list[dict[str, Any]], at: str) -> float | None:
    """PEs of all MAC cores: each core's ``pes``, else (ledgers before it, a core without a loop-nest array) its
    arch's rows x cols; None if a MAC core gives neither."""
    total = 0.0
    for i, c in enumerate(cores):
        if c.get("kind") != "mac":
            continue
        if "pes" in c:
            total += _number(c["pes"], f"{at}.arch.cores[{i}].pes")
            continue
        a = c.get("arch")
        if "nest" in c or not isinstance(a, dict) or not {"rows", "cols"} <= a.keys():
            return None
        total += _number(a["rows"], f"{at}.arch.cores[{i}].arch.rows") * _number(a["cols"], f"{at}.arch.cores[{i}].arch.cols")
    return total or None


def _dram(d: Any, at: str) -> float | None:
    """Bytes per cycle of all DRAM channels together, None where the arch does not give them."""
    if not isinstance(d, dict) or not {"channels", "bandwidth_bytes_per_cycle"} <= d.keys():
        return None
    return _number(d["channels"], f"{at}.arch.dram.channels") * _number(d["bandwidth_bytes_per_cycle"],
                                                                         f"{at}.arch.dram.bandwidth_bytes_per_cycle") or None
