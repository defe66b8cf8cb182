"""Size limits and output paths of ``npukit rtl`` and of the cycle-level model, checked before any work.

Every class of bad size (a GEMM dimension, an array, a bit width, the quantizer sample count, an
operand buffer) and of bad output path (empty, a file where a folder belongs, a folder where a file
belongs, a path under a file, an unwritable place) is refused with one line and exit code 2 before
anything is allocated, built or written; the API raises ConfigError. None of this needs Icarus: the
work functions are replaced by ones that fail the test if they are reached.
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from _cli_util import refused

from npukit.cli import main
from npukit.rtl._config import MAX_BUFFER_WORDS, MAX_GEMM_DIM, MAX_PES, MAX_QUANT_SAMPLES, RtlConfig
from npukit.sim import ConfigError, cycle, run_gemm

README = Path(__file__).resolve().parents[1] / "README.md"


@pytest.fixture
def no_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make reaching any allocation, build or analysis an immediate test failure."""
    import npukit.rtl._cases as cases
    import npukit.rtl._runner as runner
    import npukit.rtl._stats as stats

    def reached(*_a, **_k):
        pytest.fail("validation let the command reach its work")

    for mod, name in ((cases, "standard_cases"), (runner, "run_gemm_suite"), (runner, "run_quant_suite"),
                      (stats, "rtl_stats"), (runner, "build")):
        monkeypatch.setattr(mod, name, reached)




# ------------------------------------------------------------------------------------------ sizes
HUGE = [
    (["test", "--k", "100000000"], "GEMM K"),
    (["test", "--m", str(MAX_GEMM_DIM + 1)], "GEMM M"),
    (["test", "--n", "10000000000"], "GEMM N"),
    (["test", "--rows", "1", "--cols", "1", "--m", str(MAX_GEMM_DIM), "--k", str(MAX_GEMM_DIM)], "operand buffers"),
    (["test", "--rows", "100000", "--cols", "100000"], "PEs"),
    (["test", "--rows", "1", "--cols", str(MAX_PES + 1)], "PEs"),
    (["test", "--pe-psum-bits", "1000000"], "pe_psum_bits"),
    (["test", "--psum-buffer-bits", "63"], "psum_buffer_bits"),
    (["test", "--data-bits", "64"], "data_bits"),
    (["test", "--quant-samples", "1000000000000"], "--quant-samples"),
    (["test", "--quant-samples", "-1"], "--quant-samples"),
    (["test", "--seed", "-1"], "--seed"),
    (["stats", "--max-k", "100000000"], "GEMM K"),
    (["stats", "--max-m", str(MAX_GEMM_DIM + 1)], "GEMM M"),
    (["stats", "--rows", "1", "--cols", "1", "--max-n", str(MAX_GEMM_DIM), "--max-k", str(MAX_GEMM_DIM)],
     "operand buffers"),
    (["stats", "--pe-psum-bits", "100"], "pe_psum_bits"),
]


@pytest.mark.parametrize("args,needle", HUGE, ids=[" ".join(a) for a, _ in HUGE])
def test_cli_refuses_sizes_past_the_limits_before_any_work(args, needle, tmp_path, capsys, no_work) -> None:
    build = tmp_path / "build"
    extra = ["--build-dir", str(build)] if args[0] == "test" else ["--json", str(tmp_path / "s.json")]
    refused(["rtl", *args, *extra], capsys, needle)
    assert list(tmp_path.iterdir()) == []


def test_config_limits_are_typed_and_exact() -> None:
    """Each limit is a boundary: its value is accepted, one more is refused with ConfigError."""
    RtlConfig(rows=8, cols=8, max_m=MAX_GEMM_DIM, max_n=MAX_GEMM_DIM, max_k=8)
    for kw in ({"max_m": MAX_GEMM_DIM + 1}, {"max_n": MAX_GEMM_DIM + 1}, {"max_k": MAX_GEMM_DIM + 1},
               {"rows": 128, "cols": 129}, {"pe_psum_bits": 63}, {"data_bits": 17}, {"data_bits": "8"},
               {"rows": True}, {"mult_bits": 1}):
        with pytest.raises(ConfigError):
            RtlConfig(**kw)
    # ws A buffer: ceil(K/R) * M words; exactly the limit is accepted, one fold more is refused
    m = MAX_BUFFER_WORDS // 64
    cfg = RtlConfig(rows=1, cols=128, max_m=m, max_n=4, max_k=64)
    assert max(cfg.buffer_words(cfg.max_m, cfg.max_n, cfg.max_k)) == MAX_BUFFER_WORDS
    assert cfg.parameters()["A_AW"] <= MAX_BUFFER_WORDS.bit_length() - 1
    with pytest.raises(ConfigError, match="operand buffers"):
        RtlConfig(rows=1, cols=128, max_m=m, max_n=4, max_k=65)


