"""Output paths and foreign files by class, for every verb that writes.

* An empty ``--out`` (or ``--csv``/``--db``) is refused: it must not silently mean the current folder.
* A folder where a file is expected says "is a folder", not "does not exist".
* A file that is not an npukit sweep database (truncated, another SQLite schema in WAL or rollback
  mode, not SQLite) is opened read-only, refused, and left byte for byte as it was, with no
  ``-wal``/``-shm`` beside it, by ``sweep export`` and by ``sweep --db``.
* Temporaries of npukit's naming left by a killed write are removed by the next write into the folder.

Each case runs with the current folder set to an empty temporary folder, and checks that the
refusal is one line, exit code 2, and that the folder is unchanged.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _cli_util import refused

from npukit.cli import main
from npukit.sim import ConfigError

SPEC = '[sweep]\nname = "s"\narch = "npu32"\nworkloads = ["gemm:M=8,N=8,K=8"]\n[grid]\nrows = [4, 8]\n'


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else b"<dir>") for p in sorted(root.rglob("*"))}




@pytest.fixture(scope="module")
def _template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("template")
    (root / "s.toml").write_text(SPEC)
    assert main(["sweep", str(root / "s.toml"), "--out", str(root / "done"), "--no-progress"]) == 0
    assert main(["sim", "--workload", "gemm:M=8,N=8,K=8", "--out", str(root / "led"), "--quiet"]) == 0
    return root


@pytest.fixture
def ws(_template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The current folder, holding a sweep spec, a ledger and a finished sweep database (a fresh copy)."""
    root = tmp_path / "ws"
    shutil.copytree(_template, root)
    monkeypatch.chdir(root)
    return root


# ------------------------------------------------------------------------------------------ empty paths
EMPTY = [
    ["sim", "--workload", "gemm:M=8,N=8,K=8", "--out", ""],
    ["sweep", "s.toml", "--out", ""],
    ["sweep", "s.toml", "--out", "x", "--csv", ""],
    ["sweep", "s.toml", "--out", "x", "--db", ""],
    ["sweep", "export", "done/sweep.sqlite", "--csv", ""],
    ["report", "LEDGER", "--out", ""],
    ["report", "LEDGER", "--out", " "],
    ["demo", "--out", ""],
    ["bench", "omnimoe", "--out", ""],
    ["experiment", "psumquant", "--energy-only", "--out", ""],
    ["experiment", "omnimoe", "--quick", "--out", ""],
    ["experiment", "cacheedit", "--quick", "--out", ""],
    ["rtl", "test", "--build-dir", ""],
    ["rtl", "stats", "--json", ""],
]


@pytest.mark.parametrize("argv", EMPTY, ids=[" ".join(a).replace("  ", " ''") for a in EMPTY])
def test_empty_output_path_is_refused_and_nothing_is_written(argv, ws, capsys) -> None:
    ledger = next((ws / "led").glob("*.ledger.json"))
    argv = [str(ledger) if a == "LEDGER" else a for a in argv]
    before = _tree(ws)
    refused(argv, capsys, "is empty")
    assert _tree(ws) == before


# ------------------------------------------------------------------------------------------ folder for a file
def test_folder_where_a_file_is_expected_says_so(ws, capsys, tmp_path) -> None:
    (ws / "d.sqlite").mkdir()
    (ws / "m.py").mkdir()
    (ws / "d.json").mkdir()
    cases = [
        ["sweep", "export", "d.sqlite"],
        ["sweep", "export", "done"],
        ["sweep", "s.toml", "--out", "x", "--db", "d.sqlite"],
        ["report", "d.json", "--out", "r"],
        ["rtl", "stats", "--json", "d.json"],
        ["sweep", "export", "done/sweep.sqlite", "--csv", "d.json"],
    ]
    before = _tree(ws)
    for argv in cases:
        err = refused(argv, capsys, "folder")
        assert "does not exist" not in err, err
        assert _tree(ws) == before, argv


def test_model_file_and_weights_that_are_folders(tmp_path) -> None:
    pytest.importorskip("torch")
    from npukit.models.cacheedit import load_editor
    from npukit.sim import WorkloadError
    from npukit.workloads.model_specs import workload_from_model_spec

    (tmp_path / "m.py").mkdir()
    with pytest.raises(WorkloadError, match="is a folder"):
        workload_from_model_spec(f"{tmp_path / 'm.py'}:make", "1,3")
    with pytest.raises(ConfigError, match="is a folder"):
        load_editor(tmp_path)


# ------------------------------------------------------------------------------------------ foreign databases
def _foreign(kind: str, path: Path, ours: Path) -> None:
    if kind == "truncated":
        path.write_bytes(ours.read_bytes()[:3000])
    elif kind == "header-only":
        path.write_bytes(ours.read_bytes()[:100])
    elif kind == "text":
        path.write_text("name,value\na,1\n")
    else:
        con = sqlite3.connect(path)
        if kind == "other-wal":
            con.execute("PRAGMA journal_mode=WAL")
        con.execute("CREATE TABLE points (id INTEGER, name TEXT)")  # our table name, not our columns
        con.execute("INSERT INTO points VALUES (1, 'x')")
        con.commit()
        con.close()
        assert not Path(f"{path}-wal").exists()


