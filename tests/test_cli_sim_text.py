"""What ``npukit sim`` prints explains itself: arch header (widths, SRAM, bandwidth), inherited arch keys,
utilization over compute and over all cycles, DRAM bytes, the mapping legend; widths refused everywhere."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from npukit.cli import main
from npukit.sim import Arch, ConfigError, load_arch, load_arch_source, simulate
from npukit.sim.datapath import Bits
from npukit.sweeps import parse_sweep_spec, run_sweep
from npukit.workloads import load_workload


def _num(text: str) -> float:
    return float(text.replace(",", ""))


def test_header_utilization_dram_and_legend(tmp_path: Path, capsys) -> None:
    argv = ["sim", "--arch", "npu32", "--workload", "llama3-8b-layer:seq=64,phase=decode", "--out", str(tmp_path / "o")]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "array 32x32 PEs" in text and "pe_psum 32 b (in-array accumulator)" in text
    assert "SRAM ifmap 256 KiB, filter 256 KiB, psum 256 KiB, ofmap 128 KiB; DRAM 16 B/cycle = 16 GB/s" in text
    assert "keys not in the file" not in text  # a built-in is complete
    res = simulate(load_workload("llama3-8b-layer:seq=64,phase=decode"), load_arch("npu32"))
    m = re.search(r"utilization: ([\d.]+)% over compute cycles, ([\d.]+)% over all cycles", text)
    assert m and _num(m[1]) == pytest.approx(100 * res.utilization, abs=0.05)
    assert _num(m[2]) == pytest.approx(100 * res.macs / (32 * 32 * res.total_cycles), abs=0.05)
    assert res.stall_cycles > 0 and res.utilization_all_cycles < res.utilization
    m = re.search(r"DRAM traffic: ([\d,]+) bytes .*, ([\d,]+) bytes per generated token \(1 per run\)", text)
    assert m and _num(m[1]) == round(sum(r.dram_bytes for r in res.layers)) == _num(m[2])
    assert "utilization = MACs / (rows x cols x cycles)" in text and "mapping: loop order outer to inner" in text
    assert "NMK M/1" in text and "'M/1' = M untiled" in text


def test_prefill_prints_no_per_token_bytes(tmp_path: Path, capsys) -> None:
    assert main(["sim", "--arch", "npu32", "--workload", "gemm:M=64,N=64,K=64", "--quiet", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "DRAM traffic:" in out and "per generated token" not in out and "mapping: loop order" not in out


def test_partial_arch_lists_what_it_inherited(tmp_path: Path, capsys) -> None:
    f = tmp_path / "half.toml"
    f.write_text('name = "half"\nrows = 64\n[sram_kib]\npsum = 512\n')
    arch, src = load_arch_source(f)
    assert (arch.rows, arch.cols) == (64, Arch().cols)
    inherited = dict(src.inherited)
    assert inherited["cols"] == 128 and "rows" not in inherited and "sram_kib.psum" not in inherited
    assert inherited["sram_kib.ifmap"] == 2048 and "npukit's defaults" in src.base
    assert main(["sim", "--arch", str(f), "--workload", "gemm:M=64,N=64,K=64", "--quiet", "--out", str(tmp_path / "o")]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "keys not in the file" in x)
    assert "cols=128" in line and "sram_kib.ifmap=2048" in line and "[vector]" in line and "rows=" not in line


def test_base_key_names_the_arch_a_file_starts_from(tmp_path: Path) -> None:
    f = tmp_path / "small.toml"
    f.write_text('base = "npu32"\nname = "small"\nrows = 16\n')
    arch, src = load_arch_source(f)
    assert (arch.rows, arch.cols, arch.sram_kib) == (16, 32, load_arch("npu32").sram_kib)
    assert src.base == "base = 'npu32'" and dict(src.inherited)["cols"] == 32
    f.write_text('base = "npu999"\nrows = 16\n')
    with pytest.raises(ConfigError, match="base = 'npu999' is not a built-in arch"):
        load_arch(f)


WIDE = "bits.psum_buffer = 64 bits is wider than bits.pe_psum = 32 bits allows"


def test_wide_psum_buffer_refused_in_toml_sweep_and_api(tmp_path: Path, capsys) -> None:
    f = tmp_path / "wide.toml"
    f.write_text("[bits]\npsum_buffer = 64\n")
    with pytest.raises(ConfigError, match=re.escape(WIDE)):
        load_arch(f)
    assert main(["sim", "--arch", str(f), "--workload", "gemm:M=8,N=8,K=8", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and WIDE in err[0] and not (tmp_path / "o").exists()
    with pytest.raises(ConfigError, match=re.escape(WIDE)):
        Arch(bits=Bits(psum_buffer=64))
    with pytest.raises(ConfigError, match=re.escape(WIDE)):
        load_arch("npu128").with_(**{"bits.psum_buffer": 64})
    spec = parse_sweep_spec({"sweep": {"arch": "npu32", "workloads": ["gemm:M=8,N=8,K=8"]},
                             "grid": {"bits.psum_buffer": [8, 33]}})
    with pytest.raises(ConfigError) as exc:
        run_sweep(spec, tmp_path / "s" / "sweep.sqlite", workers=1)
    assert "psum_buffer = 33 bits is wider than" in str(exc.value) and "\n" not in str(exc.value)
    assert not (tmp_path / "s").exists()


def test_multicore_text_gives_core_archs_dram_and_defines_utilization(tmp_path: Path, capsys) -> None:
    from npukit.sim.multicore import load_multicore_arch
    from npukit.sim.multicore_sim import simulate_multicore

    argv = ["sim", "--arch", "hetero4", "--workload", "gemm:M=256,N=256,K=256", "--quiet", "--out", str(tmp_path)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "cores core0, core1, core2: npu128" in out and "cores core3: npu32" in out
    assert "SRAM ifmap 256 KiB, filter 256 KiB, psum 256 KiB, ofmap 128 KiB\n" in out  # a core's DRAM: the arch's channels
    res = simulate_multicore(load_workload("gemm:M=256,N=256,K=256"), load_multicore_arch("hetero4"))
    m = re.search(r"utilization ([\d.]+)% over all cycles, .* DRAM ([\d,]+) bytes", out)
    assert m and _num(m[1]) == pytest.approx(100 * res.utilization, abs=0.05)
    assert _num(m[2]) == round(sum(r["dram_bytes"] for r in res.layer_rows)) > 0
    assert "utilization = MACs / (PEs of all MAC cores x total cycles)" in out
    assert res.energy_pj == pytest.approx(sum(res.energy_components.values()))
    with pytest.warns(DeprecationWarning, match=r"'latency_s\(\)' is deprecated"):
        assert res.latency_s() == res.total_cycles / 1e9


def test_zigzag_text_has_a_loop_nest_legend(tmp_path: Path, capsys) -> None:
    ex = Path(__file__).resolve().parents[1] / "examples" / "zigzag"
    spec = f"zigzag:{ex / 'hardware' / 'tpu_like.yaml'},{ex / 'mapping' / 'tpu_like.yaml'}"
    assert main(["sim", "--arch", spec, "--workload", "gemm:M=64,N=64,K=64", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "spatial: parfor" in out and "loop nests: per operand (W weights, I inputs, O outputs)" in out
