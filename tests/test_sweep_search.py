"""``npukit sweep --search``: derived keys, seeded reproducibility, kill -9 and resume without losing trials."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _cli_util import refused

from npukit.cli import main
from npukit.sim.errors import ConfigError
from npukit.sweeps import expand_points, load_sweep_spec
from npukit.sweeps._expr import compile_expr, evaluate
from npukit.sweeps.search import run_search

SPEC = """
[sweep]
arch = "npu32"
workloads = ["gemm:M=128,N=96,K=64"]
[grid]
rows = [8, 16, 32, 64]
dataflow = ["ws", "os", "is"]
"sram_kib.ifmap" = [64, 128, 256]
"bits.psum_buffer" = [16, 32]
[derived]
cols = "rows"
"sram_kib.filter" = "sram_kib.ifmap"
"sram_kib.psum" = "max(32, sram_kib_ifmap / 2)"
"""


def write(tmp_path: Path, text: str = SPEC) -> Path:
    p = tmp_path / "s.toml"
    p.write_text(text)
    return p


def test_derived_keys_follow_the_grid(tmp_path):
    pts = expand_points(load_sweep_spec(write(tmp_path)))
    assert len(pts) == 4 * 3 * 3 * 2
    for p in pts:
        a = p.arch
        assert a.cols == a.rows and a.sram_kib.filter == a.sram_kib.ifmap
        assert a.sram_kib.psum == max(32, a.sram_kib.ifmap / 2)


@pytest.mark.parametrize("expr, value", [("rows * 2 + 1", 129), ("2 ** 3", 8), ("max(1, rows // 3)", 21),
                                         ("-rows + 1.5 * 2", -61), ("ceil(log2(rows))", 6), ("'os'", "os")])
def test_expression_values(expr, value):
    assert evaluate(compile_expr(expr, "x"), {"rows": 64}, "x") == value


@pytest.mark.parametrize("expr, words", [
    ("__import__('os')", "not allowed"), ("rows.__class__", "unknown key"), ("[1, 2]", "not allowed"),
    ("rows if 1 else 2", "not allowed"), ("lambda: 1", "not allowed"), ("2 ** 1000", "out of range"),
    ("1 / 0", "division by zero"), ("nope + 1", "unknown key"), ("rows +", "not a valid expression"),
    ("x" * 300, "longer than"), ("+".join(["1"] * 80), "more than"), ("1e308 * 10", "not finite"),
])
def test_bad_expressions_are_config_errors(expr, words):
    with pytest.raises(ConfigError, match=words):
        evaluate(compile_expr(expr, "derived 'cols'"), {"rows": 64}, "derived 'cols'")


def test_cli_bad_derived_exits_2_one_line_nothing_written(tmp_path, capsys):
    spec = write(tmp_path, SPEC.replace('cols = "rows"', 'cols = "open(1)"'))
    refused(["sweep", str(spec), "--out", str(tmp_path / "out"), "--workers", "1"], capsys, "derived 'cols'", "not allowed")
    assert not (tmp_path / "out").exists()
    spec = write(tmp_path, SPEC.replace('cols = "rows"', 'rows = "cols"'))
    refused(["sweep", str(spec), "--out", str(tmp_path / "out"), "--workers", "1"], capsys, "both in [grid] and in [derived]")
    refused(["sweep", str(write(tmp_path)), "--out", str(tmp_path / "out"), "--search", "nsga2", "--objectives", "energy,power"],
            capsys, "--objectives")
    assert not (tmp_path / "out").exists()


def _trials(db: Path) -> list[tuple[int, str, str]]:
    con = sqlite3.connect(db)
    try:
        return con.execute("SELECT t.number, t.state, group_concat(p.param_name || '=' || p.param_value, ' ') "
                           "FROM trials t JOIN trial_params p ON p.trial_id = t.trial_id "
                           "GROUP BY t.trial_id ORDER BY t.number").fetchall()
    finally:
        con.close()


@pytest.mark.slow
def test_search_is_seeded_and_reproducible(tmp_path):
    spec = load_sweep_spec(write(tmp_path))
    a = run_search(spec, tmp_path / "a.sqlite", "nsga2", budget=24, seed=3, workers=1, batch=4)
    b = run_search(spec, tmp_path / "b.sqlite", "nsga2", budget=24, seed=3, workers=1, batch=4)
    run_search(spec, tmp_path / "c.sqlite", "nsga2", budget=24, seed=4, workers=1, batch=4)
    assert a.trials == b.trials == 24 and a.front == b.front
    assert _trials(tmp_path / "a.sqlite") == _trials(tmp_path / "b.sqlite") != _trials(tmp_path / "c.sqlite")
    again = run_search(spec, tmp_path / "a.sqlite", "nsga2", budget=24, seed=3, workers=1, batch=4)
    assert (again.new, again.points) == (0, 0)  # a finished study is not re-run
    t = run_search(spec, tmp_path / "t.sqlite", "tpe", budget=12, seed=0, workers=1, batch=3, objectives=("edp", "area"))
    assert t.trials == 12 and all(len(v) == 2 for _, v in t.front)


def _complete(db: Path) -> int:
    try:
        con = sqlite3.connect(db, timeout=5)
        n = con.execute("SELECT count(*) FROM trials WHERE state = 'COMPLETE'").fetchone()[0]
        con.close()
        return n
    except sqlite3.OperationalError:
        return 0


@pytest.mark.slow
def test_kill_9_mid_search_then_resume_keeps_every_trial(tmp_path):
    spec = write(tmp_path, SPEC.replace('"gemm:M=128,N=96,K=64"', '"resnet18"'))
    out = tmp_path / "out"
    db = out / "sweep.sqlite"
    cmd = [sys.executable, "-m", "npukit", "sweep", str(spec), "--out", str(out), "--workers", "1", "--no-progress",
           "--search", "tpe", "--budget", "60", "--seed", "1", "--batch", "2"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while _complete(db) < 10 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        assert proc.returncode == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
        if proc.stderr:
            proc.stderr.close()
    before = [t for t in _trials(db) if t[1] == "COMPLETE"]
    assert 10 <= len(before) < 60
    assert main(cmd[3:]) == 0
    after = _trials(db)
    done = [t for t in after if t[1] == "COMPLETE"]
    assert len(done) == 60 and set(before) <= set(done)  # every finished trial kept, with its number and params
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()


@pytest.mark.parametrize("seed", ["-1", "4294967296"])
def test_a_seed_numpy_cannot_take_is_refused_before_anything_is_written(tmp_path, capsys, seed):
    from _cli_util import refused

    spec = tmp_path / "s.toml"
    spec.write_text('[sweep]\nname = "s"\narch = "npu128"\nworkloads = ["gemm:M=64,N=64,K=64"]\n[grid]\nrows = [32, 64]\n')
    refused(["sweep", str(spec), "--out", str(tmp_path / "o"), "--search", "nsga2", "--seed", seed, "--workers", "1",
             "--no-progress"], capsys, "--seed must be an integer from 0 to 4294967295")
    assert not (tmp_path / "o").exists()
