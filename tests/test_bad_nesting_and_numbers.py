"""Bounded parsing by class: nesting 100,000 deep, 401-digit integers, YAML alias bombs, huge sweep specs,
foreign sweep databases and wrong-typed ledger keys. Each gives one typed error line (the CLI: exit 2, one
line, nothing written), fast: depth and size are checked before any recursive parser, integers before any
float conversion, the sweep's point limit before any per-value work."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest
from _cli_util import refused

from npukit.sim import (
    MAX_DEPTH,
    ConfigError,
    EnergyTableError,
    Ledger,
    LedgerError,
    WorkloadError,
    load_arch,
    load_table,
)
from npukit.sweeps import expand_points, load_sweep_spec
from npukit.workloads import _trace_cache as tc
from npukit.workloads import workload_from_spec

DEEP = 100_000
HOROWITZ = (Path(__file__).resolve().parents[1] / "sim" / "tables" / "horowitz45.toml").read_text()
ERT = (Path(__file__).resolve().parents[1] / "examples" / "accelergy_ERT.yaml").read_text()
BIG = 10**400  # 401 digits
BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8))


def _one_line(exc: pytest.ExceptionInfo) -> str:
    msg = str(exc.value)
    assert "\n" not in msg and len(msg) < 400, msg
    return msg


# ------------------------------------------------------------------------------------------ depth
def _deep_json() -> str:
    return "[" * DEEP + "]" * DEEP


@pytest.mark.parametrize("kind", ["hf-config", "ledger", "ert-yaml", "arch-toml", "table-toml", "sweep-toml"])
def test_nesting_100000_deep_is_one_line(kind: str, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("NPUKIT_CACHE_DIR", str(tmp_path / "cache"))
    toml_deep = "x = " + "[" * DEEP + "]" * DEEP + "\n"
    cases = {
        "hf-config": ("c.json", '{"model_type": "llama", "x": ' + _deep_json() + "}",
                      lambda p: workload_from_spec(f"hf:{p}"), WorkloadError),
        "ledger": ("l.ledger.json", '{"format": "npukit-ledger/1", "meta": ' + _deep_json() + "}", Ledger.load,
                   LedgerError),
        "ert-yaml": ("e.yaml", "ERT: " + _deep_json() + "\n", load_table, EnergyTableError),
        "arch-toml": ("a.toml", toml_deep, load_arch, ConfigError),
        "table-toml": ("t.toml", toml_deep, load_table, EnergyTableError),
        "sweep-toml": ("s.toml", toml_deep, load_sweep_spec, ConfigError),
    }
    name, text, reader, error = cases[kind]
    p = tmp_path / name
    p.write_text(text)
    with pytest.raises(error) as exc:
        reader(p)
    assert f"limit of {MAX_DEPTH}" in _one_line(exc)


def test_trace_cache_entry_nested_deep_is_ignored(tmp_path: Path) -> None:
    p = tmp_path / "e.json"
    p.write_text('{"format": 2, "meta": ' + _deep_json() + "}")
    assert tc.load(p) is None  # not RecursionError: the entry is traced again


# ------------------------------------------------------------------------------------------ big integers
def test_401_digit_integers_in_arch_fields(tmp_path: Path) -> None:
    for key in ("clock_ghz", "dram_bandwidth_bytes_per_cycle", "sram_kib.ifmap", "sram_kib.psum", "rows"):
        top, _, sub = key.partition(".")
        body = f"[{top}]\n{sub} = {BIG}\n" if sub else f"{top} = {BIG}\n"
        p = tmp_path / "a.toml"
        p.write_text('name = "big"\n' + body)
        with pytest.raises(ConfigError) as exc:
            load_arch(p)
        assert key in _one_line(exc) and "401-digit" in str(exc.value)


def test_401_digit_integers_in_energy_tables(tmp_path: Path) -> None:
    t = tmp_path / "t.toml"
    t.write_text(HOROWITZ.replace("pj_per_bit2 = ", f"pj_per_bit2 = {BIG} # ", 1))
    with pytest.raises(EnergyTableError) as exc:
        load_table(t)
    assert "int_mult.pj_per_bit2" in _one_line(exc)
    e = tmp_path / "e.yaml"
    e.write_text(ERT.replace("energy: 0.3", f"energy: {BIG}", 1))
    with pytest.raises(EnergyTableError) as exc:
        load_table(e)
    assert "out of range" in _one_line(exc)


@pytest.mark.slow  # imports torch
def test_huge_input_shape_is_one_line(capsys, tmp_path: Path) -> None:
    refused(["sim", "--workload", "torch:resnet18", "--input-shape", "1,3," + "9" * 401, "--out", str(tmp_path / "o")],
            capsys, "input shape")
    refused(["sim", "--workload", "torch:resnet18", "--input-shape", "1,3,100000,100000", "--out", str(tmp_path / "o")],
            capsys, "elements")
    assert not (tmp_path / "o").exists()


# superscript 2 (was a traceback), full-width 64, Arabic-Indic 4
@pytest.mark.parametrize("dim", ["\u00b2", "\uff16\uff14", "\u0664"])
def test_a_dim_in_other_digits_is_one_line(dim: str) -> None:
    from npukit.sim import WorkloadError, parse_dim

    with pytest.raises(WorkloadError, match="positive integer"):
        parse_dim(dim, "input shape", WorkloadError)
    assert parse_dim(" 64 ", "input shape", WorkloadError) == 64


# ------------------------------------------------------------------------------------------ YAML aliases
def test_yaml_alias_bomb_fails_fast(tmp_path: Path, capsys) -> None:
    assert len(BOMB) < 450
    e = tmp_path / "bomb.yaml"
    e.write_text("ERT:\n  version: '0.4'\n  tables: [" + "]\n" + BOMB)
    t0 = time.perf_counter()
    with pytest.raises(EnergyTableError) as exc:
        load_table(e)
    assert "alias" in _one_line(exc) and time.perf_counter() - t0 < 2
    spec = tmp_path / "s.toml"  # also through a sweep grid
    spec.write_text(f'[sweep]\narch = "npu32"\nworkloads = ["gemm:M=8,N=8,K=8"]\n[grid]\nenergy_table = ["{e}"]\n')
    refused(["sweep", str(spec), "--out", str(tmp_path / "o"), "--no-progress"], capsys, "alias")
    assert not (tmp_path / "o").exists()


# ------------------------------------------------------------------------------------------ sweep specs
@pytest.mark.slow  # parsing a 300,000-value TOML list takes seconds
@pytest.mark.parametrize("what", ["workloads", "grid"])
def test_huge_sweep_spec_refused_by_the_point_limit_first(what: str, tmp_path: Path) -> None:
    n = 300_000  # x 4 cols values = 1.2e6 points; a pairwise duplicate check would take minutes
    vals = ", ".join(f'"gemm:M={i},N=8,K=8"' if what == "workloads" else str(i + 1) for i in range(n))
    wls = f"[{vals}]" if what == "workloads" else '["gemm:M=8,N=8,K=8"]'
    grid = "cols = [8, 16, 32, 64]\n" + (f"rows = [{vals}]\n" if what == "grid" else "")
    spec = tmp_path / "s.toml"
    spec.write_text(f'[sweep]\narch = "npu32"\nworkloads = {wls}\n[grid]\n{grid}')
    t0 = time.perf_counter()
    with pytest.raises(ConfigError, match="1,200,000 points"):
        load_sweep_spec(spec)
    assert time.perf_counter() - t0 < 10


def test_duplicates_still_found_in_linear_time(tmp_path: Path) -> None:
    spec = tmp_path / "s.toml"
    spec.write_text('[sweep]\narch = "npu32"\nworkloads = ["gemm:M=8,N=8,K=8"]\n[grid]\nrows = [8, 16, 8.0]\n')
    with pytest.raises(ConfigError, match="twice"):
        load_sweep_spec(spec)
    spec.write_text('[sweep]\narch = "npu32"\nworkloads = ["gemm:M=8,N=8,K=8"]\n[grid]\nrows = [8, 16]\n')
    assert len(expand_points(load_sweep_spec(spec))) == 2


# ------------------------------------------------------------------------------------------ databases
DBS = {
    "without-rowid": "CREATE TABLE points (key TEXT PRIMARY KEY, config TEXT) WITHOUT ROWID",
    "recursive-view": "CREATE VIEW points AS WITH RECURSIVE r(key, config) AS (SELECT 1, 2 UNION ALL "
                      "SELECT key + 1, config FROM r) SELECT * FROM r",
    "no-config-column": "CREATE TABLE points (key TEXT)",
    "trigger": "CREATE TABLE points (key TEXT, config TEXT); CREATE TRIGGER t AFTER INSERT ON points "
               "BEGIN DELETE FROM points; END",
}


@pytest.mark.parametrize("case", list(DBS))
def test_foreign_database_schema_refused(case: str, tmp_path: Path, capsys) -> None:
    db = tmp_path / "x.sqlite"
    con = sqlite3.connect(db)
    con.executescript(DBS[case])
    con.commit()
    con.close()
    before = db.read_bytes()
    t0 = time.perf_counter()
    refused(["report", str(db), "--out", str(tmp_path / "o")], capsys, "not a sweep database")
    assert time.perf_counter() - t0 < 10 and not (tmp_path / "o").exists()
    spec = tmp_path / "s.toml"
    spec.write_text('[sweep]\narch = "npu32"\nworkloads = ["gemm:M=8,N=8,K=8"]\n')
    refused(["sweep", str(spec), "--db", str(db), "--out", str(tmp_path / "o"), "--no-progress"], capsys,
            "not an npukit sweep database")
    assert db.read_bytes() == before


# ------------------------------------------------------------------------------------------ ledgers
@pytest.mark.parametrize("field,value", [("scope", 7), ("component", None), ("action", ["mac"]), ("count", BIG),
                                         ("bits", [BIG])])
def test_ledger_key_types_and_ranges(field: str, value, tmp_path: Path) -> None:
    row = {"scope": "w/l", "component": "pe_array", "action": "mac", "bits": [8, 8, 32], "count": 1, field: value}
    p = tmp_path / "l.ledger.json"
    p.write_text(json.dumps({"format": "npukit-ledger/1", "meta": {}, "components": {}, "counts": [row], "cycles": []}))
    with pytest.raises(LedgerError) as exc:
        Ledger.load(p)
    _one_line(exc)


def test_topology_csv_huge_fields(tmp_path: Path, capsys) -> None:
    wide = tmp_path / "wide.csv"
    wide.write_text('Layer, M, N, K,\nl, "' + "x" * 200_000 + '", 4, 4,\n')
    refused(["sim", "--workload", str(wide), "--out", str(tmp_path / "o")], capsys, "field larger")
    big = tmp_path / "big.csv"
    big.write_text(f"Layer, M, N, K,\nl, {BIG}, 4, 4,\n")
    err = refused(["sim", "--workload", str(big), "--out", str(tmp_path / "o")], capsys, "up to")
    assert len(err) < 400 and not (tmp_path / "o").exists()


def test_limits_named_in_readme() -> None:
    from npukit.sim import MAX_DIM, MAX_INT, MAX_TEXT_BYTES
    from npukit.sim.bounded import MAX_SHAPE_ELEMENTS

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    for value in (MAX_TEXT_BYTES, MAX_INT, MAX_DIM, MAX_SHAPE_ELEMENTS):
        assert f"{value:,}" in readme, value
    for name in ("MAX_DEPTH", "MAX_TEXT_BYTES", "MAX_INT", "MAX_DIM", "WITHOUT", "alias", "trust_remote_code", "TLS"):
        assert name in readme, name


@pytest.mark.parametrize("spec, needle", [("resnet18:image=0", "image must be 1..16384"),
                                          ("resnet18:image=1000000", "image must be 1..16384"),  # ran for minutes
                                          ("minilm-l6:seq=99999999999", "seq must be 1..1048576"),  # 4.6e25 MACs
                                          ("minilm-l6:seq=0", "seq must be 1..1048576")])
def test_builtin_sizes_are_bounded(spec: str, needle: str) -> None:
    from npukit.sim import WorkloadError
    from npukit.workloads import load_workload

    with pytest.raises(WorkloadError, match=needle):
        load_workload(spec)
    assert load_workload("resnet18:image=1").macs > 0


def test_a_pipe_or_a_device_is_refused_before_it_is_read(tmp_path: Path) -> None:
    # a FIFO hung every reader (an hf: config, a routing file, a cache entry); a link to /dev/zero read until memory
    # ran out: stat gives neither a size to check
    import os

    from npukit.sim import ConfigError
    from npukit.sim.disk_cache import load_entry
    from npukit.sim.textfile import read_text

    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.json"
    zero.symlink_to("/dev/zero")
    for p in (fifo, zero):
        with pytest.raises(ConfigError, match="not a regular file"):
            read_text(p, "config file", ConfigError)
        assert load_entry(p, "trace") is None  # a cache entry: a miss, rebuilt
