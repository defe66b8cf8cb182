"""Sweep spec files: parse and validate a ``[sweep]`` + ``[grid]`` TOML file into its points.

Every problem is one :class:`ConfigError` line naming the file and the key. :func:`expand_points`
builds and checks every point (arch validation, buffer minimums, workloads, energy tables)
before anything runs, so a bad grid fails before anything is written.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import tomllib
from dataclasses import dataclass, field, fields
from functools import lru_cache
from pathlib import Path
from typing import Any

from .. import __version__
from ..sim.arch import BUILTIN_ARCHS, Arch, Bits, PsumQuantHW, SramKiB, VectorUnit, load_arch
from ..sim.bounded import check_depth, short
from ..sim.datapath import BITS_ALIASES, rename
from ..sim.energy import BUILTIN_TABLES, EnergyTable, load_table
from ..sim.errors import ConfigError, NpukitError
from ..sim.multicore import BUILTIN_MULTICORE, FABRIC_TABLES, MultiCoreArch, chip_keys, is_multicore_toml, load_multicore_arch
from ..sim.simulator import check_buffers  # re-exported: the buffer check simulate() runs
from ..sim.textfile import check_file, read_text
from ..sim.workload import Workload
from ..workloads import load_workload
from ..workloads.loader import resolve_paths, workload_form
from ._expr import apply_derived, parse_derived

_SWEEP_KEYS = ("name", "arch", "workloads")
_TABLES = ("sweep", "grid", "derived")
_SUBTABLES: dict[str, type] = {"bits": Bits, "sram_kib": SramKiB, "psum_quant": PsumQuantHW, "vector": VectorUnit}


def grid_keys(multicore: bool = False) -> list[str]:
    """Every key a ``[grid]`` may vary: top-level Arch fields and ``bits.*`` / ``sram_kib.*`` / ``psum_quant.*``; on a
    multi-core arch (``multicore``) those of its MAC cores, then the chip's (:func:`npukit.sim.multicore.chip_keys`:
    ``chip.mac_cores``, ``chip.objective``, ``chip.layer_cores``, ``interconnect.*``, ``shared_memory.*``, ``dram.*``,
    ``bus.*``)."""
    out: list[str] = []
    for f in fields(Arch):
        if f.name in _SUBTABLES:
            out += [f"{f.name}.{s.name}" for s in fields(_SUBTABLES[f.name])]
        else:
            out.append(f.name)
    return out + (chip_keys() if multicore else [])


def column_name(key: str) -> str:
    """SQLite/CSV column of an arch field or grid key: dots become underscores, ``name`` -> ``arch_name``; a chip's
    ``dram.bandwidth_bytes_per_cycle`` (per channel) -> ``dram_channel_bandwidth_bytes_per_cycle``, apart from its
    cores' own DRAM port ``dram_bandwidth_bytes_per_cycle``."""
    if key == "dram.bandwidth_bytes_per_cycle":
        return "dram_channel_bandwidth_bytes_per_cycle"
    return "arch_name" if key == "name" else key.replace(".", "_")


@dataclass(frozen=True)
class SweepPoint:
    """One (arch, workload) pair of a sweep. ``key`` is the first 32 hex digits of the sha256 of
    ``config`` (canonical JSON of the full arch dict, workload spec and npukit version, the bytes of the files the
    workload is read from, the bytes of an energy table file (``energy_table_sha256``), and for a model a library
    traces (real, ``hf:``/``diffusers:``, ``torch:``) the traced layers, so a new torch or transformers that traces
    otherwise never reuses old rows), in which the energy table file's path is left out: an edited table gives new
    keys, and the same table named from another folder (another working directory) the same ones."""

    key: str
    arch: Arch | MultiCoreArch
    workload: str  # spec string as written in the sweep file
    workload_path: str  # what the worker parses: the spec itself, or a CSV path resolved against the spec folder
    grid: dict[str, Any]
    config: str
    layers: int
    # the traced workload, loaded once per distinct spec in this process; workers get it, never the spec
    loaded: Workload | None = field(default=None, compare=False, repr=False)
    # the energy table file (not a built-in) as read when the key was made; workers get it, never the path
    table: EnergyTable | None = field(default=None, compare=False, repr=False)


