"""``npukit report`` on multi-core ledgers whose ``meta.multicore`` was edited: each broken field is one line, exit 2,
nothing written (it used to crash, hang on a million core names, or write nan into report.md); and the report
verb's own --out and --overwrite rules."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
from _cli_util import refused

from npukit.cli import main
from npukit.sim import LedgerError
from npukit.sim.multicore import load_multicore_arch
from npukit.sim.multicore_meta import check_multicore_meta
from npukit.sim.multicore_sim import simulate_multicore
from npukit.sim.workload import Layer, Workload


@pytest.fixture(scope="module")
def ledger_json() -> dict:
    wl = Workload("w", [Layer("up", 64, 128, 64), Layer("down", 64, 64, 128)])
    return json.loads(simulate_multicore(wl, load_multicore_arch("quad128")).ledger.to_json())


def _edit(data: dict, path: str, value: object) -> dict:
    out = copy.deepcopy(data)
    node = out["meta"]["multicore"]
    keys = path.split(".")
    for k in keys[:-1]:
        node = node[int(k)] if isinstance(node, list) else node[k]
    last = keys[-1]
    if value is KeyError:
        del node[last]
    elif isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return out


CASES = [
    ("core_busy_cycles", "x", "core_busy_cycles must be a list"),
    ("core_busy_cycles.0", "x", "core_busy_cycles[0] must be a finite number"),
    ("core_busy_cycles.0", float("nan"), "core_busy_cycles[0] must be a finite number"),
    ("core_busy_cycles.0", -1, "must be a finite number"),
    ("core_busy_cycles.0", 10**400, "must be a finite number"),
    ("core_busy_cycles", [1.0], "must agree"),
    ("interconnect_bytes", "1e6", "interconnect_bytes must be"),
    ("interconnect_exposed_cycles", None, "interconnect_exposed_cycles must be"),
    ("core_names", ["c"] * 1_000_000, "at most 1,024 entries"),  # it hung drawing a million y ticks
    ("core_names.0", ["x"], "core_names[0] must be a string"),
    ("core_names.0", "a" * 100_000, "at most 65536 characters"),
    ("timeline", {}, "timeline must be a list"),
    ("timeline.0", [0, 1, 2], "must be [core, start, end, name]"),
    ("timeline.0.0", 10**9, "is not one of the 4 cores"),
    ("timeline.0.0", True, "is not one of the 4 cores"),
    ("timeline.0.2", 1e12, "is not within"),
    ("timeline.0.1", float("inf"), "start must be"),
    ("arch", "quad128", "arch must be a table"),
    ("arch.cores", [1, 2], "arch.cores must be tables"),
    ("arch.cores.0.pes", -1, "arch.cores[0].pes must be a finite number"),
    ("arch.dram.channels", "4", "arch.dram.channels must be a finite number"),
    ("schedule", 123, "schedule must be a string"),
    ("schedule", "\ud800", "unpaired surrogate"),
    ("foo", 1, "unknown key"),
    ("core_busy_cycles", KeyError, "lacks 'core_busy_cycles'"),
]


@pytest.mark.parametrize("path, value, needle", CASES)
def test_a_broken_multicore_meta_is_refused_with_one_line(tmp_path, capsys, ledger_json, path, value, needle) -> None:
    p = tmp_path / "x.ledger.json"
    p.write_text(json.dumps(_edit(ledger_json, path, value)))
    out = tmp_path / "out"
    refused(["report", str(p), "--out", str(out)], capsys, needle)
    assert not out.exists()


def test_a_multicore_ledger_that_is_not_a_table_is_refused(ledger_json) -> None:
    with pytest.raises(LedgerError, match="must be a table"):
        check_multicore_meta([1, 2], 10.0, "x")
    assert check_multicore_meta(None, 10.0, "x") is None  # a single-core ledger


@pytest.mark.slow
def test_the_valid_ledger_reports_with_finite_numbers_and_refuses_a_second_run(tmp_path, capsys, ledger_json) -> None:
    p = tmp_path / "x.ledger.json"
    p.write_text(json.dumps(ledger_json))
    out = tmp_path / "out"
    assert main(["report", str(p), "--out", str(out)]) == 0
    md = (out / "report.md").read_text()
    assert "Per-core busy cycles: core0" in md and not re.search(r"\b(nan|inf)\b", md)
    assert (out / "timeline_1.png").stat().st_size > 0
    capsys.readouterr()
    before = md
    refused(["report", str(p), "--out", str(out)], capsys, "already holds a report")
    assert (out / "report.md").read_text() == before
    assert main(["report", str(p), "--out", str(out), "--overwrite"]) == 0


def test_a_dotdot_out_creates_nothing_stray(tmp_path, ledger_json) -> None:
    p = tmp_path / "x.ledger.json"
    p.write_text(json.dumps(ledger_json))
    (tmp_path / "outs").mkdir()
    dotdot = tmp_path / "outs" / "x" / ".." / ".." / "elsewhere"
    assert main(["report", str(p), "--out", str(dotdot)]) == 0
    assert (tmp_path / "elsewhere" / "report.md").is_file()
    assert not (tmp_path / "outs" / "x").exists()  # mkdir(parents=True) used to create it on the way
    assert Path(tmp_path / "outs").is_dir()
