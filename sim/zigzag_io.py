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

from .bounded import MAX_INT, check_number, check_size, duplicate_key, load_yaml, short
from .errors import ConfigError
from .hardware import DIRECTIONS, Hardware, MacArray, MemLevel
from .textfile import read_text

_SILENT = {"area", "latency", "unit_area", "auto_cost_extraction", "min_r_granularity", "min_w_granularity"}
_MEM_KEYS = {"size", "r_cost", "w_cost", "operands", "served_dimensions", "ports", "force_double_buffering"}
_ARRAY_KEYS = {"unit_energy", "dimensions", "sizes", "systolic_dimensions", "input_precision"}
# a core file's top-level keys (ZigZag's, and Stream's core type, widths and operators, read by sim/stream_io.py)
_TOP_KEYS = {"name", "memories", "operational_array", "type", "operand_precision", "operator_types"}


MAX_YAML_BYTES = 16 * 2**20  # a hardware or mapping file is a few kB


def _load_yaml(path: str | Path) -> object:
    """A hardware or mapping YAML, bounded (:mod:`npukit.sim.bounded`: size, nesting, aliases) and parsed by libyaml."""
    check_size(path, "hardware or mapping file", ConfigError, MAX_YAML_BYTES)
    return load_yaml(read_text(path, "hardware or mapping file", ConfigError), str(path), ConfigError, fast=True)


def _warn_duplicate(path: str | Path, notes: list[str]) -> None:
    """A warning line if a key is written twice in one mapping of the file: the last is used, as ZigZag's own
    parser does (its bundled ``tpu_like.yaml`` gives one memory two ``ports``)."""
    if (dup := duplicate_key(Path(path).read_text(encoding="utf-8"))) is not None:
        notes.append(f"warning: {Path(path).name}: key {dup!r} is written twice in one mapping; the last is used (as "
                     "ZigZag's parser does)")


def _num(path: str | Path, where: str, value: object, least: float = 0.0) -> float:
    """``value`` as a finite number (:func:`npukit.sim.bounded.check_number`) >= ``least`` (1 for sizes, counts and
    bandwidths; 0 for energies), else a ConfigError naming the field."""
    v = check_number(value, f"{path}: {where}", ConfigError)
    if v < least:
        raise ConfigError(f"{path}: {where} = {value!r} must be a finite number >= {least:g}")
    return v


def _warn(path: str | Path, what: str, notes: list[str]) -> None:
    notes.append(f"warning: {Path(path).name}: {what} is not modelled by npukit (ignored)")


def _emit(notes: list[str], warnings: list[str] | None) -> None:
    """The warning lines of a file that loaded: onto ``warnings`` when given (a caller with more inputs to check
    prints them once all are good, so that a refusal stays one line), else printed to stderr."""
    if warnings is not None:
        warnings += notes
    else:
        for line in notes:
            print(line, file=sys.stderr)


def _table(path: str | Path, where: str, value: object) -> dict:
    """``value`` if it is a YAML mapping, else a ConfigError naming ``where``."""
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: {where} must be a mapping of keys to values, got {short(value)}")
    return value


def _items(path: str | Path, where: str, value: object) -> list:
    """``value`` if it is a YAML list, else a ConfigError naming ``where``."""
    if not isinstance(value, list):
        raise ConfigError(f"{path}: {where} must be a list, got {short(value)}")
    return value


def _count(path: str | Path, where: str, value: object, most: int = MAX_INT) -> int:
    """``value`` as an integer from 1 to ``most`` (a size, a bit width, an unrolling factor)."""
    v = _num(path, where, value, 1)
    if v != int(v) or v > most:
        raise ConfigError(f"{path}: {where} = {short(value)} must be an integer from 1 to {most:,}")
    return int(v)


