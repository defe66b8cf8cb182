"""``npukit sweep``: spec validation, results equal to simulate(), resume, crash safety, CSV export."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from _cli_util import refused

from npukit.cli import main
from npukit.sim import ConfigError, load_arch, simulate
from npukit.sim.simulator import COMPONENTS
from npukit.sweeps import (
    Executor,
    LocalPoolExecutor,
    SerialExecutor,
    SweepStore,
    expand_points,
    load_sweep_spec,
    read_rows,
    run_sweep,
)
from npukit.workloads import load_workload

SMALL = """
[sweep]
name = "small"
arch = "npu128"
workloads = ["resnet18", "gemm:M=512,N=256,K=384", "topo.csv"]
[grid]
rows = [64, 128]
dataflow = ["ws", "os", "is"]
"bits.psum_buffer" = [8, 32]
"sram_kib.psum" = [256, 1024]
"""
TOPO = "Layer, M, N, K,\nqkv, 128, 1152, 384,\nffn, 128, 1536, 384,\n"


def write_spec(folder: Path, text: str = SMALL, name: str = "spec.toml") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "topo.csv").write_text(TOPO)
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


def null_count(con: sqlite3.Connection) -> int:
    cols = [r[1] for r in con.execute("PRAGMA table_info(points)")]
    return con.execute(f"SELECT count(*) FROM points WHERE {' OR '.join(f'{c} IS NULL' for c in cols)}").fetchone()[0]


# ------------------------------------------------------------------------------ validation
BAD_SPECS = [
    ('[sweep]\narch = "npu128"\nworkloads = ["resnet18"]\n[grids]\nrows = [64]\n', "'grids'"),
    ('[sweep]\narch = "npu128"\nworkload = ["resnet18"]\n', "sweep.workload"),
    ('[sweep]\narch = "npu128"\nworkloads = []\n', "sweep.workloads"),
    ('[sweep]\nworkloads = ["resnet18"]\n', "sweep.arch"),
    ('[sweep]\narch = "npu128"\nworkloads = ["resnet18"]\n[grid]\nrows = []\n', "'rows'"),
    ('[sweep]\narch = "npu128"\nworkloads = ["resnet18"]\n[grid]\nrows = 64\n', "'rows'"),
    ('[sweep]\narch = "npu128"\nworkloads = ["resnet18"]\n[grid]\nrowz = [64]\n', "'rowz'"),
    ('[sweep]\narch = "npu128"\nworkloads = ["resnet18"]\n[grid]\n"bits.psun" = [8]\n', "'bits.psun'"),
    ('[sweep]\narch = "npu128"\nworkloads = ["resnet18"]\n[grid]\nrows = [64, 0]\n', "'rows'"),
    ('[sweep]\narch = "npu128"\nworkloads = ["resnet18"]\n[grid]\ndataflow = ["ws", "xs"]\n', "'dataflow'"),
    ('[sweep]\narch = "npu128"\nworkloads = ["resnet18"]\n[grid]\n"bits.psum_buffer" = [8, 8]\n', "'bits.psum_buffer'"),
    ('[sweep]\narch = "npu128"\nworkloads = ["resnet18"]\n[grid]\nbits.psum_buffer = [8, 128]\n', "'bits.psum_buffer'"),
    ('[sweep]\narch = "npu128"\nworkloads = ["resnet99"]\n', "sweep.workloads[0]"),
    ('[sweep]\narch = "nosuch.toml"\nworkloads = ["resnet18"]\n', "sweep.arch"),
    # each value is fine alone; the combination leaves the psum buffer too small for one row of psums
    ('[sweep]\narch = "npu128"\nworkloads = ["resnet18"]\n[grid]\n"sram_kib.psum" = [0.125, 64]\n"bits.psum_buffer" = [8, 32]\n',
     "sram_kib.psum"),
    ("[sweep\n", "not valid TOML"),
]


@pytest.mark.parametrize("text,needle", BAD_SPECS)
def test_bad_spec_is_one_line_config_error_and_writes_nothing(tmp_path, text, needle):
    spec = write_spec(tmp_path, text)
    db = tmp_path / "out" / "sweep.sqlite"
    with pytest.raises(ConfigError) as exc:
        run_sweep(spec, db, workers=1)
    msg = str(exc.value)
    assert needle in msg and "\n" not in msg
    assert not (tmp_path / "out").exists()


def test_cli_bad_spec_exit_2_nothing_written(tmp_path, capsys):
    spec = write_spec(tmp_path, '[sweep]\narch = "npu128"\nworkloads = ["resnet18"]\n[grid]\n"bits.psum_buffer" = [8, 0]\n')
    out = tmp_path / "out"
    assert main(["sweep", str(spec), "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "bits.psum_buffer" in err
    assert not out.exists()
    assert main(["sweep", str(write_spec(tmp_path)), "--out", str(out), "--workers", "0"]) == 2
    assert not out.exists()


def test_grid_expansion_and_keys(tmp_path, monkeypatch):
    spec = load_sweep_spec(write_spec(tmp_path))
    points = expand_points(spec)
    assert spec.n_points == len(points) == 2 * 3 * 2 * 2 * 3
    assert len({p.key for p in points}) == len(points)
    assert {(p.grid["rows"], p.grid["dataflow"], p.workload) for p in points} >= {(64, "is", "topo.csv"), (128, "ws", "resnet18")}
    for p in points[:6]:
        assert p.arch.rows == p.grid["rows"] and p.arch.bits.psum_buffer == p.grid["bits.psum_buffer"]
    # same config -> same key (256 KiB written as an int or a float); another npukit version -> another key
    again = write_spec(tmp_path / "b", SMALL.replace("[256, 1024]", "[256.0, 1024.0]"))
    assert [p.key for p in expand_points(load_sweep_spec(again))] == [p.key for p in points]
    monkeypatch.setattr("npukit.sweeps._spec.__version__", "9.9.9")
    assert not {p.key for p in expand_points(spec)} & {p.key for p in points}


def test_relative_arch_and_topology_resolve_against_spec_folder(tmp_path, monkeypatch):
    folder = tmp_path / "study"
    folder.mkdir()
    (folder / "small.toml").write_text('name = "mini"\nrows = 16\ncols = 8\n')
    (folder / "scalesim.cfg").write_text(
        "[general]\nrun_name = cfgarch\n[architecture_presets]\nArrayHeight: 32\nArrayWidth: 16\n"
        "IfmapSramSzkB: 512\nFilterSramSzkB: 512\nOfmapSramSzkB: 256\nDataflow: os\nBandwidth: 16\n"
    )
    monkeypatch.chdir(tmp_path)  # not the spec's folder
    for arch, rows, cols, df in (("small.toml", 16, 8, "ws"), ("scalesim.cfg", 32, 16, "os")):
        spec = write_spec(folder, f'[sweep]\narch = "{arch}"\nworkloads = ["topo.csv"]\n[grid]\n"bits.psum_buffer" = [8, 16]\n')
        points = expand_points(load_sweep_spec(Path("study") / spec.name))
        assert [(p.arch.rows, p.arch.cols, p.arch.dataflow, p.arch.bits.psum_buffer, p.layers) for p in points] == [
            (rows, cols, df, 8, 2), (rows, cols, df, 16, 2)]


# ------------------------------------------------------------------------------ results
def test_rows_equal_direct_simulate(tmp_path):
    spec = write_spec(tmp_path)
    db = tmp_path / "s.sqlite"
    summary = run_sweep(spec, db, workers=1)
    assert summary.computed == summary.total == 72 and summary.present == 0
    rows = {(r["workload"], r["rows"], r["dataflow"], r["bits_psum_buffer"], r["sram_kib_psum"]): r for r in read_rows(db)}
    assert len(rows) == 72
    base = load_arch("npu128")
    cases = [("resnet18", 64, "os", 8, 256), ("topo.csv", 128, "ws", 32, 1024), ("gemm:M=512,N=256,K=384", 64, "is", 8, 1024)]
    for wl, r, df, bp, sp in cases:
        arch = base.with_(rows=r, dataflow=df, **{"bits.psum_buffer": bp, "sram_kib.psum": sp})
        res = simulate(load_workload(str(tmp_path / wl) if wl.endswith(".csv") else wl), arch)
        row = rows[(wl, r, df, bp, sp)]
        assert (row["layers"], row["macs"]) == (len(res.layers), res.macs)
        assert (row["compute_cycles"], row["stall_cycles"], row["total_cycles"]) == (res.compute_cycles, res.stall_cycles,
                                                                                  res.total_cycles)
        assert row["utilization"] == res.macs / (res.compute_cycles * r * arch.cols)
        assert row["energy_total_pj"] == pytest.approx(res.energy_pj, rel=1e-12)
        for comp, pj in res.energy_by_component().items():
            assert row[f"energy_{comp}_pj"] == pytest.approx(pj, rel=1e-12)
        assert row["latency_s"] == pytest.approx(res.latency_s, rel=1e-12)
        assert row["cols"] == 128 and row["arch_name"] == "npu128" and row["wall_s"] > 0


def test_process_pool_equals_in_process(tmp_path):
    spec = write_spec(tmp_path)
    run_sweep(spec, tmp_path / "one.sqlite", workers=1)
    s2 = run_sweep(spec, tmp_path / "two.sqlite", workers=2)
    assert s2.computed == 72
    skip = {"wall_s", "created_at"}

    def strip(rows):
        return {r["key"]: {k: v for k, v in r.items() if k not in skip} for r in rows}

    assert strip(read_rows(tmp_path / "one.sqlite")) == strip(read_rows(tmp_path / "two.sqlite"))


class CountingExecutor(Executor):
    """A third-party backend: only map_unordered, results reversed to check order independence."""

    def __init__(self) -> None:
        self.workers = 3
        self.calls = 0

    def map_unordered(self, fn, items):
        results = []
        for item in items:
            self.calls += 1
            results.append(fn(item))
        yield from reversed(results)


def test_custom_executor_backend(tmp_path):
    spec = write_spec(tmp_path)
    ex = CountingExecutor()
    s = run_sweep(spec, tmp_path / "c.sqlite", executor=ex)
    assert s.computed == 72 and ex.calls > 1
    ref = run_sweep(spec, tmp_path / "r.sqlite", executor=SerialExecutor())
    assert {r["key"]: r["total_cycles"] for r in read_rows(tmp_path / "c.sqlite")} == {
        r["key"]: r["total_cycles"] for r in read_rows(tmp_path / "r.sqlite")
    }
    assert ref.computed == 72


def _square(x: int) -> int:
    return x * x


def test_executor_map_returns_item_order():
    items = list(range(7))
    assert CountingExecutor().map(_square, items) == [x * x for x in items]  # completion order reversed
    with LocalPoolExecutor(2) as pool:
        assert pool.map(_square, iter(items)) == [x * x for x in items]
    assert SerialExecutor().map(_square, []) == []


def test_rerun_computes_only_missing_points(tmp_path):
    spec = write_spec(tmp_path)
    db = tmp_path / "s.sqlite"
    first = run_sweep(spec, db, workers=2)
    before = {r["key"]: r for r in read_rows(db)}
    gone = sorted(before)[::9]  # 8 rows
    con = sqlite3.connect(db)
    with con:
        con.executemany("DELETE FROM points WHERE key = ?", [(k,) for k in gone])
    con.close()
    seen: list[tuple[int, int]] = []
    second = run_sweep(spec, db, workers=2, progress=lambda n, total: seen.append((n, total)))
    assert (second.computed, second.present, second.total) == (len(gone), first.total - len(gone), first.total)
    assert seen[0] == (0, len(gone)) and sum(n for n, _ in seen) == len(gone)
    after = {r["key"]: r for r in read_rows(db)}
    assert set(after) == set(before)
    for k in before:  # untouched rows were not rewritten; recomputed ones got new rows with equal numbers
        if k in gone:
            assert after[k]["created_at"] >= before[k]["created_at"] and after[k]["total_cycles"] == before[k]["total_cycles"]
        else:
            assert after[k] == before[k]
    assert run_sweep(spec, db, workers=2).computed == 0


def test_store_rejects_non_database(tmp_path):
    bad = tmp_path / "x.sqlite"
    bad.write_text("not a database, just text\n" * 100)
    with pytest.raises(ConfigError, match="not a usable sweep database"):
        SweepStore(bad)
    with pytest.raises(ConfigError, match="does not exist"):
        read_rows(tmp_path / "missing.sqlite")


# ------------------------------------------------------------------------------ CLI
def test_cli_writes_db_and_csv_and_exports(tmp_path, capsys):
    spec = write_spec(tmp_path)
    out = tmp_path / "out"
    assert main(["sweep", str(spec), "--out", str(out), "--workers", "2", "--no-progress"]) == 0
    printed = capsys.readouterr().out
    db, csv_path = out / "sweep.sqlite", out / "sweep.csv"
    assert str(db) in printed and str(csv_path) in printed
    assert "72 points, 72 computed now, 0 already present" in printed
    lines = csv_path.read_text().splitlines()
    header = lines[0].split(",")
    assert len(lines) == 73
    assert {"bits_psum_buffer", "sram_kib_psum", "rows", "dataflow", "workload", "energy_total_pj"} <= set(header)
    assert {f"energy_{c}_pj" for c in COMPONENTS} <= set(header)
    assert main(["sweep", "run", str(spec), "--out", str(out), "--workers", "1", "--no-progress"]) == 0  # run: the default
    assert "0 computed now, 72 already present" in capsys.readouterr().out
    exported = tmp_path / "all.csv"
    assert main(["sweep", "export", str(db), "--csv", str(exported)]) == 0
    assert str(exported) in capsys.readouterr().out
    assert sorted(exported.read_text().splitlines()) == sorted(lines)
    assert main(["sweep", "export", str(tmp_path / "nope.sqlite"), "--csv", str(tmp_path / "n.csv")]) == 2
    assert not (tmp_path / "n.csv").exists()


def test_a_csv_path_on_the_database_or_another_file_is_refused(tmp_path, capsys):
    # before, --csv equal to --db replaced the database by the CSV (every point lost), and export overwrote any file
    spec = write_spec(tmp_path)
    out = tmp_path / "o"
    refused(["sweep", str(spec), "--out", str(out), "--db", str(out / "x"), "--csv", str(out / "x"), "--workers", "1",
             "--no-progress"], capsys, "is the sweep database")
    assert not out.exists()
    assert main(["sweep", str(spec), "--out", str(out), "--workers", "1", "--no-progress", "--max-points", "72"]) == 0
    db = out / "sweep.sqlite"
    before = db.read_bytes()
    for victim in (db, out / "sweep.sqlite-wal"):
        refused(["sweep", "export", str(db), "--csv", str(victim)], capsys, "is the sweep database")
    refused(["sweep", str(spec), "--out", str(out), "--csv", str(db), "--overwrite", "--workers", "1", "--no-progress"],
            capsys, "is the sweep database")
    assert db.read_bytes() == before
    text = spec.read_text()
    refused(["sweep", "export", str(db), "--csv", str(spec)], capsys, "not a sweep CSV")
    assert spec.read_text() == text
    assert main(["sweep", "export", str(db), "--csv", str(out / "sweep.csv")]) == 0  # an earlier export: replaced
    assert main(["sweep", "export", str(db), "--csv", str(spec), "--overwrite"]) == 0
    assert spec.read_text().startswith("key,") or "key" in spec.read_text().splitlines()[0].split(",")


@pytest.mark.parametrize("workers", ["0", "257", "100000"])
def test_workers_out_of_range_are_refused(tmp_path, capsys, workers):
    spec = write_spec(tmp_path)
    refused(["sweep", str(spec), "--out", str(tmp_path / "o"), "--workers", workers, "--no-progress"], capsys,
            "--workers must be 1 to 256")
    assert not (tmp_path / "o").exists()


def test_sweep_run_and_export_are_subcommands_with_their_own_help(capsys):
    helps = {}
    for argv in (["sweep", "--help"], ["sweep", "run", "--help"], ["sweep", "export", "--help"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 0
        helps[" ".join(argv[1:-1])] = capsys.readouterr().out
    assert "run" in helps[""] and "export" in helps[""] and "--workers" not in helps[""]
    assert "SPEC.toml" in helps["run"] and "--workers" in helps["run"] and "[grid]" in helps["run"]
    assert "usage: npukit sweep export [-h] [--csv OUT.csv] [--overwrite] DB" in helps["export"]
    assert "--workers" not in helps["export"] and "--out" not in helps["export"]
    from npukit.cli import build_parser

    for argv in (["sweep", "s.toml", "--workers", "1"], ["sweep", "--workers", "1", "s.toml"], ["sweep", "run", "s.toml"]):
        args = build_parser("sweep").parse_args(argv)  # options may come before the spec; run is the default
        assert (args.sweep_command, args.spec, args.func.__name__) == ("run", "s.toml", "run")
    args = build_parser("sweep").parse_args(["sweep", "export", "d.sqlite"])
    assert (args.sweep_command, args.db, args.csv, args.func.__name__) == ("export", "d.sqlite", None, "export")


@pytest.mark.parametrize("argv,needle", [
    (["sweep"], "npukit sweep SPEC.toml"),
    (["sweep", "export"], "DB"),
    (["sweep", "run"], "SPEC.toml"),
    (["sweep", "export", "a.sqlite", "--workers", "2"], "--workers"),
])
def test_sweep_command_line_errors_are_one_line(argv, needle, capsys):
    refused(argv, capsys, needle)


def test_database_of_the_old_cycles_column_is_resumed(tmp_path):
    spec = write_spec(tmp_path, '[sweep]\narch = "npu128"\nworkloads = ["gemm:M=64,N=64,K=64"]\n[grid]\nrows = [8, 16]\n')
    db = tmp_path / "old.sqlite"
    run_sweep(spec, db, workers=1)
    want = {r["key"]: r["total_cycles"] for r in read_rows(db)}
    con = sqlite3.connect(db)
    with con:
        con.execute("ALTER TABLE points RENAME COLUMN total_cycles TO cycles")
        con.execute("DELETE FROM points WHERE rowid = (SELECT min(rowid) FROM points)")
    con.close()
    assert run_sweep(spec, db, workers=1).computed == 1
    assert {r["key"]: r["total_cycles"] for r in read_rows(db)} == want


def test_sweep_path_imports_no_torch_or_dask(tmp_path):
    spec = write_spec(tmp_path)
    code = (
        "import sys; from npukit.cli import main; import npukit.sim, npukit.sweeps, npukit._cli_sweep\n"
        f"rc = main(['sweep', {str(spec)!r}, '--out', {str(tmp_path / 'o')!r}, '--workers', '1', '--no-progress'])\n"
        "heavy = [m for m in ('torch', 'triton', 'dask', 'distributed') if m in sys.modules]\n"
        "assert rc == 0 and not heavy, (rc, heavy)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "o" / "sweep.sqlite").is_file()


# ------------------------------------------------------------------------------ crash safety
BIG = """
[sweep]
name = "big"
arch = "npu128"
workloads = ["resnet18", "minilm-l6"]
[grid]
rows = [32, 64, 128, 256]
cols = [32, 64, 128, 256]
dataflow = ["ws", "os", "is"]
"bits.psum_buffer" = [8, 16, 32]
"sram_kib.psum" = [256, 1024, 4096]
"""


def wait_for_points(proc: subprocess.Popen, db: Path, n: int, timeout: float) -> int:
    """Poll the sweep database until it holds ``n`` points, ``proc`` exits or ``timeout`` s pass; the last count."""
    deadline = time.monotonic() + timeout
    got = 0
    while time.monotonic() < deadline and proc.poll() is None:
        if db.exists():
            try:
                con = sqlite3.connect(db, timeout=5)
                got = con.execute("SELECT count(*) FROM points").fetchone()[0]
                con.close()
            except sqlite3.OperationalError:
                got = 0  # table not created yet
            if got >= n:
                break
        time.sleep(0.01)
    return got


@contextlib.contextmanager
def killed_midway(cmd: list[str], db: Path, n: int, timeout: float) -> Iterator[subprocess.Popen]:
    """Start the sweep command ``cmd`` in a session of its own, SIGKILL it once ``db`` holds ``n`` points (or
    ``timeout`` s passed) and yield the dead process; afterwards whatever is left of its session is killed."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        wait_for_points(proc, db, n, timeout=timeout)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        assert proc.returncode == -signal.SIGKILL, proc.stderr.read() if proc.stderr else ""
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        try:  # a pool's workers, if any outlived their parent
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if proc.stderr:
            proc.stderr.close()


