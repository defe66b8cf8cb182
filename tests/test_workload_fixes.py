"""Workload faults of bug hunt F: broadcast operands, batch norm and pooling in the tracer (agreeing with the ONNX
lowering), ``routing=FILE.json`` beside a sweep spec, ``mlp=`` / ``routing=`` refused where they cannot apply,
trace and ONNX cache entries made for another key or with malformed layer fields, the name of a root-level ONNX
vector op, and GPT-OSS (which refuses SDPA) built with eager attention.

The tests that build transformers models (~8 s to import it) are marked slow.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from npukit.sim import WorkloadError
from npukit.sim.disk_cache import _checksum
from npukit.sim.workload import Layer, VectorOp, Workload
from npukit.workloads import _trace_cache, load_workload
from npukit.workloads.loader import resolve_paths
from npukit.workloads.trace import trace_workload

_LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 100,
          "max_position_embeddings": 256, "torch_dtype": "bfloat16"}
# one dense layer (mlp_only_layers) and two MoE layers, as the hunt's reproducer
_QWEN2_MOE = {"model_type": "qwen2_moe", "architectures": ["Qwen2MoeForCausalLM"], "hidden_size": 64,
              "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "num_experts": 8,
              "num_experts_per_tok": 2, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 64,
              "intermediate_size": 128, "vocab_size": 100, "decoder_sparse_step": 1, "mlp_only_layers": [0],
              "max_position_embeddings": 256, "torch_dtype": "bfloat16"}
_GPT_OSS = {"model_type": "gpt_oss", "architectures": ["GptOssForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "num_local_experts": 4,
            "num_experts_per_tok": 2, "experts_per_token": 2, "intermediate_size": 32, "vocab_size": 100,
            "max_position_embeddings": 256, "sliding_window": 16, "layer_types": ["sliding_attention", "full_attention"],
            "torch_dtype": "bfloat16"}


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NPUKIT_CACHE_DIR", str(tmp_path / "cache"))


def _write(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data))
    return path


def _vec(wl: Workload) -> list[tuple[str, int, int, int, int]]:
    """(op, elements, reduce, inputs, params) of every vector op; names left out (the two routes name them apart)."""
    return [(v.op, v.elements, v.reduce, v.inputs, v.params) for v in wl.vector_ops]


# ---------------------------------------------------------------------------- 1. batch norm, pools, broadcast operands
class _ConvBnPool(nn.Module):
    """conv -> + a per-channel bias parameter -> BatchNorm -> 3x3/2 max pool -> 2x2 average pool."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bias = nn.Parameter(torch.zeros(8, 1, 1))
        self.bn = nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(3, 2, 1)
        self.avg = nn.AvgPool2d(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.avg(self.pool(self.bn(self.conv(x) + self.bias)))


def _conv_bn_pool_onnx(path: Path) -> Path:
    """The same graph written with onnx.helper (torch's exporter would fold the batch norm into the conv)."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    def init(name: str, *dims: int) -> Any:
        n = 1
        for d in dims:
            n *= d
        return helper.make_tensor(name, TensorProto.FLOAT, list(dims), [0.0] * n)

    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="/conv/Conv", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c", "bias"], ["a"], name="/Add"),  # at the graph's root
        helper.make_node("BatchNormalization", ["a", "s", "b", "m", "v"], ["n"], name="/bn/BatchNormalization"),
        helper.make_node("MaxPool", ["n"], ["p"], name="/pool/MaxPool", kernel_shape=[3, 3], strides=[2, 2],
                         pads=[1, 1, 1, 1]),
        helper.make_node("AveragePool", ["p"], ["y"], name="/avg/AveragePool", kernel_shape=[2, 2], strides=[2, 2]),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 4, 4])],
        [init("w", 8, 3, 3, 3), init("bias", 8, 1, 1), init("s", 8), init("b", 8), init("m", 8), init("v", 8)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.mark.slow  # a second or more: the whole suite runs it
def test_batchnorm_pools_and_broadcast_bias_cost_alike_traced_and_from_onnx(tmp_path: Path) -> None:
    from npukit.workloads.onnx_workload import onnx_workload

    traced = trace_workload(_ConvBnPool().eval(), (torch.randn(1, 3, 16, 16),), "m")
    e = 8 * 16 * 16
    assert _vec(traced) == [
        ("add", e, 0, 1, 8),  # the (8,1,1) bias is a parameter read, not a second activation-sized input
        ("mul", e, 0, 1, 4 * 8),  # batch norm: one multiply-add per element, weight/bias/mean/var = 4*C params
        ("other", 8 * 8 * 8 * 9, 9, 1, 0),  # max pool: outputs x 3x3 window
        ("other", 8 * 4 * 4 * 4, 4, 1, 0),  # average pool: outputs x 2x2 window
    ]
    assert _vec(onnx_workload(_conv_bn_pool_onnx(tmp_path / "m.onnx"))) == _vec(traced)


def test_onnx_vector_op_alone_at_the_graph_root_is_named_after_its_op(tmp_path: Path) -> None:
    from npukit.workloads.onnx_workload import onnx_workload

    names = [v.name for v in onnx_workload(_conv_bn_pool_onnx(tmp_path / "m.onnx")).vector_ops]
    assert names == ["add", "bn", "pool", "avg"]


# ---------------------------------------------------------------------------- 2. routing=FILE.json beside the spec
def test_routing_file_is_resolved_beside_the_spec_and_listed(tmp_path: Path) -> None:
    spec, files = resolve_paths("mixtral-8x7b:seq=16,routing=r.json", tmp_path)
    assert spec == f"mixtral-8x7b:seq=16,routing={tmp_path / 'r.json'}" and files == [tmp_path / "r.json"]
    spec, files = resolve_paths("hf:cfg.json:routing=r.json,seq=8", tmp_path)
    assert spec == f"hf:{tmp_path / 'cfg.json'}:routing={tmp_path / 'r.json'},seq=8"
    assert files == [tmp_path / "cfg.json", tmp_path / "r.json"]
    assert resolve_paths("mixtral-8x7b:seq=16,routing=zipf:1.2", tmp_path) == ("mixtral-8x7b:seq=16,routing=zipf:1.2", [])
    assert resolve_paths("mixtral-8x7b:routing=/abs/r.json", tmp_path) == ("mixtral-8x7b:routing=/abs/r.json",
                                                                            [Path("/abs/r.json")])


@pytest.mark.slow
def test_load_workload_reads_the_routing_file_from_base_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec_dir, elsewhere = tmp_path / "spec", tmp_path / "cwd"
    spec_dir.mkdir()
    elsewhere.mkdir()
    _write(spec_dir / "q.json", _QWEN2_MOE)
    _write(spec_dir / "r.json", [5, 1, 1, 1, 1, 1, 1, 1])
    monkeypatch.chdir(elsewhere)
    wl = load_workload("hf:q.json:seq=8,routing=r.json", base_dir=spec_dir)
    assert wl.meta["moe"]["routing"] == str(spec_dir / "r.json")
    # one list of counts serves both MoE layers: expert 0 gets more than the uniform 16 / 8 (token, expert) pairs
    ups = [ly for ly in wl.gemms if ly.name.endswith(".experts.0.gate_up_proj")]
    assert len(ups) == 2 and ups[0].M == ups[1].M > 2


# ---------------------------------------------------------------------------- 3, 4. options that cannot apply
@pytest.mark.slow
def test_mlp_option_on_a_model_with_moe_layers_is_refused_naming_them(tmp_path: Path) -> None:
    path = _write(tmp_path / "q.json", _QWEN2_MOE)
    with pytest.raises(WorkloadError, match=r"2 mixture-of-experts layers \(model\.layers\.1\.mlp, "
                                            r"model\.layers\.2\.mlp\); run it without mlp=") as e:
        load_workload(f"hf:{path}:seq=8,mlp=omnimoe,experts=16,topk=2")
    assert "\n" not in str(e.value)


@pytest.mark.slow
def test_routing_on_a_model_without_moe_layers_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path / "llama.json", _LLAMA)
    with pytest.raises(WorkloadError, match="LlamaForCausalLM has none; run it without routing="):
        load_workload(f"hf:{path}:seq=8,routing=zipf:1.2")
    assert load_workload(f"hf:{path}:seq=8").macs > 0  # without it: fine


# ---------------------------------------------------------------------------- 5. cache entries
def _entry(tmp_path: Path) -> tuple[Path, Workload]:
    wl = Workload("w", [Layer("conv1", 64, 8, 27, kind="conv", conv=(10, 10, 3, 3, 3, 8, 1)),
                        VectorOp("relu", "other", 512)], {})
    path = tmp_path / "entry.json"
    _trace_cache.store(path, wl, key="k1")
    return path, wl


def _poison(path: Path, field: str, value: Any) -> None:
    d = json.loads(path.read_text())
    d["body"]["layers"][0][field] = value
    d["sha256"] = _checksum(d["kind"], d["body"])  # checksum-valid: only its content is wrong
    path.write_text(json.dumps(d))


def test_cache_entry_serves_only_the_key_it_was_made_for(tmp_path: Path) -> None:
    path, wl = _entry(tmp_path)
    assert _trace_cache.load(path, key="k1") == Workload(wl.name, [wl.layers[0], wl.layers[1]], {})
    assert _trace_cache.load(path, key="k2") is None  # copied over another key's file: a miss


@pytest.mark.parametrize("field,value", [("conv", [1, 2]), ("conv", ["a"] * 7), ("conv", [10, 10, 3, 3, 3, 8, -1]),
                                         ("conv", [2, 2, 3, 3, 3, 8, 1]), ("name", [1]), ("kind", "bogus")])
def test_checksum_valid_cache_entry_with_malformed_layer_fields_is_a_miss(tmp_path: Path, field: str, value: Any) -> None:
    path, _ = _entry(tmp_path)
    _poison(path, field, value)
    assert _trace_cache.load(path, key="k1") is None


@pytest.mark.slow
def test_trace_cache_entry_of_other_options_is_rebuilt(tmp_path: Path) -> None:
    path = _write(tmp_path / "llama.json", _LLAMA)
    small = load_workload(f"hf:{path}:seq=8")
    before = set((tmp_path / "cache" / "traces").iterdir())
    big = load_workload(f"hf:{path}:seq=32")
    (big_entry,) = set((tmp_path / "cache" / "traces").iterdir()) - before
    (small_entry,) = before
    shutil.copyfile(small_entry, big_entry)  # seq=8's entry in seq=32's file
    again = load_workload(f"hf:{path}:seq=32")
    assert again.macs == big.macs != small.macs and again.meta["options"]["seq"] == 32


def test_onnx_cache_entry_of_another_file_is_rebuilt(tmp_path: Path) -> None:
    from npukit.workloads import _onnx_cache
    from npukit.workloads.onnx_workload import onnx_workload

    a = _conv_bn_pool_onnx(tmp_path / "a.onnx")
    b = tmp_path / "b.onnx"
    import onnx

    model = onnx.load(a)
    model.graph.node[0].attribute[0].ints[:] = [0, 0, 0, 0]  # no padding: a 14x14 conv output, 3x3 at the end
    for d in (2, 3):
        model.graph.output[0].type.tensor_type.shape.dim[d].dim_value = 3
    onnx.save(model, b)
    wa, wb = onnx_workload(a), onnx_workload(b)
    assert wa.macs != wb.macs
    module = sys.modules["npukit.workloads.onnx_workload"].__file__
    entry_a, entry_b = (_onnx_cache.entry_path(p, ({}, {}), module) for p in (a, b))
    shutil.copyfile(entry_a, entry_b)
    assert onnx_workload(b).macs == wb.macs


# ---------------------------------------------------------------------------- 7. GPT-OSS
@pytest.mark.slow
def test_gpt_oss_is_built_with_eager_attention(tmp_path: Path) -> None:
    pytest.importorskip("transformers.models.gpt_oss")
    path = _write(tmp_path / "gptoss.json", _GPT_OSS)
    wl = load_workload(f"hf:{path}:seq=8")
    attn = [ly for ly in wl.gemms if ly.kind == "attention"]
    assert wl.meta["class"] == "GptOssForCausalLM" and wl.meta["moe"]["layers"] == 2
    assert len(attn) == 4 and all(ly.shared == 2 for ly in attn)  # scores + context per layer, 2 query heads per KV head
    assert [(ly.M, ly.N, ly.K, ly.batch) for ly in attn[:2]] == [(8, 8, 16, 4), (8, 16, 8, 4)]
