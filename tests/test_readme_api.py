"""The README's Python API block runs as written, and prints what the result says (not a copy of it)."""

from __future__ import annotations

import contextlib
import io
import re
import warnings
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
MARK = "<!-- api-example -->\n```python\n"


def api_blocks() -> list[str]:
    """Every ```python block right after an ``<!-- api-example -->`` marker in the README."""
    text = README.read_text(encoding="utf-8")
    return [part.split("```", 1)[0] for part in text.split(MARK)[1:]]


def test_readme_has_an_api_block() -> None:
    blocks = api_blocks()
    assert blocks, "README.md lost its <!-- api-example --> python block"
    assert all(word in blocks[0] for word in ("simulate(", "energy_by_component()", "run_sweep(", "write_report("))


@pytest.mark.slow  # ~7 s: a sweep of 4 points and a report with figures
def test_readme_api_block_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    ns: dict = {}
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # the README uses no deprecated spelling
        for block in api_blocks():
            exec(compile(block, str(README), "exec"), ns)
    printed = buf.getvalue().splitlines()
    res = ns["res"]
    first = printed[0].split()
    assert int(first[0]) == res.total_cycles and float(first[2]) == pytest.approx(res.energy_pj)
    assert float(first[3]) == res.dram_bytes > 0
    assert re.fullmatch(r"[\d.]+% of compute cycles, [\d.]+% of all cycles", printed[1])
    assert res.utilization_all_cycles <= res.utilization  # stalls only add cycles
    rows = [line.split() for line in printed if re.fullmatch(r"(16|32) (8|32) [\d.e+]+ \d+", line)]
    assert len(rows) == 4
    e = {(int(r[0]), int(r[1])): float(r[2]) for r in rows}
    assert e[(32, 8)] < e[(32, 32)] and e[(16, 8)] < e[(16, 32)]  # narrower psums cost less energy
    assert Path(printed[-1]).is_file() and (tmp_path / "out/api/sweep.sqlite").is_file()


def test_result_totals_are_properties_and_the_old_calls_warn() -> None:
    from npukit.sim import load_arch, simulate
    from npukit.workloads import load_workload

    res = simulate(load_workload("gemm:M=64,N=64,K=256"), load_arch("npu32"))
    assert res.energy_pj == pytest.approx(sum(res.energy_by_component().values()))
    assert res.energy_onchip_pj == pytest.approx(res.energy_pj - res.energy_by_component()["dram"])
    assert res.latency_s == res.total_cycles / 1e9
    assert res.layers[0].energy_total_pj == pytest.approx(res.energy_pj)
    for old in ("energy_pj", "energy_onchip_pj", "latency_s"):
        with pytest.warns(DeprecationWarning, match=rf"'{old}\(\)' is deprecated, use '{old}'"):
            assert getattr(res, old)() == getattr(res, old)
    with pytest.warns(DeprecationWarning):
        assert res.layers[0].energy_total_pj() == res.layers[0].energy_total_pj