def kept_keys(db: Path) -> set[str]:
    """The keys in a killed sweep's database, after checking that it is intact and has no NULL column."""
    con = sqlite3.connect(db)
    try:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert null_count(con) == 0
        return {r[0] for r in con.execute("SELECT key FROM points")}
    finally:
        con.close()


def live_in_session(sid: int) -> list[int]:
    """Pids of live (not zombie) processes of session ``sid`` (Linux /proc)."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[3]) == sid and fields[0] != "Z":
                out.append(int(d.name))
    return out


@pytest.mark.slow
def test_kill_9_mid_sweep_then_resume(tmp_path):
    spec = write_spec(tmp_path, BIG)
    expected = {p.key for p in expand_points(load_sweep_spec(spec))}
    db = tmp_path / "out" / "sweep.sqlite"
    cmd = [sys.executable, "-m", "npukit", "sweep", str(spec), "--out", str(tmp_path / "out"), "--workers", "2", "--no-progress"]
    with killed_midway(cmd, db, 40, timeout=30) as proc:
        if Path("/proc/self/stat").exists():  # the orphaned pool workers notice and exit by themselves
            deadline = time.monotonic() + 5
            while live_in_session(proc.pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert live_in_session(proc.pid) == []
    kept = kept_keys(db)
    assert 40 <= len(kept) < len(expected) and kept <= expected
    summary = run_sweep(spec, db, workers=2)
    assert (summary.present, summary.computed) == (len(kept), len(expected) - len(kept))
    con = sqlite3.connect(db)
    keys = [r[0] for r in con.execute("SELECT key FROM points")]
    assert null_count(con) == 0 and con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()
    assert len(keys) == len(set(keys)) == len(expected) and set(keys) == expected


def test_new_npukit_version_recomputes_and_never_mixes_rows(tmp_path, monkeypatch):
    spec = write_spec(tmp_path)
    db = tmp_path / "s.sqlite"
    old = run_sweep(spec, db, workers=1)
    monkeypatch.setattr("npukit.sweeps._spec.__version__", "9.9.9")
    new = run_sweep(spec, db, workers=1)
    assert (new.computed, new.present) == (72, 0)  # old rows are not reused under another version
    assert not set(old.keys) & set(new.keys)
    rows = read_rows(db)
    from npukit import __version__

    assert len(rows) == 144 and {r["npukit_version"] for r in rows} == {__version__, "9.9.9"}
    assert {r["npukit_version"] for r in read_rows(db, new.keys)} == {"9.9.9"}  # what the CLI exports for this run


def test_macs_beyond_64_bits_are_stored(tmp_path, capsys):
    # a 2^21-cubed GEMM has 2^63 MACs: SQLite's INTEGER overflowed and the batch's points were lost
    spec = write_spec(tmp_path, '[sweep]\nname = "big"\narch = "npu128"\n'
                                'workloads = ["gemm:M=2097152,N=2097152,K=2097152", "gemm:M=64,N=64,K=64"]\n')
    out = tmp_path / "o"
    assert main(["sweep", str(spec), "--out", str(out), "--workers", "1", "--no-progress"]) == 0
    rows = {r["workload"]: r for r in read_rows(out / "sweep.sqlite")}
    assert float(rows["gemm:M=2097152,N=2097152,K=2097152"]["macs"]) == 2.0**63
    assert int(rows["gemm:M=64,N=64,K=64"]["macs"]) == 64**3


def test_a_run_that_fails_before_any_point_leaves_nothing(tmp_path, capsys):
    # the model refuses the first point (its cycles overflow): before, an empty database was left behind
    spec = write_spec(tmp_path, '[sweep]\nname = "bad"\narch = "hetero4"\nworkloads = ["llama3-8b-layer:seq=32"]\n'
                                '[grid]\n"interconnect.bandwidth_bytes_per_cycle" = [1e-300]\n')
    out = tmp_path / "o"
    refused(["sweep", str(spec), "--out", str(out), "--workers", "1", "--no-progress"], capsys, "overflow")
    assert not out.exists()


def test_the_default_pool_is_at_most_max_workers(monkeypatch):
    from npukit.sweeps import MAX_WORKERS, local_executor

    monkeypatch.setattr(os, "cpu_count", lambda: 384)  # before, the default refused itself on such a host
    ex = local_executor(None)
    try:
        assert ex.workers == MAX_WORKERS
    finally:
        ex.close()
