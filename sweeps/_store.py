"""The sweep results database: one SQLite table ``points``, one complete row per finished point.

The database runs in WAL mode; rows go in with ``INSERT OR IGNORE`` on the point key, a small
batch per transaction, so a process killed at any moment loses no committed row and leaves no
partial one. Every column is ``NOT NULL``.

A file is opened for writing only once it is known to be npukit's (or new). Until then, and for
every read (export), it is opened read-only and creates nothing beside it: with ``immutable=1``
when there is no ``-wal`` file (a read-only connection to a WAL-mode file would otherwise create
``-wal``/``-shm`` and leave them), else ``mode=ro`` to read the committed rows still in the WAL.

Columns: ``key`` (primary key), ``config`` (canonical JSON), ``workload``, one column per arch
field (``arch_name``, ``rows``, ``cols``, ``dataflow``, ..., ``bits_psum_buffer``, ``sram_kib_psum``, ...),
``layers``, ``macs``, ``compute_cycles``, ``stall_cycles``, ``total_cycles`` (their sum; clock cycles),
``area_mm2``, ``leakage_mw``, ``energy_dynamic_pj``, ``energy_static_pj``, ``power_avg_w``, ``power_peak_w``,
``gops_per_mm2``, ``tops_per_w`` (:mod:`npukit.sim.power`; NULL in rows of an older npukit),
``utilization`` (macs / (compute_cycles x rows x cols), at most 1), ``energy_total_pj``, one
``energy_<component>_pj`` per component (pJ), ``latency_s`` (seconds), ``wall_s`` (seconds the
simulation took), ``npukit_version``, ``created_at`` (ISO 8601 UTC).
"""

from __future__ import annotations

import csv
import io
import json
import re
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..sim.arch import Arch
from ..sim.errors import ConfigError
from ..sim.multicore import FABRIC_TABLES, chip_keys
from ..sim.output import atomic_write_text
from ..sim.power import PPA_COLUMNS
from ..sim.simulator import COMPONENTS, TRAFFIC_COLUMNS
from ._spec import _SUBTABLES, SweepPoint, chip_values, column_name, grid_keys

_ARCH_TYPES: dict[str, str] = {}
for _f in fields(Arch):
    if _f.name in _SUBTABLES:
        for _s in fields(_SUBTABLES[_f.name]):
            _ARCH_TYPES[f"{_f.name}.{_s.name}"] = {"int": "INTEGER", "float": "REAL"}.get(str(_s.type), "TEXT")
    else:
        _ARCH_TYPES[_f.name] = {"int": "INTEGER", "float": "REAL"}.get(str(_f.type), "TEXT")

RESULT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("layers", "INTEGER"),
    ("macs", "INTEGER"),
    ("compute_cycles", "INTEGER"),
    ("stall_cycles", "INTEGER"),
    ("total_cycles", "INTEGER"),
    ("utilization", "REAL"),
    ("energy_total_pj", "REAL"),
    ("energy_onchip_pj", "REAL"),
    *((f"energy_{c}_pj", "REAL") for c in COMPONENTS),
    *((t, "REAL") for t in TRAFFIC_COLUMNS),
    ("latency_s", "REAL"),
    *((c, "REAL") for c in PPA_COLUMNS),  # area (mm^2), leakage (mW), static energy, power: npukit.sim.power
    ("wall_s", "REAL"),
)

#: A multi-core sweep's result columns: the per-operand traffic of one core is not among them; the chip's schedule
#: (``policy/mode``), bytes on the interconnect, its share of the latency and the DRAM bytes are.
MULTICORE_RESULT_COLUMNS: tuple[tuple[str, str], ...] = (
    *(c for c in RESULT_COLUMNS if c[0] not in TRAFFIC_COLUMNS and c[0] != "wall_s"),
    ("schedule", "TEXT"), ("interconnect_bytes", "REAL"), ("interconnect_share", "REAL"), ("dram_bytes", "REAL"),
    ("wall_s", "REAL"),
)
_SQL = {"int": "INTEGER", "float": "REAL", "bool": "INTEGER"}
_CHIP_TYPES = {"chip.mac_cores": "INTEGER", "chip.objective": "TEXT", "chip.layer_cores": "TEXT",
               **{f"{t}.{f.name}": _SQL.get(str(f.type), "TEXT") for t, cls in FABRIC_TABLES.items() for f in fields(cls)}}


