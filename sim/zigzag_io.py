"""Read ZigZag 3.9.1 hardware and mapping YAML files into :class:`~npukit.sim.hardware.Hardware` and a
spatial mapping (``{array dim: {loop dim: factor}}`` per operator type).

Modelled fields: ``operational_array`` (``dimensions``, ``sizes``, ``unit_energy``, ``systolic_dimensions``,
``input_precision``), each memory's ``size``, ``r_cost``, ``w_cost``, ``operands``, ``served_dimensions``,
``ports`` (bandwidths and allocations) and ``force_double_buffering``. Ignored with a one-line warning:
any other field (``area``, ``latency``, ``unit_area`` and ``auto_cost_extraction`` are accepted silently:
they do not change energy or cycles here).
"""

from __future__ import annotations

import sys
from pathlib import Path

from .bounded import check_number, check_size, load_yaml
from .errors import ConfigError
from .hardware import DIRECTIONS, Hardware, MacArray, MemLevel
from .textfile import read_text

_SILENT = {"area", "latency", "unit_area", "auto_cost_extraction", "min_r_granularity", "min_w_granularity"}
_MEM_KEYS = {"size", "r_cost", "w_cost", "operands", "served_dimensions", "ports", "force_double_buffering"}
_ARRAY_KEYS = {"unit_energy", "dimensions", "sizes", "systolic_dimensions", "input_precision"}


MAX_YAML_BYTES = 16 * 2**20  # a hardware or mapping file is a few kB


def _load_yaml(path: str | Path) -> object:
    """A hardware or mapping YAML, bounded (:mod:`npukit.sim.bounded`: size, nesting, aliases) and parsed by libyaml."""
    check_size(path, "hardware or mapping file", ConfigError, MAX_YAML_BYTES)
    return load_yaml(read_text(path, "hardware or mapping file", ConfigError), str(path), ConfigError, fast=True)


def _num(path: str | Path, where: str, value: object, least: float = 0.0) -> float:
    """``value`` as a finite number (:func:`npukit.sim.bounded.check_number`) >= ``least`` (1 for sizes, counts and
    bandwidths; 0 for energies), else a ConfigError naming the field."""
    v = check_number(value, f"{path}: {where}", ConfigError)
    if v < least:
        raise ConfigError(f"{path}: {where} = {value!r} must be a finite number >= {least:g}")
    return v


def _warn(path: str | Path, what: str) -> None:
    print(f"warning: {Path(path).name}: {what} is not modelled by npukit (ignored)", file=sys.stderr)


def load_zigzag_hardware(path: str | Path) -> Hardware:
    """A ZigZag hardware YAML -> :class:`Hardware` (raises ConfigError naming the bad field)."""
    d = _load_yaml(path)
    if not isinstance(d, dict) or "memories" not in d or "operational_array" not in d:
        raise ConfigError(f"{path}: not a ZigZag hardware file (needs 'memories' and 'operational_array')")
    oa = d["operational_array"]
    for k in oa:
        if k not in _ARRAY_KEYS and k not in _SILENT:
            _warn(path, f"operational_array.{k}")
    try:
        dims = {str(n): int(_num(path, f"operational_array.sizes[{n}]", s, 1)) for n, s in
                zip(oa["dimensions"], oa["sizes"], strict=True)}
        array = MacArray(dims, _num(path, "operational_array.unit_energy", oa["unit_energy"]),
                         tuple(oa.get("systolic_dimensions") or ()))
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"{path}: operational_array needs dimensions, sizes and unit_energy ({exc})") from None
    mems = []
    for name, m in d["memories"].items():
        for k in m:
            if k not in _MEM_KEYS and k not in _SILENT:
                _warn(path, f"memories.{name}.{k}")
        bw: dict[tuple[str, str], tuple[int, int]] = {}
        pname: dict[tuple[str, str], str] = {}
        try:
            for i, port in enumerate(m["ports"]):
                for alloc in port["allocation"]:
                    op, direction = (s.strip() for s in alloc.split(","))
                    if direction not in DIRECTIONS:
                        raise ConfigError(f"{path}: memories.{name}: unknown port direction '{direction}'")
                    bw[(op, direction)] = (int(_num(path, f"memories.{name}.bandwidth_min", port["bandwidth_min"], 1)),
                                           int(_num(path, f"memories.{name}.bandwidth_max", port["bandwidth_max"], 1)))
                    pname[(op, direction)] = str(port.get("name", f"port{i}"))
            mems.append(MemLevel(str(name), _num(path, f"memories.{name}.size", m["size"], 1),
                                 _num(path, f"memories.{name}.r_cost", m["r_cost"]),
                                 _num(path, f"memories.{name}.w_cost", m["w_cost"]),
                                 tuple(m["operands"]), tuple(m.get("served_dimensions") or ()), bw,
                                 bool(m.get("force_double_buffering", False)), pname))
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"{path}: memories.{name}: missing or bad field ({exc})") from None
    prec = oa.get("input_precision") or [8, 8]
    bits = {"I": int(prec[0]), "W": int(prec[1]), "O": 16, "O_final": 8}
    return Hardware(str(d.get("name", Path(path).stem)), array, tuple(mems), bits=bits)


def load_zigzag_mapping(path: str | Path) -> dict[str, dict[str, dict[str, int]]]:
    """A ZigZag mapping YAML -> ``{operator name: {array dim: {loop dim: factor}}}`` (spatial mappings only;
    ``temporal_ordering`` entries are ignored with a warning, npukit searches the temporal mapping)."""
    d = _load_yaml(path)
    if not isinstance(d, list):
        raise ConfigError(f"{path}: not a ZigZag mapping file (a list of entries with 'name')")
    out: dict[str, dict[str, dict[str, int]]] = {}
    for entry in d:
        try:
            name = str(entry["name"])
            sm = entry.get("spatial_mapping") or {}
            out[name] = {str(dim): dict(_pair(s) for s in loops) for dim, loops in sm.items()}
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"{path}: bad mapping entry ({exc})") from None
        if "temporal_ordering" in entry:
            _warn(path, f"{name}.temporal_ordering")
        if entry.get("memory_operand_links", {"O": "O", "W": "I2", "I": "I1"}) != {"O": "O", "W": "I2", "I": "I1"}:
            _warn(path, f"{name}.memory_operand_links other than O:O, W:I2, I:I1")
    return out


def _pair(s: str) -> tuple[str, int]:
    dim, factor = (t.strip() for t in str(s).split(","))
    return dim, int(factor)