@dataclass
class SweepSpec:
    """A parsed sweep file: base arch, workload specs and the grid (key -> list of values)."""

    name: str
    arch: str
    workloads: list[str]
    grid: dict[str, list[Any]] = field(default_factory=dict)
    base_dir: Path = field(default_factory=Path)
    origin: str = "<sweep>"
    derived: dict[str, Any] = field(default_factory=dict)  # key -> compiled expression (npukit.sweeps._expr)
    multicore: bool = False  # ``arch`` is a multi-core chip (a preset or a TOML with [[core]] tables)

    @property
    def n_points(self) -> int:
        n = len(self.workloads)
        for vals in self.grid.values():
            n *= len(vals)
        return n


def load_sweep_spec(path: str | Path, max_points: int | None = None) -> SweepSpec:
    """Read and validate the syntax of a sweep TOML file (relative paths resolve against its folder); more
    than ``max_points`` points (default :data:`MAX_POINTS`) is refused before any per-value work."""
    p = check_file(path, "sweep spec", ConfigError, "pass a .toml file with [sweep] and [grid] tables")
    try:
        data = tomllib.loads(check_depth(read_text(p, "sweep spec", ConfigError), f"sweep spec '{p}'", ConfigError))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"sweep spec '{p}' is not valid TOML: {exc}") from None
    return parse_sweep_spec(data, origin=str(p), base_dir=p.parent, default_name=p.stem, max_points=max_points)


def parse_sweep_spec(
    data: dict[str, Any], origin: str = "<sweep>", base_dir: str | Path = ".", default_name: str = "sweep",
    max_points: int | None = None,
) -> SweepSpec:
    """Validate a parsed sweep table (the TOML layout of :func:`load_sweep_spec`); the point limit
    (``max_points``, default :data:`MAX_POINTS`) is applied before the per-value checks."""
    for key in data:
        if key not in _TABLES:
            raise ConfigError(f"{origin}: unknown table '{key}' (known: [sweep], [grid])")
    sw = data.get("sweep")
    if not isinstance(sw, dict):
        raise ConfigError(f"{origin}: missing [sweep] table with arch = \"...\" and workloads = [...]")
    for key in sw:
        if key not in _SWEEP_KEYS:
            raise ConfigError(f"{origin}: unknown key 'sweep.{key}' (known: {', '.join(_SWEEP_KEYS)})")
    name = sw.get("name", default_name)
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"{origin}: 'sweep.name' must be a non-empty string, got {name!r}")
    arch = sw.get("arch")
    if not isinstance(arch, str) or not arch.strip():
        raise ConfigError(f"{origin}: 'sweep.arch' must be a built-in arch name ({', '.join(BUILTIN_ARCHS)}) or a file path")
    wls = sw.get("workloads")
    if not isinstance(wls, list) or not wls:
        raise ConfigError(f"{origin}: 'sweep.workloads' must be a non-empty list, e.g. [\"resnet18\"]")
    grid_raw = data.get("grid", {})
    if not isinstance(grid_raw, dict):
        raise ConfigError(f"{origin}: 'grid' must be a table [grid] of key = [values]")
    n = len(wls)
    for vals in grid_raw.values():
        for v in vals.values() if isinstance(vals, dict) else (vals,):
            n *= len(v) if isinstance(v, list) else 1
    check_point_limit(origin, n, MAX_POINTS if max_points is None else max_points)
    for i, w in enumerate(wls):
        if not isinstance(w, str) or not w.strip():
            raise ConfigError(f"{origin}: 'sweep.workloads[{i}]' must be a non-empty string, got {w!r}")
    wls = [w.strip() for w in wls]
    first = _first_duplicate(wls)
    if first is not None:
        raise ConfigError(f"{origin}: 'sweep.workloads' lists '{first}' twice; list each workload once")
    if arch.strip().startswith(("stream:", "zigzag:")):
        raise ConfigError(f"{origin}: 'sweep.arch' = {arch.strip()!r}: a sweep takes npukit archs (a built-in, an arch "
                          ".toml or SCALE-Sim .cfg, a multi-core preset or .toml), not Stream or ZigZag files")
    try:
        multicore = _is_multicore(arch.strip(), Path(base_dir))
    except ConfigError as exc:
        raise ConfigError(f"{origin}: 'sweep.arch': {exc}") from None
    grid = _flatten_grid(grid_raw, origin, multicore)
    derived = parse_derived(data.get("derived", {}), grid_keys(multicore), grid, origin)
    return SweepSpec(name.strip(), arch.strip(), wls, grid, Path(base_dir), origin, derived, multicore)