def base_columns(multicore: bool = False) -> list[tuple[str, str]]:
    """(column, SQLite type) of a fresh ``points`` table, in order; ``multicore``: a multi-core sweep's (its MAC
    cores' arch fields, then the chip's keys as ``chip_mac_cores``, ``interconnect_bandwidth_bytes_per_cycle``, ...,
    and :data:`MULTICORE_RESULT_COLUMNS`)."""
    cols = [("key", "TEXT"), ("config", "TEXT"), ("workload", "TEXT")]
    cols += [(column_name(k), _ARCH_TYPES[k]) for k in grid_keys()]
    if multicore:
        cols += [(column_name(k), _CHIP_TYPES[k]) for k in chip_keys()]
    cols += list(MULTICORE_RESULT_COLUMNS if multicore else RESULT_COLUMNS)
    cols += [("npukit_version", "TEXT"), ("created_at", "TEXT")]
    return cols


def point_columns(point: SweepPoint) -> dict[str, Any]:
    """The columns of a point known before it runs: key, config, workload and the arch fields (on a multi-core chip
    its first MAC core's, then the chip's)."""
    cfg = json.loads(point.config)
    row: dict[str, Any] = {"key": point.key, "config": point.config, "workload": point.workload}
    chip = "cores" in cfg["arch"]
    arch = next(c["arch"] for c in cfg["arch"]["cores"] if c["kind"] == "mac") if chip else cfg["arch"]
    for k in grid_keys():
        top, _, sub = k.partition(".")
        row[column_name(k)] = arch[top][sub] if sub else arch[top]
    if chip:
        row |= {column_name(k): v for k, v in chip_values(cfg["arch"]).items()}
    row["npukit_version"] = cfg["npukit"]
    return row


def _connect_ro(path: Path, timeout: float = 30.0) -> sqlite3.Connection:
    """A read-only connection to ``path`` that neither modifies it nor creates files beside it."""
    uri = f"{path.resolve().as_uri()}?mode=ro"
    if not Path(f"{path}-wal").exists():
        uri += "&immutable=1"
    return sqlite3.connect(uri, uri=True, timeout=timeout)


def check_store(path: str | Path, multicore: bool | None = None) -> None:
    """Refuse, before any work and without modifying it, a ``path`` that cannot become or be an
    npukit sweep database: a folder, or an existing file that is not one (another SQLite schema,
    not SQLite, truncated); with ``multicore`` given, one that holds the other kind of point (single-core and
    multi-core points have different columns)."""
    p = Path(path)
    if p.is_symlink():  # SQLite follows it and would write wherever it points
        raise ConfigError(f"sweep database '{p}' is a symbolic link; pass the database file itself or a new --db path")
    if p.is_dir():
        raise ConfigError(f"sweep database '{p}' is a folder; pass a file path such as out/sweep/sweep.sqlite")
    if p.is_file() and p.stat().st_size > 0:
        _check_foreign(p, multicore)


