"""Every run named by what it ran (npukit.sim.run_name): workload options and arch overrides in the file names and
in the ledger's ``meta["run"]``, and a run never replacing another run's files unless ``--overwrite``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _cli_util import refused

import npukit
from npukit.cli import main
from npukit.sim import load_arch
from npukit.sim.ledger import Ledger
from npukit.sim.run_name import (
    MAX_STEM,
    arch_overrides,
    override_tokens,
    run_stem,
    single_core_stem,
    spec_options,
    workload_label,
)


def _tree(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(root.iterdir())}


def _sim(out: Path, workload: str, *more: str) -> int:
    return main(["sim", "--workload", workload, "--arch", "npu32", "--out", str(out), "--quiet", *more])


@pytest.mark.parametrize(("spec", "name", "shape", "want"), [
    ("llama-3.1-8b:seq=2048,phase=prefill", "llama-3.1-8b", None, "llama-3.1-8b_prefill_seq2048"),
    ("llama-3.1-8b:phase=decode,kv=4096", "llama-3.1-8b", None, "llama-3.1-8b_kv4096_decode"),
    ("llama-3.1-8b", "llama-3.1-8b", None, "llama-3.1-8b"),
    ("hf:/a/mixtral/config.json:seq=64", "mixtral", None, "mixtral_seq64"),
    ("gemm:M=8,N=16,K=32", "gemm8x16x32", None, "gemm8x16x32"),  # a built-in named by its options
    ("llama3-8b-layer:seq=64", "llama3-8b-layer", None, "llama3-8b-layer_seq64"),
    ("model.onnx", "model", "batch_size=1,sequence_length=128", "model_batch_size1_sequence_length128"),
    ("torch:resnet18", "resnet18", "1,3,224,224", "resnet18_in1x3x224x224"),
    ("mixtral-8x7b:seq=64,routing=zipf:1.2", "mixtral-8x7b", None, "mixtral-8x7b_routing-zipf:1.2_seq64"),
])
def test_workload_label(spec: str, name: str, shape: str | None, want: str) -> None:
    assert workload_label(spec, name, shape) == want


def test_spec_options_and_arch_overrides() -> None:
    assert spec_options("hf:/x/c.json:seq=8,batch=2") == {"batch": "2", "seq": "8"}
    assert spec_options("torch:resnet18") == {}
    base = load_arch("npu128")
    arch = base.with_(**{"mapping": "fixed", "bits.pe_psum": 24, "bits.psum_buffer": 16, "timing": "double-buffered"})
    diff = arch_overrides(base, arch)
    assert diff == {"mapping": "fixed", "bits.pe_psum": 24, "bits.psum_buffer": 16, "timing": "double-buffered"}
    assert override_tokens(diff) == ["pe_psum24", "mapping-fixed", "timing-double-buffered"]
    assert single_core_stem("resnet18", base, arch) == "resnet18_npu128_ws_psum16_pe_psum24_mapping-fixed_timing-double-buffered"
    assert single_core_stem("resnet18", base, base) == "resnet18_npu128_ws_psum32"


def test_long_stems_are_cut_and_still_differ() -> None:
    a, b = run_stem(["x" * 200, "a"]), run_stem(["x" * 200, "b"])
    assert len(a) <= MAX_STEM and len(b) <= MAX_STEM and a != b
    assert run_stem(["../evil", "a b"]) == "evil_a_b"


def test_runs_differing_in_one_option_leave_two_ledgers(tmp_path, capsys) -> None:
    out = tmp_path / "o"
    assert _sim(out, "llama3-8b-layer:seq=64,phase=prefill") == 0
    assert _sim(out, "llama3-8b-layer:seq=64,phase=decode") == 0
    assert _sim(out, "llama3-8b-layer:seq=128,phase=decode") == 0
    ledgers = sorted(p.name for p in out.glob("*.ledger.json"))
    assert ledgers == ["llama3-8b-layer_decode_seq128_npu32_ws_psum32.ledger.json",
                       "llama3-8b-layer_decode_seq64_npu32_ws_psum32.ledger.json",
                       "llama3-8b-layer_prefill_seq64_npu32_ws_psum32.ledger.json"]
    run = Ledger.load(out / ledgers[0]).meta["run"]
    assert run["workload_spec"] == "llama3-8b-layer:seq=128,phase=decode"
    assert run["arch"] == "npu32" and run["arch_base_name"] == "npu32" and run["arch_overrides"] == {}
    assert run["npukit"] == npukit.__version__ and run["mapping"] == "search" and run["stem"] == ledgers[0][:-12]
    assert "wrote" in capsys.readouterr().out


def test_the_same_run_twice_is_refused_unless_overwrite(tmp_path, capsys, monkeypatch) -> None:
    import npukit.sim.simulator as simulator

    out = tmp_path / "o"
    assert _sim(out, "gemm:M=64,N=64,K=64") == 0
    capsys.readouterr()
    before = _tree(out)
    real = simulator.simulate
    monkeypatch.setattr(simulator, "simulate", lambda *a, **k: pytest.fail("simulated before refusing"))
    refused(["sim", "--workload", "gemm:M=64,N=64,K=64", "--arch", "npu32", "--out", str(out)], capsys,
            "refusing to overwrite", "--overwrite")
    assert _tree(out) == before
    monkeypatch.setattr(simulator, "simulate", real)
    assert _sim(out, "gemm:M=64,N=64,K=64", "--overwrite") == 0
    assert sorted(_tree(out)) == sorted(before)


def test_fixed_mapping_after_search_keeps_the_search_result(tmp_path, capsys) -> None:
    out = tmp_path / "o"
    assert _sim(out, "resnet18") == 0
    search = _tree(out)
    assert _sim(out, "resnet18", "--mapping", "fixed") == 0
    after = _tree(out)
    assert {k: after[k] for k in search} == search and len(after) == 2 * len(search)
    fixed = Ledger.load(out / "resnet18_npu32_ws_psum32_mapping-fixed.ledger.json").meta["run"]
    assert fixed["arch_overrides"] == {"mapping": "fixed"} and fixed["mapping"] == "fixed"


def test_fixed_report_names_are_not_overwritten_by_another_run(tmp_path, capsys) -> None:
    out = tmp_path / "o"
    assert _sim(out, "gemm:M=64,N=64,K=64", "--format", "scalesim", "--mapping", "fixed") == 0
    capsys.readouterr()
    refused(["sim", "--workload", "gemm:M=32,N=64,K=64", "--arch", "npu32", "--mapping", "fixed", "--format",
             "scalesim", "--out", str(out)], capsys, "COMPUTE_REPORT.csv")


def test_multicore_runs_are_named_by_schedule_and_refused_twice(tmp_path, capsys) -> None:
    arch = tmp_path / "two.toml"
    arch.write_text('name = "two"\n[[core]]\narch = "npu32"\ncount = 2\n[shared_memory]\nkib = 512\n')
    out = tmp_path / "out"
    argv = ["sim", "--arch", str(arch), "--workload", "gemm:M=256,N=256,K=256", "--out", str(out), "--quiet"]
    assert main(argv) == 0
    assert main([*argv, "--schedule", "blocks/pipeline", "--dataflow", "os"]) == 0
    names = sorted(p.name for p in out.glob("*.ledger.json"))
    assert names == ["gemm256x256x256_two.ledger.json", "gemm256x256x256_two_dataflow-os_blocks-pipeline.ledger.json"]
    assert Ledger.load(out / names[1]).meta["run"]["arch_overrides"] == {"dataflow": "os"}
    capsys.readouterr()
    refused(argv, capsys, "refusing to overwrite")


def test_zigzag_runs_record_the_run_and_are_refused_twice(tmp_path, capsys) -> None:
    from test_zigzag_nest import MAPS, ZZ

    topo = tmp_path / "tiny.csv"
    topo.write_text("Layer, M, N, K,\nfc, 16, 32, 64,\n")
    argv = ["sim", "--arch", f"zigzag:{ZZ}/hardware/tpu_like.yaml,{ZZ}/mapping/{MAPS.get('tpu_like', 'tpu_like')}.yaml",
            "--workload", str(topo), "--out", str(tmp_path / "o"), "--quiet"]
    assert main(argv) == 0
    (mapping,) = (tmp_path / "o").glob("*.mapping.json")
    assert json.loads(mapping.read_text())["run"]["workload_spec"] == str(topo)
    capsys.readouterr()
    assert main(argv) == 2  # (the hardware file's warnings come first on stderr)
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("npukit sim: error: refusing to overwrite")


def test_demo_refuses_an_earlier_demo_run_before_any_work(tmp_path, capsys) -> None:
    out = tmp_path / "demo"
    out.mkdir()
    (out / "resnet18_npu32_ws_psum8.csv").write_text("kept\n")
    refused(["demo", "--arch", "npu32", "--out", str(out)], capsys, "refusing to overwrite", "resnet18_npu32_ws_psum8")
    assert _tree(out) == {"resnet18_npu32_ws_psum8.csv": b"kept\n"}


def test_another_sweep_into_the_same_out_keeps_the_first_csv(tmp_path, capsys) -> None:
    a, b = tmp_path / "a.toml", tmp_path / "b.toml"
    a.write_text('[sweep]\narch = "npu32"\nworkloads = ["gemm:M=8,N=8,K=8"]\n[grid]\nrows = [4, 8]\n')
    b.write_text('[sweep]\narch = "npu32"\nworkloads = ["gemm:M=16,N=8,K=8"]\n[grid]\nrows = [4]\n')
    out = tmp_path / "o"
    argv = ["sweep", str(a), "--out", str(out), "--workers", "1", "--no-progress"]
    assert main(argv) == 0 and main(argv) == 0  # the same spec again rewrites its own CSV
    capsys.readouterr()
    first = (out / "sweep.csv").read_bytes()
    refused(["sweep", str(b), "--out", str(out), "--workers", "1", "--no-progress"], capsys, "another sweep's points")
    assert (out / "sweep.csv").read_bytes() == first
    assert main(["sweep", str(b), "--out", str(out), "--workers", "1", "--no-progress", "--overwrite"]) == 0
    assert (out / "sweep.csv").read_bytes() != first