def _is_multicore(arch: str, base_dir: Path) -> bool:
    """Whether the sweep's ``arch`` names a multi-core chip: a preset, or a TOML file with ``[[core]]`` tables."""
    if arch in BUILTIN_MULTICORE:
        return True
    p = Path(arch) if Path(arch).is_absolute() else base_dir / arch
    return is_multicore_toml(p)


def check_point_limit(origin: str, n_points: int, max_points: int) -> None:
    """ConfigError when a sweep of ``n_points`` points is over ``max_points``."""
    if n_points > max_points:
        raise ConfigError(f"{origin}: the grid has {n_points:,} points, more than the limit of {max_points:,}; "
                          "shrink the [grid] lists or raise the limit with --max-points")


def _value_key(v: Any) -> Any:
    """Hashable identity of a grid value: numbers compare by value (8 == 8.0), bools and strings by type."""
    if isinstance(v, bool):
        return ("bool", v)
    if isinstance(v, int | float):
        return ("num", v)
    return (type(v).__name__, v)


def _first_duplicate(values: list[Any]) -> Any:
    """The first value of ``values`` seen before (a linear scan, not pairwise), or None."""
    seen: set[Any] = set()
    for v in values:
        k = _value_key(v)
        if k in seen:
            return v
        seen.add(k)
    return None


def _flatten_grid(raw: dict[str, Any], origin: str, multicore: bool = False) -> dict[str, list[Any]]:
    known = grid_keys(multicore)
    tables = set(_SUBTABLES) | ({"chip", *FABRIC_TABLES} if multicore else set())
    flat: dict[str, Any] = {}
    for key, val in raw.items():
        if isinstance(val, dict):  # unquoted dotted keys: bits.psum_buffer = [...] parses as [grid.bits] psum_buffer = [...]
            if key not in tables:
                raise ConfigError(f"{origin}: unknown grid key '{key}' (known: {', '.join(known)})")
            for sub, v in val.items():
                flat[f"{key}.{sub}"] = v
        else:
            flat[key] = val
    # the deprecated width names (bits.psum, bits.accumulator), one warning each
    flat = rename(flat, {f"bits.{old}": f"bits.{new}" for old, new in BITS_ALIASES.items()}, f"{origin}: [grid]", 5)
    for key, vals in flat.items():
        if key not in known:
            hint = f"; vary one field such as '{key}.psum'" if key in _SUBTABLES else ""
            raise ConfigError(f"{origin}: unknown grid key '{key}'{hint} (known: {', '.join(known)})")
        if not isinstance(vals, list):
            raise ConfigError(f"{origin}: grid key '{key}' must be a list of values, e.g. {key!r} = [{vals!r}]")
        if not vals:
            raise ConfigError(f"{origin}: grid key '{key}' has an empty list; give at least one value")
        for i, v in enumerate(vals):
            if isinstance(v, dict | list):
                raise ConfigError(f"{origin}: grid key '{key}' value #{i + 1} must be a number or string, got {short(v)}")
        dup = _first_duplicate(vals)
        if dup is not None:
            raise ConfigError(f"{origin}: grid key '{key}' lists {short(dup)} twice; list each value once")
    return flat


def _canon(obj: Any) -> Any:
    """Integral floats become ints so ``256`` and ``256.0`` KiB hash alike."""
    if isinstance(obj, dict):
        return {k: _canon(v) for k, v in obj.items()}
    if isinstance(obj, float) and obj.is_integer():
        return int(obj)
    return obj


def _flat_arch(arch: Arch | MultiCoreArch) -> dict[str, Any]:
    """Dotted grid key -> the arch's value (what a derived expression sees for keys not in the grid); on a multi-core
    chip its first MAC core's fields and the chip's (:func:`chip_values`)."""
    if isinstance(arch, MultiCoreArch):
        return _flat_arch(arch.cores[arch.mac_cores[0]].arch) | chip_values(arch.to_dict())
    d = arch.to_dict()
    return {k: d[k.partition(".")[0]][k.partition(".")[2]] if "." in k else d[k] for k in grid_keys()}


