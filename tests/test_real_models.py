"""Whole real models of transformers and diffusers as workloads (npukit.workloads.real_models).

The fast tests check spec parsing, the trace cache and the lazy imports without loading the model libraries;
those that build a model (transformers + diffusers take ~8 s to import) are marked slow: tiny random configs
written here check the traces op by op, and the full-size built-ins (meta device) are checked against MAC counts
written from their configs.
"""

import json
import subprocess
import sys

import pytest

from npukit.sim import Layer, VectorOp, Workload, WorkloadError
from npukit.workloads import REAL_MODELS, real_models, workload_from_spec
from npukit.workloads import _trace_cache as tc


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("NPUKIT_CACHE_DIR", str(tmp_path / "cache"))


def _write(tmp_path, name, cfg):
    path = tmp_path / name
    path.write_text(json.dumps(cfg))
    return path


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
TINY_QWEN = {
    "_class_name": "QwenImageTransformer2DModel", "attention_head_dim": 16, "axes_dims_rope": [4, 6, 6],
    "guidance_embeds": False, "in_channels": 16, "joint_attention_dim": 24, "num_attention_heads": 2, "num_layers": 1,
    "out_channels": 4, "patch_size": 2,
}


# ---------------------------------------------------------------------------- analytic counts
def llama_macs(c: dict, seq: int, kv: int | None = None, batch: int = 1) -> int:
    """Llama MACs: per layer the q/k/v/o projections and the SwiGLU MLP on every new token, the attention GEMMs
    over the full Lq x Lk square (the tracer counts what SDPA is given; causal masking does not halve it), and
    the LM head on every new token."""
    h, f, heads, kvh = c["hidden_size"], c["intermediate_size"], c["num_attention_heads"], c["num_key_value_heads"]
    hd, layers, vocab = c["head_dim"], c["num_hidden_layers"], c["vocab_size"]
    m, lk = (seq, seq) if kv is None else (1, kv + 1)
    proj = m * h * (heads * hd + 2 * kvh * hd) + m * heads * hd * h + 3 * m * h * f
    attn = 2 * m * lk * hd * heads
    return batch * (layers * (proj + attn) + m * h * vocab)