def schema_problem(con: sqlite3.Connection) -> str | None:
    """Why ``con``'s schema is not npukit's (None if it is): ``points`` must be an ordinary rowid table (not a
    view, not WITHOUT ROWID) with ``key`` and ``config`` columns and no triggers. Reads ``sqlite_master`` only,
    so a hostile schema (a recursive view) is never evaluated."""
    rows = con.execute("SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall()
    points = [r for r in rows if r[1].lower() == "points"]
    if not points:
        return "no 'points' table"
    kind, _, _, sql = points[0]
    if kind != "table":
        return f"'points' is a {kind}, not a table"
    if re.search(r"\bwithout\s+rowid\b", str(sql or ""), re.IGNORECASE):
        return "'points' is a WITHOUT ROWID table"
    if any(r[0] == "trigger" for r in rows):
        return "it holds triggers"
    have = {r[1] for r in con.execute("PRAGMA table_info(points)")}
    missing = [c for c in ("key", "config") if c not in have]
    if missing:
        return f"its 'points' table lacks the column(s) {', '.join(missing)}"
    return None


def _check_foreign(path: Path, multicore: bool | None = None) -> None:
    """Refuse, opening it read-only, an existing file that is not an npukit sweep database (or, with ``multicore``
    given, holds the other kind of point)."""
    try:
        ro = _connect_ro(path)
        try:
            tables = {r[0] for r in ro.execute("SELECT name FROM sqlite_master")}
            problem = schema_problem(ro) if tables else None
            chip = tables and not problem and "chip_mac_cores" in {r[1] for r in ro.execute("PRAGMA table_info(points)")}
        finally:
            ro.close()
    except sqlite3.Error as exc:
        raise ConfigError(f"'{path}' is not a usable sweep database ({exc}); pass a new --db path") from None
    if problem:
        raise ConfigError(f"'{path}' is an SQLite file but not an npukit sweep database ({problem}); "
                          "it was left untouched; pass a new --db path")
    if tables and multicore is not None and chip != multicore:  # one kind of point per database: their columns differ
        held, new = ("multi-core", "single-core") if chip else ("single-core", "multi-core")
        raise ConfigError(f"sweep database '{path}' holds {held} points; a {new} sweep needs its own --db path")


class SweepStore:
    """The ``points`` table of one SQLite file. Only the process that owns it writes to it."""

    def __init__(self, path: str | Path, multicore: bool = False) -> None:
        self.path = Path(path)
        self.multicore = multicore
        check_store(self.path, multicore)  # read-only: a file that is not ours (or of the other kind) is never modified
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.con = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
        except (OSError, sqlite3.Error) as exc:
            raise ConfigError(f"cannot open sweep database '{self.path}' ({exc}); pass a writable --db path") from None
        try:
            self.con.execute("PRAGMA journal_mode=WAL")
            self.con.execute("PRAGMA synchronous=NORMAL")
            self._columns = self._ensure_schema()
        except sqlite3.DatabaseError as exc:
            self.con.close()
            raise ConfigError(f"'{self.path}' is not a usable sweep database ({exc}); pass a new --db path") from None

    def _ensure_schema(self) -> list[str]:
        have = [r[1] for r in self.con.execute("PRAGMA table_info(points)")]
        base = base_columns(self.multicore)
        if not have:
            cols = ", ".join(f"{c} {t} NOT NULL" + (" PRIMARY KEY" if c == "key" else "") for c, t in base)
            self.con.execute(f"CREATE TABLE IF NOT EXISTS points ({cols})")
            return [c for c, _ in base]
        if "key" not in have or "config" not in have:
            raise sqlite3.DatabaseError("its 'points' table has no key/config columns")
        if "cycles" in have and "total_cycles" not in have:  # the name before compute + stall was total_cycles
            self.con.execute("ALTER TABLE points RENAME COLUMN cycles TO total_cycles")
            have[have.index("cycles")] = "total_cycles"
        for c, t in base:  # a newer npukit added a column: old rows get NULL there
            if c not in have:
                self.con.execute(f"ALTER TABLE points ADD COLUMN {c} {t}")
                have.append(c)
        return have

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> SweepStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def keys(self) -> set[str]:
        """Keys of every stored point."""
        return {r[0] for r in self.con.execute("SELECT key FROM points")}

    def count(self) -> int:
        return int(self.con.execute("SELECT count(*) FROM points").fetchone()[0])

    def insert(self, rows: Sequence[dict[str, Any]]) -> int:
        """Insert complete rows in one transaction (``INSERT OR IGNORE`` on key); returns rows added."""
        if not rows:
            return 0
        for extra in sorted({c for r in rows for c in r} - set(self._columns)):
            known = extra.startswith("energy_") or extra in TRAFFIC_COLUMNS
            if not known or not extra.isidentifier():
                raise ValueError(f"unexpected sweep column {extra!r}")
            self.con.execute(f"ALTER TABLE points ADD COLUMN {extra} REAL NOT NULL DEFAULT 0")
            self._columns.append(extra)
        now = datetime.now(UTC).isoformat(timespec="milliseconds")
        present = {c for r in rows for c in r}
        cols = [c for c in self._columns if c in present or c == "created_at"]
        sql = f"INSERT OR IGNORE INTO points ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"
        data = [tuple(now if c == "created_at" else _sqlite_value(r.get(c, 0.0)) for c in cols) for r in rows]
        before = self.con.total_changes
        self.con.execute("BEGIN IMMEDIATE")
        try:
            self.con.executemany(sql, data)
            self.con.execute("COMMIT")
        except BaseException:
            self.con.execute("ROLLBACK")
            raise
        return self.con.total_changes - before

    def delete(self, keys: Sequence[str]) -> int:
        """Remove the rows of ``keys`` in one transaction (a run that stopped on bad input takes back the rows it
        stored); returns rows removed."""
        if not keys:
            return 0
        before = self.con.total_changes
        self.con.execute("BEGIN IMMEDIATE")
        try:
            for i in range(0, len(keys), 500):  # below SQLite's limit on bound parameters
                part = list(keys[i:i + 500])
                self.con.execute(f"DELETE FROM points WHERE key IN ({', '.join('?' * len(part))})", part)
            self.con.execute("COMMIT")
        except BaseException:
            self.con.execute("ROLLBACK")
            raise
        return self.con.total_changes - before


def _sqlite_value(v: Any) -> Any:
    """``v`` as SQLite stores it: an integer beyond SQLite's 64 bits (the MACs of a 2^21-cubed GEMM) as a REAL,
    which an INTEGER column keeps as such (before, OverflowError, and the batch's points were lost)."""
    return float(v) if isinstance(v, int) and not isinstance(v, bool) and not -(2**63) <= v < 2**63 else v


def _open_ro(path: Path) -> sqlite3.Connection:
    if path.is_dir():
        raise ConfigError(f"sweep database '{path}' is a folder; pass the .sqlite file npukit sweep wrote")
    if not path.is_file():
        raise ConfigError(f"sweep database '{path}' does not exist; run npukit sweep SPEC.toml first")
    con = None
    try:
        con = _connect_ro(path)
        problem = schema_problem(con)
        if problem:
            raise sqlite3.DatabaseError(problem)
    except sqlite3.DatabaseError as exc:
        if con is not None:
            con.close()
        raise ConfigError(f"'{path}' is not a sweep database ({exc}); pass the .sqlite file npukit sweep wrote") from None
    return con


def read_rows(db: str | Path, keys: Iterable[str] | None = None, with_config: bool = False) -> list[dict[str, Any]]:
    """Rows of a sweep database as dicts: all of them in insertion order, or those of ``keys`` in that
    order (keys not stored are skipped). ``config`` is left out unless ``with_config``."""
    con = _open_ro(Path(db))
    try:
        cur = con.execute("SELECT * FROM points ORDER BY rowid")
        names = [d[0] for d in cur.description]
        rows = [dict(zip(names, r, strict=True)) for r in cur]
    finally:
        con.close()
    if not with_config:
        for r in rows:
            r.pop("config", None)
    if keys is None:
        return rows
    by_key = {r["key"]: r for r in rows}
    return [by_key[k] for k in keys if k in by_key]


def export_csv(db: str | Path, csv_path: str | Path, keys: Iterable[str] | None = None) -> Path:
    """Write the rows of ``db`` (or of ``keys`` only, in that order) to ``csv_path`` atomically; returns
    the path. Columns as in the database, ``config`` left out."""
    rows = read_rows(db, keys)
    out = Path(csv_path)
    if out.is_dir():
        raise ConfigError(f"CSV path '{out}' is a folder; pass a file path such as out/sweep/sweep.csv")
    buf = io.StringIO()
    if rows:
        w = csv.DictWriter(buf, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    else:  # the table's own columns (a multi-core database has others)
        con = _open_ro(Path(db))
        try:
            names = [r[1] for r in con.execute("PRAGMA table_info(points)")]
        finally:
            con.close()
        buf.write(",".join(c for c in names if c != "config") + "\n")
    try:
        atomic_write_text(out, buf.getvalue())
    except OSError as exc:
        raise ConfigError(f"cannot write CSV '{out}' ({exc.strerror}); pass a writable --csv path") from None
    return out