def load_zigzag_hardware(path: str | Path, warnings: list[str] | None = None) -> Hardware:
    """A ZigZag hardware YAML -> :class:`Hardware` (raises ConfigError naming the bad field, and then warns of
    nothing); what is not modelled is warned on stderr, or appended to ``warnings`` when given."""
    notes: list[str] = []
    d = _load_yaml(path)
    if not isinstance(d, dict) or "memories" not in d or "operational_array" not in d:
        raise ConfigError(f"{path}: not a ZigZag hardware file (needs 'memories' and 'operational_array')")
    for k in d:  # a misspelt key (operand_precison) changed the widths silently
        if k not in _TOP_KEYS and k not in _SILENT:
            _warn(path, f"field '{k}'", notes)
    oa = _table(path, "operational_array", d["operational_array"])
    if oa.get("is_imc"):
        raise ConfigError(f"{path}: an in-memory-computing array (operational_array.is_imc, imc_type "
                          f"{short(oa.get('imc_type'))}) is not modelled by npukit; use a digital MAC array")
    for k in oa:
        if k not in _ARRAY_KEYS and k not in _SILENT:
            _warn(path, f"operational_array.{k}", notes)
    try:
        names = _items(path, "operational_array.dimensions", oa["dimensions"])
        sizes = _items(path, "operational_array.sizes", oa["sizes"])
        dims = {str(n): _count(path, f"operational_array.sizes[{n}]", s) for n, s in zip(names, sizes, strict=True)}
        if len(dims) != len(names):
            raise ConfigError(f"{path}: operational_array.dimensions names a dimension twice: {short(names)}")
        array = MacArray(dims, _num(path, "operational_array.unit_energy", oa["unit_energy"]),
                         tuple(str(x) for x in _items(path, "operational_array.systolic_dimensions",
                                                      oa.get("systolic_dimensions") or [])))
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"{path}: operational_array needs dimensions, sizes and unit_energy ({exc})") from None
    mems = []
    for name, m in _table(path, "memories", d["memories"]).items():
        m = _table(path, f"memories.{name}", m)
        for k in m:
            if k not in _MEM_KEYS and k not in _SILENT:
                _warn(path, f"memories.{name}.{k}", notes)
        bw: dict[tuple[str, str], tuple[int, int]] = {}
        pname: dict[tuple[str, str], str] = {}
        try:
            for i, port in enumerate(_items(path, f"memories.{name}.ports", m["ports"])):
                port = _table(path, f"memories.{name}.ports[{i}]", port)
                for alloc in _items(path, f"memories.{name}.ports[{i}].allocation", port["allocation"]):
                    if not isinstance(alloc, str):
                        raise ConfigError(f"{path}: memories.{name}: an allocation is 'OPERAND, direction', got "
                                          f"{short(alloc)}")
                    op, direction = (s.strip() for s in alloc.split(","))
                    if direction not in DIRECTIONS:
                        raise ConfigError(f"{path}: memories.{name}: unknown port direction '{direction}'")
                    lo = _num(path, f"memories.{name}.bandwidth_min", port["bandwidth_min"], 1)
                    hi = _num(path, f"memories.{name}.bandwidth_max", port["bandwidth_max"], 1)
                    if lo != int(lo) or hi != int(hi) or lo > hi:  # 4.5 was cut to 4 bits; min above max loaded
                        raise ConfigError(f"{path}: memories.{name}: a port's bandwidth_min and bandwidth_max are whole "
                                          f"bits per cycle, min <= max, got {lo:g} and {hi:g}")
                    bw[(op, direction)] = (int(lo), int(hi))
                    pname[(op, direction)] = str(port.get("name", f"port{i}"))
            mems.append(MemLevel(str(name), _num(path, f"memories.{name}.size", m["size"], 1),
                                 _num(path, f"memories.{name}.r_cost", m["r_cost"]),
                                 _num(path, f"memories.{name}.w_cost", m["w_cost"]),
                                 _names(path, f"memories.{name}.operands", m["operands"]),
                                 tuple(_items(path, f"memories.{name}.served_dimensions",
                                              m.get("served_dimensions") or [])), bw,
                                 bool(m.get("force_double_buffering", False)), pname))
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"{path}: memories.{name}: missing or bad field ({exc})") from None
    prec = _items(path, "operational_array.input_precision", oa.get("input_precision") or [8, 8])
    if len(prec) != 2:
        raise ConfigError(f"{path}: operational_array.input_precision is [input bits, weight bits], got {short(prec)}")
    bits = {"I": _count(path, "operational_array.input_precision[0]", prec[0], 64),
            "W": _count(path, "operational_array.input_precision[1]", prec[1], 64), "O": 16, "O_final": 8}
    hw = Hardware(str(d.get("name", Path(path).stem)), array, tuple(mems), bits=bits)
    _warn_duplicate(path, notes)
    _emit(notes, warnings)  # once the file is known good: a refused file prints one line
    return hw


def load_zigzag_mapping(path: str | Path, warnings: list[str] | None = None) -> dict[str, dict[str, dict[str, int]]]:
    """A ZigZag mapping YAML -> ``{operator name: {array dim: {loop dim: factor}}}`` (spatial mappings only;
    ``temporal_ordering`` entries are ignored with a warning, npukit searches the temporal mapping); warnings as
    :func:`load_zigzag_hardware`'s."""
    notes: list[str] = []
    d = _load_yaml(path)
    if not isinstance(d, list):
        raise ConfigError(f"{path}: not a ZigZag mapping file (a list of entries with 'name')")
    out: dict[str, dict[str, dict[str, int]]] = {}
    for entry in d:
        try:
            entry = _table(path, "a mapping entry", entry)
            name = str(entry["name"])
            sm = _table(path, f"{name}.spatial_mapping", entry.get("spatial_mapping") or {})
            out[name] = {str(dim): dict(_pair(path, f"{name}.spatial_mapping.{dim}", s)
                                        for s in _items(path, f"{name}.spatial_mapping.{dim}", loops))
                         for dim, loops in sm.items()}
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"{path}: bad mapping entry ({exc})") from None
        if "temporal_ordering" in entry:
            _warn(path, f"{name}.temporal_ordering", notes)
        if entry.get("memory_operand_links", {"O": "O", "W": "I2", "I": "I1"}) != {"O": "O", "W": "I2", "I": "I1"}:
            _warn(path, f"{name}.memory_operand_links other than O:O, W:I2, I:I1", notes)
    _warn_duplicate(path, notes)
    _emit(notes, warnings)
    return out


def _names(path: str | Path, where: str, value: object) -> tuple[str, ...]:
    """A list of operand names (``[I1, O]``) as a tuple of strings."""
    items = _items(path, where, value)
    if not all(isinstance(x, str) and x for x in items):
        raise ConfigError(f"{path}: {where} must list operand names such as I1, I2, O; got {short(items)}")
    return tuple(items)


def _pair(path: str | Path, where: str, s: object) -> tuple[str, int]:
    """One spatial unrolling ``"LOOP, FACTOR"`` (a string; the factor an integer >= 1)."""
    if not isinstance(s, str) or s.count(",") != 1:
        raise ConfigError(f"{path}: {where}: an unrolling is 'LOOP, FACTOR' (e.g. 'K, 32'), got {short(s)}")
    dim, factor = (t.strip() for t in s.split(","))
    if not factor.isdigit() or int(factor) < 1:
        raise ConfigError(f"{path}: {where}: the factor of {dim} must be an integer >= 1, got {short(factor)}")
    return dim, _count(path, f"{where} {dim}", int(factor))
