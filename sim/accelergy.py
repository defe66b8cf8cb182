"""Accelergy interchange: read an energy reference table (``ERT.yaml``) as an :class:`EnergyTable`, and write
a ledger's action counts in Accelergy's action-count format (``action_counts.yaml``).

Formats as Accelergy 0.4 reads and writes them (Accelergy-Project/accelergy: ``ERT_generator.py`` writes
``ERT: {version, tables: [{name, actions: [{name, arguments, energy}]}]}``, energies in pJ per action;
``raw_inputs_2_dicts.py`` reads ``action_counts: {version, local: [{name, action_counts: [{name,
arguments?, counts}]}]}``).

Names: an npukit component is the last dotted part of an ERT or action-count name, with ``[..]`` ranges
dropped (``system.npu.psum_buffer[0..3]`` is ``psum_buffer``); action counts are written under
``system.npu.<component>``. Actions: npukit's ``mac`` is Accelergy's ``mac_random``, ``*_read`` /
``*_write`` are ``read`` / ``write``, ``int_add`` / ``fp_add`` ``add``, ``int_mult`` / ``fp_mult``
``multiply`` (:data:`npukit.sim.energy.ERT_ACTIONS`); an ERT may also use npukit's own action names.
One npukit action is one element access (or one MAC), so an ERT entry is pJ per element at a width:
every action count carries ``arguments: {bits: W}`` (``[a, b, p]`` for a MAC), and Accelergy prices it
with the ERT entry whose ``bits`` argument is the same (Accelergy matches arguments by name, so every
entry of that action needs one, as in ``examples/accelergy_ERT.yaml``). Read by npukit, an ERT entry
without a ``bits`` argument prices every width of its action.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from .bounded import check_number, load_yaml, short
from .energy import ERT_ACTIONS, EnergyTable, bits_argument, load_table
from .errors import EnergyTableError
from .ledger import Ledger
from .textfile import check_file, read_text

FALLBACK_TABLE = "horowitz45"
VERSION = "0.4"
PREFIX = "system.npu"


def component_of(name: str) -> str:
    """npukit component of an Accelergy name: its last dotted part without ``[..]`` ranges."""
    return re.sub(r"\[[^\]]*\]", "", str(name)).split(".")[-1].strip()


def load_ert(path: str | Path) -> EnergyTable:
    """An Accelergy ``ERT.yaml`` as an energy table (its components' actions in pJ per action; every other
    component priced by ``horowitz45``). Raises :class:`EnergyTableError` naming what is wrong."""
    p = check_file(Path(path), "Accelergy ERT file", EnergyTableError)
    origin = str(p)
    data = load_yaml(read_text(p, "Accelergy ERT file", EnergyTableError), f"Accelergy ERT {origin}", EnergyTableError)
    ert = data.get("ERT") if isinstance(data, dict) else None
    tables = ert.get("tables") if isinstance(ert, dict) else None
    if not isinstance(tables, list) or not tables:
        raise EnergyTableError(f"Accelergy ERT {origin} has no 'ERT: tables:' list; pass an ERT.yaml written by Accelergy")
    actions: dict[str, dict[str, list[tuple[Any, float]]]] = {}
    sources: dict[str, str] = {}
    for i, tab in enumerate(tables):
        name = tab.get("name") if isinstance(tab, dict) else None
        acts = tab.get("actions") if isinstance(tab, dict) else None
        if not isinstance(name, str) or not isinstance(acts, list):
            raise EnergyTableError(f"Accelergy ERT {origin}: table #{i + 1} needs a 'name' and an 'actions' list")
        comp = component_of(name)
        if comp in actions:
            raise EnergyTableError(f"Accelergy ERT {origin}: two tables name component '{comp}' ({sources[comp]} and {name})")
        entries: dict[str, list[tuple[Any, float]]] = {}
        for act in acts:
            if not isinstance(act, dict) or not isinstance(act.get("name"), str):
                raise EnergyTableError(f"Accelergy ERT {origin}: an action of '{name}' has no name")
            e = act.get("energy")
            if isinstance(e, int) and not isinstance(e, bool):  # range first: no float overflow below
                check_number(e, f"Accelergy ERT {origin}: energy of '{name}' action '{act['name']}'", EnergyTableError)
            if isinstance(e, bool) or not isinstance(e, int | float) or not math.isfinite(e) or e < 0:
                raise EnergyTableError(f"Accelergy ERT {origin}: energy of '{name}' action '{act['name']}' must be "
                                       f"a number >= 0 (pJ), got {short(e)}")
            check_number(e, f"Accelergy ERT {origin}: energy of '{name}' action '{act['name']}'", EnergyTableError)
            args = act.get("arguments")
            arg = args.get("bits") if isinstance(args, dict) and "bits" in args else None
            entries.setdefault(act["name"], []).append((arg, float(e)))
        actions[comp] = entries
        sources[comp] = f"Accelergy ERT {origin}: {name}"
    base = load_table(FALLBACK_TABLE)
    return EnergyTable(
        name=p.stem,
        sections=base.sections,
        components=base.components,
        technology_nm=None,
        description=f"Accelergy ERT (version {ert.get('version', '?')}); components it does not list: {FALLBACK_TABLE}",
        path=origin,
        actions=actions,
        action_sources=sources,
    )


def _accelergy_name(action: str) -> str:
    return ERT_ACTIONS.get(action, (action,))[0]


def action_counts(ledger: Ledger, prefix: str = PREFIX) -> dict[str, Any]:
    """A ledger's action counts (all scopes summed) as Accelergy's action-count document."""
    per: dict[str, dict[tuple[str, tuple[int, ...]], float]] = {}
    for (_, comp, act, bits), n in ledger.counts.items():
        key = (act, bits)
        per.setdefault(comp, {})
        per[comp][key] = per[comp].get(key, 0.0) + n
    local = []
    for comp, acts in per.items():
        names = {act: _accelergy_name(act) for act, _ in acts}
        taken: dict[str, set[str]] = {}
        for act, name in names.items():
            taken.setdefault(name, set()).add(act)
        rows = []
        for (act, bits), n in acts.items():
            name = names[act] if len(taken[names[act]]) == 1 else act  # two npukit actions on one name: keep ours
            rows.append({"name": name, "arguments": {"bits": bits_argument(bits)},
                         "counts": int(n) if float(n).is_integer() else float(n)})
        local.append({"name": f"{prefix}.{comp}", "action_counts": rows})
    return {"action_counts": {"version": VERSION, "local": local}}


def action_counts_yaml(ledger: Ledger, prefix: str = PREFIX) -> str:
    """:func:`action_counts` as YAML text."""
    import yaml

    return yaml.safe_dump(action_counts(ledger, prefix), sort_keys=False, default_flow_style=False)


def price_action_counts(doc: dict[str, Any], table: EnergyTable) -> dict[str, float]:
    """Energy (pJ) per component of an action-count document priced with an ERT-derived ``table``, the way
    Accelergy's energy calculator does it (counts x the ERT entry of each action). Used to check that
    :func:`action_counts` and :func:`load_ert` agree with the ledger's own pricing."""
    out: dict[str, float] = {}
    for item in doc["action_counts"]["local"]:
        comp = component_of(item["name"])
        entries = table.actions.get(comp)
        if entries is None:
            raise EnergyTableError(f"the ERT has no component '{comp}'")
        total = 0.0
        for row in item["action_counts"]:
            rows = entries.get(row["name"])
            if not rows:
                raise EnergyTableError(f"the ERT has no action '{row['name']}' for '{comp}'")
            args = row.get("arguments")
            want = (args or {}).get("bits")
            # Accelergy: no arguments -> the first entry; else the entry whose arguments match by name
            match = [rows[0][1]] if args is None else [e for a, e in rows if a == want]
            if not match:
                raise EnergyTableError(f"the ERT has no entry of '{comp}.{row['name']}' at bits {want}")
            total += row["counts"] * match[0]
        out[comp] = total
    return out
