"""Bad input files by class: not UTF-8, a byte-order mark, a folder where a file is expected.

Every reader of user text (arch TOML, SCALE-Sim .cfg, topology CSV, energy table, sweep spec, ledger)
gives one typed error naming the file, and the CLI exits 2 with one line and writes nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from npukit.cli import main
from npukit.sim import ConfigError, EnergyTableError, Ledger, LedgerError, WorkloadError, load_arch, load_table, load_topology_csv
from npukit.sweeps import load_sweep_spec

GARBAGE = b"\x89PNG\r\n\x1a\n\xff\xfe\x00binary"
READERS = [
    ("arch.toml", load_arch, ConfigError),
    ("arch.cfg", load_arch, ConfigError),
    ("topo.csv", load_topology_csv, WorkloadError),
    ("table.toml", load_table, EnergyTableError),
    ("sweep.toml", load_sweep_spec, ConfigError),
    ("run.ledger.json", Ledger.load, LedgerError),
]


@pytest.mark.parametrize("name,reader,error", READERS, ids=[r[0] for r in READERS])
def test_not_utf8_is_one_typed_error(tmp_path: Path, name: str, reader, error) -> None:
    p = tmp_path / name
    p.write_bytes(GARBAGE)
    with pytest.raises(error, match="not UTF-8") as exc:
        reader(p)
    assert str(p) in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize("name,reader,error", READERS, ids=[r[0] for r in READERS])
def test_folder_is_not_reported_as_missing(tmp_path: Path, name: str, reader, error) -> None:
    p = tmp_path / name
    p.mkdir()
    with pytest.raises(error, match="folder"):
        reader(p)


def test_utf8_bom_is_accepted(tmp_path: Path) -> None:
    p = tmp_path / "a.toml"
    p.write_bytes(b"\xef\xbb\xbf" + b'name = "bom"\nrows = 8\ncols = 8\n')
    assert load_arch(p).name == "bom"
    t = tmp_path / "t.csv"
    t.write_bytes(b"\xef\xbb\xbfLayer, M, N, K,\ng, 4, 4, 4,\n")
    assert load_topology_csv(t).layers[0].M == 4


@pytest.mark.parametrize("flag", ["--arch", "--workload", "--table"])
def test_cli_exits_2_with_one_line_and_writes_nothing(tmp_path: Path, capsys, flag: str) -> None:
    bad = tmp_path / ("x.csv" if flag == "--workload" else "x.toml")
    bad.write_bytes(GARBAGE)
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exc:
        rc = main(["sim", flag, str(bad), "--out", str(out)])
        raise SystemExit(rc)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "not UTF-8" in err
    assert not out.exists()


def test_huge_grid_is_refused_before_any_work(tmp_path: Path, capsys) -> None:
    # 32^6 = 1.07e9 points: refused at once (no point is built), one line, exit 2, nothing written
    vals = ", ".join(str(8 * (i + 1)) for i in range(32))
    spec = tmp_path / "big.toml"
    spec.write_text('[sweep]\nname = "big"\narch = "npu32"\nworkloads = ["resnet18"]\n[grid]\n'
                    + "".join(f"{k} = [{vals}]\n" for k in ("rows", "cols", "bits.psum_buffer", "sram_kib.ifmap",
                                                                "sram_kib.filter", "sram_kib.psum")))
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exc:
        raise SystemExit(main(["sweep", str(spec), "--out", str(out), "--no-progress"]))
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "1,073,741,824 points" in err and "--max-points" in err and len(err.splitlines()) == 1
    assert not out.exists()
    with pytest.raises(SystemExit) as exc:
        raise SystemExit(main(["sweep", str(spec), "--out", str(out), "--max-points", "0"]))
    assert exc.value.code == 2 and not out.exists()


@pytest.mark.parametrize("flag", ["--csv", "--db"])
def test_sweep_output_file_that_is_a_folder_fails_before_any_point(tmp_path: Path, capsys, flag: str) -> None:
    spec = tmp_path / "s.toml"
    spec.write_text('[sweep]\nname = "s"\narch = "npu32"\nworkloads = ["resnet18"]\n[grid]\n"bits.psum_buffer" = [8, 32]\n')
    folder = tmp_path / "a_folder"
    folder.mkdir()
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exc:
        raise SystemExit(main(["sweep", str(spec), "--out", str(out), flag, str(folder), "--no-progress"]))
    assert exc.value.code == 2
    assert "is a folder" in capsys.readouterr().err
    assert not out.exists() and list(folder.iterdir()) == []


@pytest.mark.parametrize("kind", ["foreign-sqlite", "garbage"])
def test_foreign_database_is_refused_and_left_untouched(tmp_path: Path, kind: str) -> None:
    import sqlite3

    from npukit.sweeps import SweepStore

    db = tmp_path / "theirs.sqlite"
    if kind == "foreign-sqlite":
        con = sqlite3.connect(db)
        con.execute("CREATE TABLE users (id INTEGER, name TEXT)")
        con.commit()
        con.close()
    else:
        db.write_bytes(GARBAGE * 100)
    before = db.read_bytes()
    with pytest.raises(ConfigError, match="sweep database"):
        SweepStore(db)
    assert db.read_bytes() == before  # not switched to WAL, not rewritten
    assert sorted(p.name for p in tmp_path.iterdir()) == ["theirs.sqlite"]  # no -wal / -shm left beside it


def test_experiment_with_unknown_arch_fails_before_any_work(tmp_path: Path, capsys) -> None:
    out = tmp_path / "ce"
    with pytest.raises(SystemExit) as exc:
        raise SystemExit(main(["experiment", "cacheedit", "--quick", "--arch", "npu999", "--out", str(out)]))
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "npu999" in err and len(err.splitlines()) == 1
    assert not out.exists()


ARCH_FIELDS = ['name = [1, 2]', 'name = ""', 'name = {a = 1}', "name = 5", "dataflow = [1]", "timing = 3",
               "energy_table = [1]", "mapping = true", "rows = \"8\"", "rows = [8]", 'clock_ghz = "x"', "bits = 3",
               '[bits]\npsum_buffer = "8"', "[psum_quant]\npolicy = [1]"]


@pytest.mark.parametrize("field", ARCH_FIELDS)
def test_arch_field_of_the_wrong_type_is_one_line(tmp_path: Path, capsys, field: str) -> None:
    arch = tmp_path / "a.toml"
    arch.write_text(field + "\n")
    with pytest.raises(ConfigError):
        load_arch(arch)
    out = tmp_path / "out"
    assert main(["sim", "--arch", str(arch), "--workload", "gemm:M=4,N=4,K=4", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert not out.exists()