def flux_macs(c: dict, res: int, text: int, ref: int) -> int:
    """FLUX transformer MACs of one step: embedders, 19 double-stream and 38 single-stream blocks, output."""
    d, n = c["num_attention_heads"] * c["attention_head_dim"], (res // 16) ** 2 * (1 + ref)
    s = n + text
    out = c["patch_size"] ** 2 * (c["out_channels"] or c["in_channels"])
    macs = n * c["in_channels"] * d + text * c["joint_attention_dim"] * d
    macs += (256 * d + d * d) * (2 if c["guidance_embeds"] else 1) + c["pooled_projection_dim"] * d + d * d
    macs += c["num_layers"] * (12 * d * d + 12 * s * d * d + 2 * s * s * d)
    macs += c["num_single_layers"] * (3 * d * d + 12 * s * d * d + 2 * s * s * d)
    return macs + 2 * d * d + n * d * out


def qwen_macs(c: dict, res: int, text: int, ref: int) -> int:
    """Qwen-Image transformer MACs of one step: embedders, 60 double-stream blocks, output."""
    d, n = c["num_attention_heads"] * c["attention_head_dim"], (res // 16) ** 2 * (1 + ref)
    s = n + text
    out = c["patch_size"] ** 2 * c["out_channels"]
    macs = n * c["in_channels"] * d + text * c["joint_attention_dim"] * d + 256 * d + d * d
    macs += c["num_layers"] * (12 * d * d + 12 * s * d * d + 2 * s * s * d)
    return macs + 2 * d * d + n * d * out


def _builtin_config(name: str) -> dict:
    return json.loads(REAL_MODELS[name].path.read_text())


# ---------------------------------------------------------------------------- fast: specs, cache, imports
@pytest.mark.parametrize(
    "spec,match",
    [
        ("llama-3.1-8b:foo=1", "unknown option 'foo'"),
        ("llama-3.1-8b:seq=0", "seq must be an integer from 1"),
        ("llama-3.1-8b:seq=abc", "seq must be an integer"),
        ("llama-3.1-8b:seq=-4", "seq must be an integer"),
        ("llama-3.1-8b:seq=1e3", "seq must be an integer"),
        ("llama-3.1-8b:seq=5,seq=6", "given twice"),
        ("llama-3.1-8b:seq", "bad option 'seq'"),
        ("llama-3.1-8b:seq=4,,batch=1", "bad option ''"),
        ("llama-3.1-8b:phase=train", "phase must be prefill or decode"),
        ("llama-3.1-8b:phase=decode", "needs the KV-cache length"),
        ("llama-3.1-8b:phase=decode,kv=8,seq=4", "give the cache length with kv=L"),
        ("llama-3.1-8b:kv=8", "kv=L applies to phase=decode only"),
        ("llama-3.1-8b:res=1024", "unknown option 'res'"),
        ("flux.1-kontext-dev:res=1000", "res must be a multiple of 16"),
        ("flux.1-kontext-dev:res=0", "res must be an integer from 1"),
        ("flux.1-kontext-dev:steps=0", "steps must be an integer from 1"),
        ("flux.1-kontext-dev:phase=decode", "unknown option 'phase'"),
        ("qwen-image-edit:batch=99999", "batch must be an integer from 1 to 4,096"),
        ("hf:/nowhere/config.json", "does not exist"),
        ("hf:", "give a config file"),
        ("vgg16", "unknown workload 'vgg16'"),
    ],
)
def test_bad_specs_are_one_line_errors(spec, match):
    with pytest.raises(WorkloadError, match=match) as e:
        workload_from_spec(spec)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    "content,match",
    [
        ("{not json", "is not valid JSON"),
        ("[1, 2]", "must hold a JSON object"),
        ('{"hidden_size": 8}', 'has no "model_type"'),
    ],
)
def test_bad_hf_configs(tmp_path, content, match):
    (tmp_path / "c.json").write_text(content)
    with pytest.raises(WorkloadError, match=match) as e:
        workload_from_spec(f"hf:{tmp_path / 'c.json'}:seq=8")
    assert "\n" not in str(e.value)


def test_bad_diffusers_configs(tmp_path):
    p = _write(tmp_path, "d.json", {"_class_name": "UNet2DConditionModel"})
    with pytest.raises(WorkloadError, match="'UNet2DConditionModel' is not supported"):
        workload_from_spec(f"diffusers:{p}")
    p = _write(tmp_path, "e.json", {"num_layers": 2})
    with pytest.raises(WorkloadError, match='has no "_class_name"'):
        workload_from_spec(f"diffusers:{p}:res=256")
    with pytest.raises(WorkloadError, match="--input-shape does not apply"):
        workload_from_spec("llama-3.1-8b", "1,128")


def test_options_defaults():
    lm = real_models._parse_options("x", "", "lm", 0)
    assert lm == {"batch": 1, "phase": "prefill", "seq": 2048}
    assert real_models._parse_options("x", "phase=decode, kv=4096", "lm", 0) == {"batch": 1, "kv": 4096, "phase": "decode"}
    dif = real_models._parse_options("x", "res=512", "diffusion", 1)
    assert dif == {"batch": 1, "ref": 1, "res": 512, "seq": 512, "steps": 1}


def test_cache_round_trip_and_corrupt_entries(tmp_path):
    wl = Workload("m", [Layer("a", 2, 3, 4, 5, "conv", (6, 6, 3, 3, 1, 1, 1)),
                        VectorOp("b", "softmax", 12, reduce=4), VectorOp("c", "modulate", 6, inputs=3, params=2, batch=7)],
                  {"options": {"seq": 4}, "input_shapes": ["x=[1, 4]"]})
    path = tmp_path / "e.json"
    tc.store(path, wl)
    assert tc.load(path) == wl
    for junk in ("", "{", '{"format": 1}', json.dumps({**tc.workload_to_dict(wl), "format": 0}),
                 json.dumps({**tc.workload_to_dict(wl), "layers": [{"type": "gemm", "name": "a", "M": -1}]})):
        path.write_text(junk)
        assert tc.load(path) is None
    assert tc.load(tmp_path / "missing.json") is None


def test_cache_hit_and_rewrite_of_a_corrupt_entry(tmp_path, monkeypatch):
    calls = []

    def fake_trace(library, cfg, opts, name, spec, repeats=False, **_):
        calls.append(opts)
        return Workload(name, [Layer("fc", opts["seq"], 8, 8), VectorOp("act", "silu", 8 * opts["seq"])], {})

    monkeypatch.setattr(real_models, "_trace", fake_trace)
    cfg = _write(tmp_path, "config.json", TINY_LLAMA)
    first = workload_from_spec(f"hf:{cfg}:seq=16")
    again = workload_from_spec(f"hf:{cfg}:seq=16")
    assert len(calls) == 1 and again == first
    assert first.name == tmp_path.name  # config.json is named after its folder
    assert first.meta["options"] == {"batch": 1, "phase": "prefill", "seq": 16}
    entries = list((tmp_path / "cache" / "traces").glob("*.json"))
    assert len(entries) == 1
    code = (f"import sys; from npukit.workloads import workload_from_spec; wl = workload_from_spec('hf:{cfg}:seq=16'); "
            f"assert wl.macs == {first.macs}; bad = {{'torch', 'transformers'}} & set(sys.modules); assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)  # a hit imports no torch
    entries[0].write_text("{garbage")
    assert workload_from_spec(f"hf:{cfg}:seq=16") == first and len(calls) == 2  # ignored and traced again
    assert tc.load(entries[0]) == first  # ... and rewritten
    workload_from_spec(f"hf:{cfg}:seq=32")
    cfg.write_text(json.dumps({**TINY_LLAMA, "hidden_size": 32}))  # new content, new key
    workload_from_spec(f"hf:{cfg}:seq=16")
    assert len(calls) == 4


def test_steps_multiply_batch_after_the_cache(tmp_path, monkeypatch):
    def fake_trace(library, cfg, opts, name, spec, repeats=False, **_):
        return Workload(name, [Layer("fc", 4, 4, 4, 2), VectorOp("v", "gelu", 9)], {})

    monkeypatch.setattr(real_models, "_trace", fake_trace)
    cfg = _write(tmp_path, "d.json", TINY_FLUX)
    one = workload_from_spec(f"diffusers:{cfg}:res=64")
    many = workload_from_spec(f"diffusers:{cfg}:res=64,steps=28")
    assert [ly.batch for ly in many.layers] == [56, 28] and many.macs == 28 * one.macs
    assert many.meta["steps"] == 28 and many.meta["options"]["steps"] == 28 and one.meta["steps"] == 1


# ---------------------------------------------------------------------------- slow: tiny random models
@pytest.mark.slow
def test_tiny_llama_prefill_block_by_hand(tmp_path):
    c, s = TINY_LLAMA, 24
    wl = workload_from_spec(f"hf:{_write(tmp_path, 'tiny-llama.json', c)}:seq={s}")
    h, f, heads, kvh, hd = c["hidden_size"], c["intermediate_size"], 4, 2, 16
    block = [(ly.op, ly.elements, ly.reduce, ly.inputs) for ly in wl.vector_ops if ly.name.startswith("model.layers.1.")]
    assert block == [
        ("rmsnorm", s * h, h, 1),  # input_layernorm
        ("rope", s * heads * hd, 0, 1), ("rope", s * kvh * hd, 0, 1),  # q and k
        ("softmax", heads * s * s, s, 1),  # rows = heads x seq, of length seq
        ("add", s * h, 0, 2),  # residual
        ("rmsnorm", s * h, h, 1),  # post_attention_layernorm
        ("silu", s * f, 0, 1), ("mul", s * f, 0, 2),  # SwiGLU
        ("add", s * h, 0, 2),  # residual
    ]
    gemms = [(ly.name.rpartition(".")[2], ly.M, ly.N, ly.K, ly.batch) for ly in wl.gemms if ".layers.1." in ly.name]
    assert gemms == [("q_proj", s, heads * hd, h, 1), ("k_proj", s, kvh * hd, h, 1), ("v_proj", s, kvh * hd, h, 1),
                     ("scores", s, s, hd, heads), ("context", s, hd, s, heads), ("o_proj", s, h, heads * hd, 1),
                     ("gate_proj", s, f, h, 1), ("up_proj", s, f, h, 1), ("down_proj", s, h, f, 1)]
    assert wl.macs == llama_macs(c, s)
    assert wl.vector_ops[0] == VectorOp("model.embed_tokens.embedding", "embedding", s * h, inputs=0, params=s * h)
    assert wl.layers[-1] == Layer("lm_head", s, c["vocab_size"], h, kind="linear")
    assert wl.meta["class"] == "LlamaForCausalLM" and wl.meta["params"] > 0
    again = workload_from_spec(f"hf:{tmp_path / 'tiny-llama.json'}:seq={s}")
    assert again == wl  # the cache hit is the same workload


@pytest.mark.slow
def test_tiny_llama_decode_attends_to_kv_plus_one(tmp_path):
    c, kv, b = TINY_LLAMA, 40, 3
    wl = workload_from_spec(f"hf:{_write(tmp_path, 'config.json', c)}:phase=decode,kv={kv},batch={b}")
    scores = [ly for ly in wl.gemms if ly.name.endswith("scores")]
    context = [ly for ly in wl.gemms if ly.name.endswith("context")]
    assert len(scores) == len(context) == c["num_hidden_layers"]
    assert all((ly.M, ly.N, ly.K, ly.batch) == (1, kv + 1, 16, b * 4) for ly in scores)
    assert all((ly.M, ly.N, ly.K, ly.batch) == (1, 16, kv + 1, b * 4) for ly in context)
    # 4 query heads over 2 KV heads: each KV head's keys and values are fetched once for its 2 query heads
    assert all(ly.shared == 2 for ly in scores + context)
    appends = [ly for ly in wl.vector_ops if ly.op == "kv_append"]
    assert [ly.elements for ly in appends] == [b * 2 * 2 * 16] * c["num_hidden_layers"]  # new K and V rows
    soft = [ly for ly in wl.vector_ops if ly.op == "softmax"]
    assert all((ly.elements, ly.reduce) == (b * 4 * (kv + 1), kv + 1) for ly in soft)
    assert wl.macs == llama_macs(c, 1, kv=kv, batch=b)


@pytest.mark.slow
def test_tiny_flux_block_ops(tmp_path):
    res, t = 64, 8
    wl = workload_from_spec(f"diffusers:{_write(tmp_path, 'flux.json', TINY_FLUX)}:res={res},seq={t},ref=1")
    d, n = 32, (res // 16) ** 2 * 2
    s = n + t
    assert wl.macs == flux_macs(TINY_FLUX, res, t, 1)
    block = [(ly.name.removeprefix("transformer_blocks.0."), ly.op, ly.elements, ly.reduce, ly.inputs)
             for ly in wl.vector_ops if ly.name.startswith("transformer_blocks.0.")]
    assert ("norm1.norm", "layernorm", n * d, d, 1) in block
    assert ("norm1.modulate", "modulate", n * d, 0, 3) in block  # x * (1 + scale) + shift, the 1 + scale folded in
    assert ("norm1_context.modulate", "modulate", t * d, 0, 3) in block
    qk_norms = [x[1:] for x in block if x[0].startswith("attn.norm")]  # per head, over head_dim
    assert qk_norms == [("rmsnorm", n * d, 16, 1)] * 2 + [("rmsnorm", t * d, 16, 1)] * 2
    assert [x[1:] for x in block if "rope" in x[0]] == [("rope", s * d, 0, 1)] * 2
    assert ("attn.softmax", "softmax", 2 * s * s, s, 1) in block
    assert ("ff.net.0.gelu", "gelu", n * 4 * d, 0, 1) in block
    assert sum(1 for x in block if x[1] == "modulate") == 4 and sum(1 for x in block if x[1] == "add") == 4
    assert not [x for x in block if x[1] == "other"]
    single = [ly.op for ly in wl.vector_ops if ly.name.startswith("single_transformer_blocks.0.")]
    assert single == ["silu", "layernorm", "modulate", "gelu", "rmsnorm", "rmsnorm", "rope", "rope", "softmax", "mul", "add"]


@pytest.mark.slow
def test_tiny_qwen_image_ops(tmp_path):
    res, t = 64, 8
    cfg = _write(tmp_path, "qwen.json", TINY_QWEN)
    wl = workload_from_spec(f"diffusers:{cfg}:res={res},seq={t},ref=1,steps=3")
    assert wl.macs == 3 * qwen_macs(TINY_QWEN, res, t, 1)
    ops = [ly.op for ly in wl.vector_ops if ly.name.startswith("transformer_blocks.0.")]
    assert ops.count("modulate") == 4 and ops.count("rope") == 4 and ops.count("softmax") == 1
    one = workload_from_spec(f"diffusers:{cfg}:res={res},seq={t},ref=1")  # the same trace, from the cache
    assert [ly.batch for ly in wl.layers] == [3 * ly.batch for ly in one.layers]


@pytest.mark.slow
def test_cli_runs_a_real_model(tmp_path):
    cfg = _write(tmp_path, "tiny.json", TINY_LLAMA)
    r = subprocess.run([sys.executable, "-m", "npukit", "sim", "--workload", f"hf:{cfg}:seq=16", "--quiet",
                        "--out", str(tmp_path / "out")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert f"{llama_macs(TINY_LLAMA, 16):,} MACs" in r.stdout


# ---------------------------------------------------------------------------- slow: the full-size built-ins
@pytest.mark.slow
@pytest.mark.parametrize("spec,seq,kv", [("llama-3.1-8b:seq=2048", 2048, None), ("llama-3.1-8b:phase=decode,kv=4096", 1, 4096)])
def test_llama_builtin_macs(spec, seq, kv):
    c = _builtin_config("llama-3.1-8b")
    wl = workload_from_spec(spec)
    assert wl.macs == llama_macs(c, seq, kv)  # exact
    assert wl.meta["params"] == pytest.approx(8.03e9, rel=1e-3)
    assert sum(1 for ly in wl.vector_ops if ly.op == "rmsnorm") == 2 * 32 + 1
    if kv is not None:
        assert {ly.N for ly in wl.gemms if ly.name.endswith("scores")} == {kv + 1}


@pytest.mark.slow
def test_llama_70b_builtin_macs():
    c = _builtin_config("llama-3.1-70b")
    assert (c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"], c["num_key_value_heads"],
            c["intermediate_size"], c["vocab_size"], c["rope_theta"]) == (8192, 80, 64, 8, 28672, 128256, 500000.0)
    wl = workload_from_spec("llama-3.1-70b:phase=decode,kv=2048")
    assert wl.macs == llama_macs(c, 1, 2048)  # exact
    assert sum(1 for ly in wl.vector_ops if ly.op == "rmsnorm") == 2 * 80 + 1


@pytest.mark.slow
def test_flux_kontext_builtin_macs():
    c = _builtin_config("flux.1-kontext-dev")
    wl = workload_from_spec("flux.1-kontext-dev:res=1024,steps=28")
    assert wl.macs == 28 * flux_macs(c, 1024, 512, 1)
    assert wl.meta["params"] == pytest.approx(11.9e9, rel=1e-3)
    assert wl.meta["input_shapes"][0] == "hidden_states=[1, 8192, 64]"  # 4096 image + 4096 context-image tokens
    assert {(ly.M, ly.N) for ly in wl.gemms if ly.name.endswith("scores")} == {(8704, 8704)}  # + 512 text tokens


@pytest.mark.slow
def test_qwen_image_edit_builtin_macs():
    c = _builtin_config("qwen-image-edit")
    wl = workload_from_spec("qwen-image-edit")
    assert wl.macs == qwen_macs(c, 1024, 512, 1)
    assert wl.meta["params"] == pytest.approx(20.43e9, rel=1e-3)


@pytest.mark.slow
@pytest.mark.parametrize("cfg,library,opts", [
    ("TINY_FLUX", "diffusers", {"res": 64, "seq": 8, "ref": 1, "batch": 1}),
    ("TINY_QWEN", "diffusers", {"res": 64, "seq": 8, "ref": 1, "batch": 1}),
    ("TINY_LLAMA", "transformers", {"seq": 16, "batch": 1, "phase": "prefill"}),
    ("TINY_LLAMA", "transformers", {"seq": 16, "batch": 1, "phase": "prefill", "layers": 5}),
    ("TINY_FLUX", "diffusers", {"res": 64, "seq": 8, "ref": 1, "batch": 1, "layers": 4}),
    ("MOE_TINY", "transformers", {"seq": 16, "batch": 1, "phase": "prefill", "layers": 4}),
])
def test_one_traced_block_repeated_equals_every_block_traced(cfg, library, opts):
    from test_moe_workloads import MOE_TINY

    from npukit.workloads.real_models import _trace

    c = dict({**globals(), "MOE_TINY": MOE_TINY}[cfg])
    opts = dict(opts)
    n = opts.pop("layers", None)
    if n is not None:  # more blocks than are traced: the repeated ones and their dataflow
        c.update({k: n for k in ("num_hidden_layers", "num_layers", "num_single_layers") if k in c})
    if library == "transformers":
        c.setdefault("architectures", ["LlamaForCausalLM"])
    full = _trace(library, c, opts, "m", "m", repeats=False)
    fast = _trace(library, c, opts, "m", "m", repeats=True)
    assert fast.layers == full.layers and fast.meta["params"] == full.meta["params"]
    assert fast.meta["dataflow"] == full.meta["dataflow"]
