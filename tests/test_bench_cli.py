"""``npukit bench``: every benchmarks/bench_*.py listed with its description, any run by name under a fresh
--out; and the shared repeat/spread code (benchmarks/_timing.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

import npukit._cli_bench as cli_bench
from npukit.benchmarks._timing import WIDE_SPREAD, measure, ratio_interval, spread, wide_warnings
from npukit.cli import main

ROOT = Path(__file__).resolve().parent.parent


def test_list_shows_every_bench_script_with_its_description(capsys) -> None:
    assert main(["bench"]) == 0
    text = capsys.readouterr().out
    names = {p.stem[len("bench_"):] for p in (ROOT / "benchmarks").glob("bench_*.py")}
    assert len(names) >= 15
    listed = {ln.split()[0] for ln in text.splitlines()[1:] if ln.strip() and not ln[0].isspace()}
    assert names <= listed, names - listed
    assert "omnimoe" in listed
    benches = cli_bench.discover()
    for name in names:
        assert benches[name].description != "(no description)"
        assert f"{name.ljust(4)}" in text and benches[name].description in text


SCRIPT = '''"""Fake benchmark: writes its arguments.

More text.
"""
import argparse, pathlib, sys
ap = argparse.ArgumentParser(description="fake")
ap.add_argument("--out", required=True)
ap.add_argument("--n", type=int, default=1)
a = ap.parse_args()
p = pathlib.Path(a.out); p.mkdir(parents=True, exist_ok=True)
(p / "fake.csv").write_text(f"n\\n{a.n}\\n")
print(f"wrote {p / 'fake.csv'}")
'''


@pytest.fixture
def fake_benches(tmp_path, monkeypatch):
    folder = tmp_path / "benches"
    folder.mkdir()
    (folder / "bench_fake.py").write_text(SCRIPT)
    (folder / "_private.py").write_text('"""not a benchmark"""\n')
    (folder / "helper.py").write_text('"""a helper without run/add_arguments"""\ndef f():\n    pass\n')
    real = cli_bench.discover
    monkeypatch.setattr(cli_bench, "discover", lambda folder_=None: real(folder))
    monkeypatch.chdir(tmp_path)
    return folder


def test_discovery_reads_docstrings_without_importing(fake_benches) -> None:
    b = cli_bench.discover()
    assert list(b) == ["fake"] and b["fake"].description == "Fake benchmark: writes its arguments."
    assert not b["fake"].in_process


def test_run_by_name_fresh_out_refuses_a_used_one(fake_benches, tmp_path, capsys) -> None:
    assert main(["bench", "fake", "--n", "7"]) == 0
    first = tmp_path / "out" / "bench" / "fake" / "fake.csv"
    assert first.read_text() == "n\n7\n"
    assert main(["bench", "fake", "--n", "8"]) == 0  # the default folder is taken: a fresh -2, nothing overwritten
    assert first.read_text() == "n\n7\n"
    assert (tmp_path / "out" / "bench" / "fake-2" / "fake.csv").read_text() == "n\n8\n"
    capsys.readouterr()
    used = tmp_path / "out" / "bench" / "fake"
    assert main(["bench", "fake", "--out", str(used), "--n", "9"]) == 2
    err = capsys.readouterr().err
    assert "already holds files" in err and len(err.strip().splitlines()) == 1
    assert first.read_text() == "n\n7\n"
    assert main(["bench", "fake", f"--out={used}", "--overwrite", "--n", "9"]) == 0
    assert first.read_text() == "n\n9\n"


def test_script_help_passes_through(fake_benches, capfd) -> None:
    assert main(["bench", "fake", "--help"]) == 0
    assert "--n N" in capfd.readouterr().out


def test_spread_and_its_flag() -> None:
    s = spread([3.0, 1.0, 2.0])
    assert (s.n, s.min, s.median, s.max, s.ratio) == (3, 1.0, 2.0, 3.0, 3.0)
    assert s.wide and s.columns()["spread_flag"] == "WIDE"
    t = spread([1.0, 1.5, 1.9])
    assert not t.wide and t.columns("x_")["x_spread_flag"] == ""
    assert spread([0.0, 0.0]).ratio == 1.0 and spread([0.0, 1.0]).wide
    with pytest.raises(ValueError):
        spread([])
    rows = [dict(name="a", **s.columns()), dict(name="b", **t.columns())]
    warn = wide_warnings(rows, lambda r: r["name"])
    assert len(warn) == 1 and warn[0].startswith("warning: a: spread max/min 3.0x over 3 repeats")
    assert f"> {WIDE_SPREAD:g}x" in warn[0]
    assert ratio_interval(spread([4.0, 6.0, 8.0]), spread([1.0, 2.0])) == (6.0 / 1.5, 2.0, 8.0)


def test_measure_warms_up_blocks_short_calls_and_counts_samples() -> None:
    calls = []
    s = measure(lambda: calls.append(1), repeats=4, warmup=2, min_block_s=0.001)
    assert s.n == 4 and 0 < s.min <= s.median <= s.max
    assert len(calls) > 2 + 4  # short calls are timed in blocks, not one by one
    slow = []
    s = measure(lambda: slow.append(1), repeats=3, warmup=1, min_block_s=0.0)
    assert s.n == 3 and len(slow) == 1 + 3  # the warm-up is never a sample; no blocks when min_block_s is 0
    with pytest.raises(ValueError):
        measure(lambda: None, repeats=0)

