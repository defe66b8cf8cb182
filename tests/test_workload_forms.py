"""One workload string of each form through the three entry points: ``npukit sim``, a sweep spec and the Python
API (:func:`npukit.workloads.load_workload`). Each must load the same workload (same MACs) everywhere; the forms
that run the user's code (``FILE.py:FACTORY``) load in the CLI and the API and are refused in a sweep spec."""

from __future__ import annotations

import csv
import json
import textwrap
from pathlib import Path

import pytest

from npukit.cli import main
from npukit.sim import ConfigError, WorkloadError
from npukit.workloads import WORKLOAD_FORMS, load_workload

TOPO = "Layer, M, N, K,\nqkv, 16, 48, 32,\nffn, 16, 64, 32,\n"
TINY_LLAMA = {
    "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 160,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "num_hidden_layers": 2, "vocab_size": 256,
    "max_position_embeddings": 512, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
}
TINY_FLUX = {
    "_class_name": "FluxTransformer2DModel", "attention_head_dim": 16, "axes_dims_rope": [4, 6, 6],
    "guidance_embeds": True, "in_channels": 16, "joint_attention_dim": 32, "num_attention_heads": 2, "num_layers": 1,
    "num_single_layers": 1, "out_channels": None, "patch_size": 1, "pooled_projection_dim": 24,
}
FACTORY = "import torch\n\ndef make():\n    return torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.ReLU())\n"


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("NPUKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)  # relative file forms are read from here by the CLI and the API


def _onnx(path: Path) -> Path:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.zeros((32, 24), np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 24])], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _cli_macs(spec: str, out: Path, capsys) -> int:
    assert main(["sim", "--workload", spec, "--arch", "npu32", "--out", str(out), "--quiet"]) == 0, spec
    capsys.readouterr()
    (table,) = out.glob("*.csv")
    with table.open() as f:
        return sum(int(r["macs"]) for r in csv.DictReader(f))


def _sweep_macs(folder: Path, specs: list[str], capsys) -> dict[str, int]:
    spec = folder / "forms.toml"
    spec.write_text(textwrap.dedent(f"""
        [sweep]
        arch = "npu32"
        workloads = {json.dumps(specs)}
        [grid]
        rows = [32]
    """))
    out = folder / "sweep_out"
    assert main(["sweep", str(spec), "--out", str(out), "--workers", "1", "--no-progress"]) == 0
    capsys.readouterr()
    with (out / "sweep.csv").open() as f:
        return {r["workload"]: int(r["macs"]) for r in csv.DictReader(f)}


def _check_all_three(tmp_path: Path, specs: list[str], capsys) -> None:
    api = {s: load_workload(s).macs for s in specs}
    assert all(m > 0 for m in api.values()), api
    swept = _sweep_macs(tmp_path, specs, capsys)
    assert swept == api
    for i, s in enumerate(specs):
        assert _cli_macs(s, tmp_path / f"cli{i}", capsys) == api[s], s


def test_light_forms_load_alike_in_cli_sweep_and_api(tmp_path, capsys):
    (tmp_path / "topo.csv").write_text(TOPO)
    _onnx(tmp_path / "tiny.onnx")
    specs = ["minilm-l6:seq=16", "gemm:M=64,N=32,K=48", "topo.csv", "tiny.onnx"]
    _check_all_three(tmp_path, specs, capsys)
    assert load_workload("tiny.onnx").macs == 8 * 32 * 24
    assert load_workload("topo.csv").macs == 16 * 48 * 32 + 16 * 64 * 32


@pytest.mark.slow
def test_model_forms_load_alike_in_cli_sweep_and_api(tmp_path, capsys):
    (tmp_path / "llama.json").write_text(json.dumps(TINY_LLAMA))
    (tmp_path / "flux.json").write_text(json.dumps(TINY_FLUX))
    specs = ["torch:resnet18", "hf:llama.json:seq=8", "diffusers:flux.json:res=64,seq=8",
             "llama-3.1-8b:phase=decode,kv=16"]
    _check_all_three(tmp_path, specs, capsys)


@pytest.mark.slow
def test_code_forms_load_in_cli_and_api_and_are_refused_in_sweeps(tmp_path, capsys):
    (tmp_path / "mymodel.py").write_text(FACTORY)
    spec = "mymodel.py:make"
    with pytest.raises(WorkloadError, match="refused here"):
        load_workload(spec)
    macs = load_workload(spec, allow_code=True, input_shape="4,32").macs
    assert macs == 4 * 32 * 48
    assert main(["sim", "--workload", spec, "--input-shape", "4,32", "--arch", "npu32", "--out",
                 str(tmp_path / "cli"), "--quiet"]) == 0
    sweep = tmp_path / "code.toml"
    sweep.write_text(f'[sweep]\narch = "npu32"\nworkloads = ["{spec}"]\n[grid]\nrows = [32]\n')
    capsys.readouterr()
    assert main(["sweep", str(sweep), "--out", str(tmp_path / "sw"), "--workers", "1", "--no-progress"]) == 2
    assert "refused here" in capsys.readouterr().err
    assert not (tmp_path / "sw").exists()


def test_onnx_in_a_sweep_is_not_read_as_text(tmp_path, capsys):
    """A bad .onnx in a sweep is an ONNX error, never 'not UTF-8 text'."""
    (tmp_path / "bad.onnx").write_bytes(b"\x80\x81 not a protobuf")
    spec = tmp_path / "s.toml"
    spec.write_text('[sweep]\narch = "npu32"\nworkloads = ["bad.onnx"]\n[grid]\nrows = [32]\n')
    assert main(["sweep", str(spec), "--out", str(tmp_path / "o"), "--workers", "1", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "bad.onnx" in err and "UTF-8" not in err


def test_an_unknown_workload_names_every_form():
    with pytest.raises(ConfigError) as e:  # WorkloadError is a ConfigError
        load_workload("vgg16")
    msg = str(e.value)
    assert isinstance(e.value, WorkloadError) and "\n" not in msg
    for form in WORKLOAD_FORMS:
        assert form in msg


def test_an_onnx_file_with_a_trailing_colon_is_that_file(tmp_path):
    # 'tiny.onnx:' went to the Python-code form ("must be path/to/file.py:factory")
    p = _onnx(tmp_path / "tiny.onnx")
    assert load_workload(f"{p}:").macs == load_workload(str(p)).macs == 8 * 32 * 24
    with pytest.raises(WorkloadError, match="does not exist"):
        load_workload(str(tmp_path / "none.onnx:"))