def chip_values(d: dict[str, Any]) -> dict[str, Any]:
    """Chip key (:func:`npukit.sim.multicore.chip_keys`) -> its value in a multi-core arch's ``to_dict()``; the
    ``bus.*`` fields of a chip without a bus are 0 (and ``""`` or false)."""
    out: dict[str, Any] = {"chip.mac_cores": sum(c["kind"] == "mac" for c in d["cores"]),
                           "chip.objective": d["objective"], "chip.layer_cores": d["layer_cores"]}
    for key in chip_keys()[len(out):]:
        table, _, name = key.partition(".")
        sub = d.get(table)
        if sub is None:  # no bus
            default = FABRIC_TABLES[table].__dataclass_fields__[name].default
            out[key] = "" if isinstance(default, str) else False if isinstance(default, bool) else 0
        else:
            out[key] = sub[name]
    return out


def _resolve(spec: SweepSpec, value: str) -> str:
    p = Path(value)
    return value if p.is_absolute() else str(spec.base_dir / p)


MAX_POINTS = 1_000_000  # default limit on a sweep's points (each point is one whole simulation)

def _check_core_objective(arch: Arch | MultiCoreArch, overrides: dict[str, Any]) -> None:
    """ConfigError when a point of a multi-core chip sets its MAC cores' ``objective`` but the chip's objective is not
    latency: the shares are then mapped under the chip's (:meth:`npukit.sim.multicore_sim._Run.arch_for`), so the key
    would change nothing but the point's key."""
    if isinstance(arch, MultiCoreArch) and "objective" in overrides and arch.objective != "latency":
        raise ConfigError(f"grid key 'objective' sets the MAC cores' own objective, which a chip uses only when its "
                          f"objective is latency, and this chip's is {arch.objective!r}; vary \"chip.objective\" "
                          "instead (or add \"chip.objective\" = [\"latency\"])")


def _without_path(obj: Any, path: str, suffix: str) -> Any:
    """``obj`` (a canonical arch dict) with every ``energy_table`` equal to ``path`` replaced by ``file`` + ``suffix``."""
    if isinstance(obj, dict):
        return {k: f"file{suffix}" if k == "energy_table" and v == path else _without_path(v, path, suffix)
                for k, v in obj.items()}
    if isinstance(obj, list):
        return [_without_path(v, path, suffix) for v in obj]
    return obj


def _read_table(path: str) -> tuple[str | None, EnergyTable | None]:
    """(sha256 of its bytes, the table) of an energy table file; (None, None) for a built-in table, checked."""
    if path in BUILTIN_TABLES:
        load_table(path)
        return None, None
    try:
        digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()  # first: the table read next is no older
    except OSError:
        digest = None  # load_table names the problem
    table = load_table(path)
    if digest is None:
        raise ConfigError(f"cannot read energy table file '{path}'")
    return digest, table