KINDS = ["truncated", "header-only", "text", "other-wal", "other-rollback"]


@pytest.mark.parametrize("kind", KINDS)
def test_foreign_database_is_read_only_refused_and_untouched(kind, ws, capsys) -> None:
    theirs = ws / "theirs.sqlite"
    _foreign(kind, theirs, ws / "done" / "sweep.sqlite")
    before = _tree(ws)
    refused(["sweep", "export", "theirs.sqlite"], capsys, "theirs.sqlite")
    assert _tree(ws) == before  # same bytes, no -wal/-shm, no CSV
    refused(["sweep", "s.toml", "--out", "new", "--db", "theirs.sqlite", "--no-progress"], capsys, "theirs.sqlite")
    assert _tree(ws) == before  # and no output folder either


def test_own_database_leaves_nothing_beside_it_and_wal_rows_are_read(ws, capsys) -> None:
    """A finished sweep and an export leave no -wal/-shm; rows a killed writer left in its WAL are exported."""
    db = ws / "done" / "sweep.sqlite"
    assert sorted(p.name for p in db.parent.iterdir()) == ["sweep.csv", "sweep.sqlite"]
    assert main(["sweep", "export", str(db), "--csv", "e.csv"]) == 0
    assert sorted(p.name for p in db.parent.iterdir()) == ["sweep.csv", "sweep.sqlite"]
    n = len((ws / "e.csv").read_text().splitlines())
    # a writer killed with rows committed to its WAL (never checkpointed)
    code = (
        "import os, sqlite3, sys\n"
        "con = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "con.execute('PRAGMA journal_mode=WAL'); con.execute('PRAGMA wal_autocheckpoint=0')\n"
        "row = con.execute('SELECT * FROM points LIMIT 1').fetchone()\n"
        "cols = [d[1] for d in con.execute('PRAGMA table_info(points)')]\n"
        "row = list(row); row[cols.index('key')] = 'killed-writer-row'\n"
        "con.execute(f\"INSERT INTO points VALUES ({','.join('?' * len(row))})\", row)\n"
        "os._exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", code, str(db)], check=True)
    assert Path(f"{db}-wal").stat().st_size > 0
    assert main(["sweep", "export", str(db), "--csv", "e2.csv"]) == 0
    text = (ws / "e2.csv").read_text()
    assert len(text.splitlines()) == n + 1 and "killed-writer-row" in text


# ------------------------------------------------------------------------------------------ stale temporaries
def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_next_write_removes_temporaries_of_killed_writes_only(tmp_path) -> None:
    from npukit.sim import output

    host = output._HOST
    dead, alive = _dead_pid(), os.getppid()
    old = time.time() - 2 * output.STALE_TEMP_S
    names = {
        f".export.csv.abcd1234.{host}-{dead}.tmp": True,  # its writer is gone: removed at once
        f".sweep.csv.k2_9zzzz.{host}-{dead}.tmp": True,
        f".export.csv.abcd1234.{host}-{alive}.tmp": False,  # a live writer's: kept
        f".export.csv.abcd1234.{'0' * 8 if host != '0' * 8 else '1' * 8}-{dead}.tmp": False,  # another host's
        ".export.csv.abcd1234.tmp": False,  # older naming, recent: kept
        ".old.csv.abcd1234.tmp": True,  # older naming, stale by age
        ".notes.tmp": False,  # not ours, even when old
        ".my.draft.tmp": False,
        "export.csv.abcd1234.tmp": False,  # not hidden: not ours
    }
    for name, _ in names.items():
        p = tmp_path / name
        p.write_text("partial")
        if name in (".old.csv.abcd1234.tmp", ".notes.tmp", ".my.draft.tmp"):
            os.utime(p, (old, old))
    output.write_text(tmp_path / "export.csv", "a\n")
    left = {p.name for p in tmp_path.iterdir()}
    for name, removed in names.items():
        assert (name not in left) == removed, name
    assert "export.csv" in left


def test_killed_export_temporary_is_cleaned_by_the_next_export(ws) -> None:
    """A real killed writer: a process creates its temporary beside the CSV and dies without renaming."""
    code = ("import os, sys\nfrom pathlib import Path\nfrom npukit.sim.output import temp_path\n"
            "temp_path(Path(sys.argv[1])).write_text('half a csv')\nos._exit(9)\n")
    subprocess.run([sys.executable, "-c", code, str(ws / "export.csv")], check=False)
    assert len(list(ws.glob(".export.csv.*.tmp"))) == 1
    assert main(["sweep", "export", "done/sweep.sqlite", "--csv", "export.csv"]) == 0
    assert list(ws.glob(".*.tmp")) == [] and (ws / "export.csv").is_file()
