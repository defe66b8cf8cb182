"""The datapath vocabulary (npukit.sim.datapath): the old width names still work as deprecated aliases with
one warning, and widths that contradict each other are refused with one line."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from npukit.cli import main
from npukit.models.psumquant import PsumQuantConfig, PsumQuantError
from npukit.rtl import RtlConfig
from npukit.sim import ConfigError, load_arch
from npukit.sim.arch import Bits
from npukit.sim.cycle import run_gemm


def _one_deprecation(fn, old: str, new: str):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn()
    dep = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    assert len(dep) == 1 and f"'{old}' is deprecated, use '{new}'" in str(dep[0].message)
    assert len(str(dep[0].message).splitlines()) == 1
    return out


def test_arch_toml_and_overrides_accept_the_old_width_names(tmp_path: Path) -> None:
    p = tmp_path / "old.toml"
    p.write_text("[bits]\npsum = 16\naccumulator = 24\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        a = load_arch(p)
    assert sorted(str(w.message).split(": ")[-1] for w in caught) == [
        "'accumulator' is deprecated, use 'pe_psum'", "'psum' is deprecated, use 'psum_buffer'"]
    assert (a.bits.psum_buffer, a.bits.pe_psum) == (16, 24)
    base = load_arch("npu128")
    b = _one_deprecation(lambda: base.with_(**{"bits.psum": 8}), "psum", "psum_buffer")
    assert b == base.with_(**{"bits.psum_buffer": 8})
    bits = _one_deprecation(lambda: Bits(accumulator=16, psum_buffer=16), "accumulator", "pe_psum")
    assert bits == Bits(pe_psum=16, psum_buffer=16)
    with pytest.raises(ConfigError, match="pass 'psum_buffer' only"):
        base.with_(**{"bits.psum": 8, "bits.psum_buffer": 8})


def test_gemm_rtl_and_psumquant_keywords() -> None:
    a = np.ones((4, 8), int)
    old = _one_deprecation(lambda: run_gemm(a, a.T, 2, 2, psum_bits=16), "psum_bits", "pe_psum_bits")
    np.testing.assert_array_equal(old.out, run_gemm(a, a.T, 2, 2, pe_psum_bits=16).out)
    cfg = _one_deprecation(lambda: RtlConfig(acc_bits=16), "acc_bits", "psum_buffer_bits")
    assert cfg == RtlConfig(psum_buffer_bits=16) and cfg.psum_buffer_width == 16
    q = _one_deprecation(lambda: PsumQuantConfig(bits=6), "bits", "psum_buffer_bits")
    assert q == PsumQuantConfig(psum_buffer_bits=6)
    assert _one_deprecation(lambda: PsumQuantConfig(acc_bits=32), "acc_bits", "pe_psum_bits") == PsumQuantConfig()
    with pytest.raises(PsumQuantError, match="acc_bits = 24 differs from pe_psum_bits"):
        PsumQuantConfig(acc_bits=24)


def test_width_rule() -> None:
    a = np.ones((4, 8), int)
    # a buffer may grow by the bits of a sum of K-folds: 8 / 2 rows = 4 folds -> 2 bits, not 3
    assert run_gemm(a, a.T, 2, 2, pe_psum_bits=16, psum_buffer_bits=18).out[0, 0] == 8
    with pytest.raises(ConfigError, match="psum_buffer_bits = 19 bits is wider than pe_psum_bits = 16"):
        run_gemm(a, a.T, 2, 2, pe_psum_bits=16, psum_buffer_bits=19)
    with pytest.raises(ConfigError, match="running psums never exceed"):
        run_gemm(a, a.T, 2, 2, "os", pe_psum_bits=16, psum_buffer_bits=17)
    with pytest.raises(ConfigError, match="bits.psum_buffer = 64 bits is wider than bits.pe_psum = 32"):
        load_arch("npu128").with_(**{"bits.psum_buffer": 64})
    with pytest.raises(ConfigError, match="psum_buffer_bits = 40"):
        RtlConfig(rows=4, max_k=16, pe_psum_bits=32, psum_buffer_bits=40)  # 4 folds: at most 34
    with pytest.raises(PsumQuantError, match="psum_buffer_bits = 20 bits is wider than pe_psum_bits = 16"):
        PsumQuantConfig(psum_buffer_bits=20, pe_psum_bits=16)


def test_cli_old_flag_warns_once_and_wide_buffer_exits_2(tmp_path: Path, capsys) -> None:
    out = tmp_path / "o"
    argv = ["sim", "--workload", "gemm:M=8,N=8,K=256", "--quiet", "--out", str(out)]
    assert main([*argv, "--psum-bits", "8"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["npukit sim: warning: --psum-bits is deprecated, use --psum-buffer-bits"]
    assert (out / "gemm8x8x256_npu128_ws_psum8.csv").is_file()
    old = tmp_path / "old.toml"
    old.write_text("[bits]\npsum = 8\n")
    assert main([*argv[:-2], "--arch", str(old), "--out", str(tmp_path / "o2")]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("npukit sim: warning: ") and "'psum' is deprecated, use 'psum_buffer'" in err[0]
    bad = tmp_path / "bad"
    assert main(["sim", "--workload", "gemm:M=8,N=8,K=256", "--psum-buffer-bits", "64", "--out", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bits.psum_buffer = 64 bits is wider than bits.pe_psum = 32" in err[0]
    assert not bad.exists()
    assert main(["rtl", "stats", "--pe-psum-bits", "16", "--psum-buffer-bits", "30"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "psum_buffer_bits = 30" in err[0]


def test_flag_aliases_are_per_verb() -> None:
    from npukit.sim.datapath import rename_flags

    lines: list[str] = []
    assert rename_flags(["--bits=8,4", "--quick"], "experiment", lines.append) == ["--psum-buffer-bits=8,4", "--quick"]
    assert rename_flags(["--psum-bits", "16", "--acc-bits", "20"], "rtl", lines.append) == [
        "--pe-psum-bits", "16", "--psum-buffer-bits", "20"]
    assert rename_flags(["--psum-bits", "8"], "sim", lines.append) == ["--psum-buffer-bits", "8"]
    assert rename_flags(["--bits", "8"], "sim", lines.append) == ["--bits", "8"]  # not a sim flag: argparse refuses it
    assert len(lines) == 4 and all(line.startswith("warning: --") and "is deprecated, use --" in line for line in lines)