def test_quant_suite_api_refuses_huge_sample_counts(tmp_path) -> None:
    from npukit.rtl._runner import run_quant_suite

    for n, lanes in ((MAX_QUANT_SAMPLES + 1, 32), (0, 32), (10, 0), (10, 10**6)):
        with pytest.raises(ConfigError):
            run_quant_suite(32, 32, n, 0, tmp_path, lanes=lanes)
    assert list(tmp_path.iterdir()) == []


def test_limits_are_documented_in_help_and_readme(capsys) -> None:
    readme = README.read_text()
    for verb in ("test", "stats"):
        with pytest.raises(SystemExit):
            main(["rtl", verb, "--help"])
        text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
        assert f"{MAX_GEMM_DIM:,}" in text and f"{MAX_PES:,}" in text and f"{MAX_BUFFER_WORDS:,}" in text, text
    assert "### Input limits" in readme
    for value in (MAX_PES, MAX_GEMM_DIM, MAX_BUFFER_WORDS, MAX_QUANT_SAMPLES, cycle.MAX_PES, cycle.MAX_WORDS):
        assert f"{value:,}" in readme, value


# ------------------------------------------------------------------------------------------ paths
def _paths(tmp_path: Path) -> dict[str, str]:
    f = tmp_path / "a_file"
    f.write_text("x")
    d = tmp_path / "a_folder"
    d.mkdir()
    return {"empty": "", "blank": "  ", "file": str(f), "under_file": str(f / "sub"), "proc": "/proc/npukit-x",
            "folder": str(d)}


@pytest.mark.parametrize("kind", ["empty", "blank", "file", "under_file", "proc"])
def test_rtl_test_build_dir_refused_before_any_work(kind, tmp_path, capsys, no_work, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # an empty path must not mean the current folder
    paths = _paths(tmp_path)
    before = sorted(tmp_path.rglob("*"))
    refused(["rtl", "test", "--build-dir", paths[kind]], capsys, "--build-dir")
    assert sorted(tmp_path.rglob("*")) == before


@pytest.mark.parametrize("kind", ["empty", "blank", "folder", "under_file", "proc"])
def test_rtl_stats_json_refused_before_any_work(kind, tmp_path, capsys, no_work, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    paths = _paths(tmp_path)
    before = sorted(tmp_path.rglob("*"))
    err = refused(["rtl", "stats", "--json", paths[kind]], capsys, "--json")
    if kind == "folder":
        assert "is a folder" in err
    assert sorted(tmp_path.rglob("*")) == before


# ------------------------------------------------------------------------------------------ cycle model
def test_cycle_model_refuses_sizes_before_allocating() -> None:
    a, b = np.ones((256, 4096), np.int8), np.ones((4096, 256), np.int8)  # F*M*C = 4096*256*256 words at 1x1
    cases = [
        ((a, b, 1 << 20, 1 << 20), {}, "PEs"),
        ((a, b, cycle.MAX_PES + 1, 1), {}, "PEs"),
        ((np.ones((1 << 14, 1), np.int8), np.ones((1, 1 << 14), np.int8), 4, 4), {}, "outputs"),
        ((a, b, 1, 1), {"return_fold_psums": True}, "fold psums"),
        ((a, b, 1, 1), {"return_fold_psums": True, "dataflow": "is"}, "fold psums"),
    ]
    for args, kw, needle in cases:
        tracemalloc.start()
        try:
            with pytest.raises(ConfigError, match=needle):
                run_gemm(*args, **kw)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 64 << 20, f"{needle}: {peak:,} bytes allocated before the refusal"


def test_cycle_model_runs_at_its_limits_boundary() -> None:
    """A GEMM whose fold psums are just under MAX_WORDS is not refused by the size check (it is small
    enough here because the check counts words, and the limit is patched down to this case)."""
    a = np.arange(12, dtype=np.int64).reshape(3, 4) % 5 - 2
    b = np.arange(20, dtype=np.int64).reshape(4, 5) % 7 - 3
    words = -(-4 // 2) * -(-5 // 2) * 3 * 2  # ws: F x M x C
    old = cycle.MAX_WORDS
    try:
        cycle.MAX_WORDS = words
        res = run_gemm(a, b, 2, 2, return_fold_psums=True)
        assert (res.out == a @ b).all()
        cycle.MAX_WORDS = words - 1
        with pytest.raises(ConfigError, match="fold psums"):
            run_gemm(a, b, 2, 2, return_fold_psums=True)
    finally:
        cycle.MAX_WORDS = old