def expand_points(spec: SweepSpec, max_points: int = MAX_POINTS) -> list[SweepPoint]:
    """All points (grid combinations outer, workloads inner), each validated; raises ConfigError
    naming the grid key or point on the first bad one, and before building anything when the grid
    has more than ``max_points`` points."""
    o = spec.origin
    check_point_limit(o, spec.n_points, max_points)
    builtin = spec.arch in (BUILTIN_MULTICORE if spec.multicore else BUILTIN_ARCHS)
    arch_src = spec.arch if builtin else _resolve(spec, spec.arch)
    try:
        base: Arch | MultiCoreArch = load_multicore_arch(arch_src) if spec.multicore else load_arch(arch_src)
    except NpukitError as exc:
        raise ConfigError(f"{o}: 'sweep.arch': {exc}") from None
    grid = {k: [_resolve(spec, v) if k == "energy_table" and isinstance(v, str) and v not in BUILTIN_TABLES else v
                for v in vals] for k, vals in spec.grid.items()}
    for key, vals in grid.items():  # each value alone first, so the error names the value
        for v in vals:
            try:  # the arch's own checks, a rate's floor (npukit.sim.bounded.MIN_RATE) among them
                base.with_(**{key: v})
            except NpukitError as exc:
                raise ConfigError(f"{o}: grid key '{key}' = {v!r}: {exc}") from None
    workloads: list[tuple[str, str, Workload, str | None]] = []
    for i, w in enumerate(spec.workloads):
        try:  # every form but those that run code; relative files are read beside the spec file
            path, files = resolve_paths(w, spec.base_dir)
            digest = None
            if files:
                h = hashlib.sha256()
                for f in files:
                    h.update(f.read_bytes())
                digest = h.hexdigest()
            loaded = _load_once(path, digest)
            if workload_form(path) in _TRACED:  # the trace depends on torch/transformers/diffusers too
                digest = hashlib.sha256(f"{digest}:{_content_sha256(loaded)}".encode()).hexdigest()
        except OSError as exc:
            raise ConfigError(f"{o}: 'sweep.workloads[{i}]' ({w}): cannot read it ({exc.strerror or exc})") from None
        except NpukitError as exc:
            raise ConfigError(f"{o}: 'sweep.workloads[{i}]' ({w}): {exc}") from None
        workloads.append((w, path, loaded, digest))
    keys = list(grid)
    tables: dict[str, tuple[str | None, EnergyTable | None]] = {}  # path -> (sha256 of a file's bytes, its table)
    points: list[SweepPoint] = []
    base_env = _flat_arch(base) if spec.derived else {}
    for combo in itertools.product(*(grid[k] for k in keys)):
        overrides = dict(zip(keys, combo, strict=True))
        if spec.derived:
            overrides = apply_derived(spec.derived, overrides, base_env, o)
        try:
            arch = base.with_(**overrides) if overrides else base
            arch_dict = _canon(arch.to_dict())
            _check_core_objective(arch, overrides)
            for core in {c.arch for c in arch.cores if c.kind == "mac"} if isinstance(arch, MultiCoreArch) else (arch,):
                check_buffers(core)
            if arch.energy_table not in tables:
                tables[arch.energy_table] = _read_table(arch.energy_table)
        except NpukitError as exc:
            raise ConfigError(f"{o}: grid point ({point_label(overrides)}): {exc}") from None
        table_sha, table = tables[arch.energy_table]
        # the key leaves out the table file's path (its bytes are in): another working directory gives the same key
        key_arch = arch_dict if table_sha is None else \
            _without_path(arch_dict, arch.energy_table, Path(arch.energy_table).suffix.lower())
        for w, path, loaded, digest in workloads:
            cfg: dict[str, Any] = {"arch": arch_dict, "workload": w, "npukit": __version__}
            if digest is not None:
                cfg["workload_sha256"] = digest
            if table_sha is not None:
                cfg["energy_table_sha256"] = table_sha
            config = json.dumps(cfg, sort_keys=True, separators=(",", ":"))
            key_config = config if table_sha is None else json.dumps(cfg | {"arch": key_arch}, sort_keys=True,
                                                                     separators=(",", ":"))
            key = hashlib.sha256(key_config.encode()).hexdigest()[:32]
            points.append(SweepPoint(key, arch, w, path, overrides, config, len(loaded.layers), loaded, table))
    return points


def point_label(grid: dict[str, Any]) -> str:
    """A point's grid values as error messages name it: ``k=v, k2=v2`` (``base arch`` for none)."""
    return ", ".join(f"{k}={v!r}" for k, v in grid.items()) or "base arch"


_TRACED = ("real", "config", "torch")  # forms whose workload a library builds: keyed by the traced content


def _content_sha256(wl: Workload) -> str:
    """sha256 of a workload's name and layers (their dataclass reprs: ints and strings, stable across processes)."""
    return hashlib.sha256(repr((wl.name, wl.layers)).encode()).hexdigest()


@lru_cache(maxsize=64)
def _load_once(path: str, digest: str | None) -> Workload:
    """The workload of a resolved spec, loaded (traced, lowered, read) once per process and per content of its
    files (``digest``): a search expands its points once per trial, and must not re-trace per trial."""
    return load_workload(path)
