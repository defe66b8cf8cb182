"""Mixture-of-experts workloads: the routing rule, the traced expert GEMMs, the mlp=omnimoe|peer option and the
config limits checked before a model is built.

Fast tests: the routing rule (pure Python), option and limit errors (raised before transformers is imported), and
the tracer on tiny torch-only modules (an experts module with transformers' interface, npukit's OmniMoE and PEER).
Slow tests build transformers models (~8 s import): a tiny Mixtral and a tiny DeepSeek-V2 against formulas, and
the full Mixtral-8x7B config through ``npukit sim`` within 0.5% of the analytic MAC count.
"""

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from npukit.sim import Layer, WorkloadError
from npukit.workloads import load_workload
from npukit.workloads.moe_routing import Routing, expected_distinct, expert_loads, parse_routing

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("NPUKIT_CACHE_DIR", str(tmp_path / "cache"))


def _write(tmp_path, name, cfg):
    path = tmp_path / name
    path.write_text(json.dumps(cfg))
    return path


# ---------------------------------------------------------------------------- the routing rule
def test_uniform_prefill_spreads_evenly_and_decode_hits_k_experts():
    assert expert_loads(Routing(), 2048, 2, 8) == [512] * 8
    assert expert_loads(Routing(), 1, 2, 8) == [1, 1, 0, 0, 0, 0, 0, 0]
    four = expert_loads(Routing(), 4, 2, 8)  # 8 (1 - (3/4)^4) = 5.47 -> 5 distinct experts
    assert sum(four) == 8 and sum(1 for c in four if c) == round(8 * (1 - 0.75**4)) == 5 and max(four) <= 4


@pytest.mark.parametrize("tokens,k,n", [(1, 6, 64), (3, 6, 64), (100, 32, 1 << 20), (2048, 32, 1 << 20), (7, 3, 5)])
def test_uniform_distinct_experts_follow_the_expectation(tokens, k, n):
    loads = expert_loads(Routing(), tokens, k, n)
    assert sum(loads) == tokens * k and max(loads) <= tokens
    hit = sum(1 for c in loads if c)
    assert hit == max(k, min(round(n * (1 - (1 - k / n) ** tokens)), n, tokens * k))


def test_zipf_is_skewed_capped_and_exact():
    loads = expert_loads(parse_routing("zipf:1.2", "t"), 512, 2, 8)
    assert sum(loads) == 1024 and max(loads) <= 512
    assert loads == sorted(loads, reverse=True) and loads[0] > 2 * loads[-1]
    assert expert_loads(parse_routing("zipf:0", "t"), 2048, 2, 8) == [512] * 8
    q = [min(1.0, 1.0)] * 2 + [0.0] * 6  # a rule that always picks the same two experts
    assert expected_distinct(q, 100) == 2
    steep = expert_loads(parse_routing("zipf:16", "t"), 64, 2, 8)  # the top expert is capped at every token
    assert steep[0] == 64 and sum(steep) == 128


def test_routing_file_counts_exact_relative_and_per_layer(tmp_path):
    r = parse_routing(str(_write(tmp_path, "r.json", [10, 0, 6, 0])), "t")
    rel = expert_loads(r, 8, 2, 4)  # 10 > 8 tokens: not a count at this token count, so read as relative loads
    assert sum(rel) == 16 and rel[1] == rel[3] == 0 and max(rel) <= 8 and rel[0] >= rel[2]
    ok = _write(tmp_path, "ok.json", {"counts": [8, 0, 6, 2]})
    assert expert_loads(parse_routing(str(ok), "t"), 8, 2, 4) == [8, 0, 6, 2]
    layers = _write(tmp_path, "l.json", {"counts": [[8, 8, 0, 0], [0, 0, 8, 8]]})
    rl = parse_routing(str(layers), "t")
    assert rl.per_layer and expert_loads(rl, 8, 2, 4, layer=1) == [0, 0, 8, 8]
    with pytest.raises(WorkloadError, match="2 MoE layers"):
        expert_loads(rl, 8, 2, 4, layer=2)
    with pytest.raises(WorkloadError, match="gives 4 counts"):
        expert_loads(rl, 8, 2, 5)


@pytest.mark.parametrize("text,match", [
    ("zipf:-1", "S from 0"), ("zipf:x", "S from 0"), ("lru", "routing must be"), ("nope.json", "does not exist"),
])
def test_bad_routing_options(text, match):
    with pytest.raises(WorkloadError, match=match):
        parse_routing(text, "t")


def test_bad_routing_file(tmp_path):
    for content in ("[-1, 2]", "[0, 0]", '{"counts": "x"}', "[true, 1]"):
        path = tmp_path / "bad.json"
        path.write_text(content)
        with pytest.raises(WorkloadError, match="non-negative"):
            parse_routing(str(path), "t")


# ---------------------------------------------------------------------------- options and limits (no build)
@pytest.mark.parametrize("spec,match", [
    ("mixtral-8x7b:routing=bogus", "routing must be"),
    ("llama-3.1-8b:mlp=switch", "mlp must be omnimoe or peer"),
    ("llama-3.1-8b:experts=4096", "give mlp too"),
    ("llama-3.1-8b:mlp=omnimoe,experts=1000", "must be a square"),
    ("llama-3.1-8b:mlp=peer,topk=30,heads=8", "multiple of heads"),
    ("llama-3.1-8b:mlp=omnimoe,heads=4", "PEER's"),
    ("llama-3.1-8b:mlp=peer,shared=128", "PEER has none"),
    ("llama-3.1-8b:mlp=omnimoe,experts=16777216", "experts must be an integer from 1 to"),
])
def test_moe_option_errors(spec, match):
    with pytest.raises(WorkloadError, match=match):
        load_workload(spec)


MOE_TINY = {
    "architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 64, "intermediate_size": 96,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "num_local_experts": 8,
    "num_experts_per_tok": 2, "vocab_size": 256, "max_position_embeddings": 4096, "torch_dtype": "float32",
}


@pytest.mark.parametrize("change,match", [
    ({"num_hidden_layers": 10**6}, "num_hidden_layers = 1,000,000 is past npukit's limit of 256 layers"),
    ({"hidden_size": 10**7}, "hidden_size = 10,000,000 is past"),
    ({"num_local_experts": 100_000}, "num_local_experts = 100,000 is past npukit's limit of 4,096 experts"),
    ({"num_hidden_layers": 200, "num_local_experts": 4096}, "layers x 4,096 experts is past"),
    ({"text_config": {"num_hidden_layers": 10**6}}, "num_hidden_layers = 1,000,000"),
    ({"auto_map": {"AutoModelForCausalLM": "m.MoE"}}, "custom model code"),
])
def test_moe_config_refused_before_building(tmp_path, change, match):
    path = _write(tmp_path, "config.json", {**MOE_TINY, **change})
    code = ("import sys\nfrom npukit.workloads import load_workload\nfrom npukit.sim import WorkloadError\n"
            f"try:\n    load_workload({('hf:' + str(path) + ':seq=8')!r})\nexcept WorkloadError as e:\n"
            "    print(e)\nprint('transformers' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120).stdout.splitlines()
    assert re.search(match, out[0]) and len(out) == 2 and out[1] == "False", out


# ---------------------------------------------------------------------------- the tracer on torch-only modules
def _fake_experts_model(hidden: int, inter: int, n: int, k: int):
    """A torch-only MoE block with transformers' experts interface (what use_experts_implementation sets)."""
    import torch
    from torch import nn

    class Experts(nn.Module):
        def __init__(self):
            super().__init__()
            self.num_experts, self.has_gate, self.has_bias, self.is_transposed = n, True, False, False
            self.gate_up_proj = nn.Parameter(torch.empty(n, 2 * inter, hidden))
            self.down_proj = nn.Parameter(torch.empty(n, hidden, inter))
            self.act_fn = nn.SiLU()

        def _apply_gate(self, x):
            gate, up = x.chunk(2, dim=-1)
            return self.act_fn(gate) * up

        def forward(self, hidden_states, top_k_index, top_k_weights):  # on meta no token is routed
            return torch.zeros_like(hidden_states)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.gate = nn.Linear(hidden, n, bias=False)
            self.experts = Experts()
            self.shared_expert = nn.Linear(hidden, hidden, bias=False)

        def forward(self, x):
            flat = x.reshape(-1, hidden)
            w, idx = torch.topk(self.gate(flat).softmax(-1), k, dim=-1)
            return self.experts(flat, idx, w).reshape(x.shape) + self.shared_expert(x)

    return Block()


@pytest.mark.parametrize("tokens,routing", [(64, None), (1, None), (3, "zipf:1")])
def test_traced_experts_get_their_routed_tokens(tokens, routing):
    import torch

    from npukit.workloads.trace import trace_workload

    h, inter, n, k = 16, 24, 8, 2
    with torch.device("meta"):
        model = _fake_experts_model(h, inter, n, k)
    rule = parse_routing(routing, "t") if routing else Routing()
    wl = trace_workload(model, torch.empty(1, tokens, h, device="meta"), "moe", routing=rule)
    loads = expert_loads(rule, tokens, k, n)
    gemms = {ly.name: ly for ly in wl.layers if isinstance(ly, Layer)}
    for e, t in enumerate(loads):
        if t:
            assert gemms[f"experts.{e}.gate_up_proj"].shape() == (t, 2 * inter, h, 1)
            assert gemms[f"experts.{e}.down_proj"].shape() == (t, h, inter, 1)
        else:
            assert f"experts.{e}.gate_up_proj" not in gemms  # an expert no token hits fetches no weights
    # router + routed experts (tokens x top_k x 3 H I) + shared expert
    assert sum(ly.macs for ly in gemms.values()) == tokens * n * h + tokens * k * 3 * h * inter + tokens * h * h
    assert wl.meta["moe"] == {"routing": rule.text, "layers": 1,
                              "inactive_params": {"experts": 3 * h * inter * n * (n - k) // n}}


def test_unknown_experts_class_is_refused_on_meta():
    import torch
    from torch import nn

    from npukit.workloads.trace import trace_workload

    class MyExperts(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.empty(4, 8, 8))

        def forward(self, x):
            return x

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin, self.experts = nn.Linear(8, 8), MyExperts()

        def forward(self, x):
            return self.experts(self.lin(x))

    with torch.device("meta"):
        m = M()
    with pytest.raises(WorkloadError, match="'experts' \\(MyExperts\\) ran no expert GEMM"):
        trace_workload(m, torch.empty(2, 8, device="meta"))
    trace_workload(M(), torch.zeros(2, 8))  # real tensors: its own forward runs

    class DenseExperts(MyExperts):  # computes every expert on every token (as Llama-4's): traced as it runs
        def forward(self, x):
            return torch.bmm(x.expand(4, -1, -1), self.w).sum(0)

    with torch.device("meta"):
        m.experts = DenseExperts()
    wl = trace_workload(m, torch.empty(2, 8, device="meta"))
    assert [ly.shape() for ly in wl.layers if isinstance(ly, Layer)][-1] == (2, 8, 8, 4)


def test_omnimoe_and_peer_layers_traced_expert_and_token_centric():
    import torch

    from npukit.models.omnimoe import PEER, OmniMoE
    from npukit.workloads.trace import trace_workload

    h, inter, n_exp, k, tokens = 16, 32, 64, 4, 128
    with torch.device("meta"):
        omni = OmniMoE(h, inter, n_exp, k, backend="torch")
        peer = PEER(h, heads=2, num_experts=n_exp, experts_per_head=2, dim_key=8, non_competing_scores=False)
    x = torch.empty(1, tokens, h, device="meta")
    wl = trace_workload(omni, x, "omni")
    loads = expert_loads(Routing(), tokens, k, n_exp)
    ups = [ly for ly in wl.layers if isinstance(ly, Layer) and "experts_up_m" in ly.name]
    assert sorted((ly.M, ly.batch) for ly in ups) == sorted((m, loads.count(m)) for m in set(loads) if m)
    assert all(ly.N == 1 and ly.K == h for ly in ups)  # one u_e per expert, fetched once for its m tokens
    assert sum(ly.M * ly.batch for ly in ups) == tokens * k
    names = {ly.name for ly in wl.layers if isinstance(ly, Layer)}
    assert {"gate_proj", "up_proj", "down_proj", "router_gate_x", "router_gate_y"} <= names
    wp = trace_workload(peer, x, "peer")
    g = {ly.name: ly for ly in wp.layers if isinstance(ly, Layer)}
    assert g["tokens_up"].shape() == (1, k, h, tokens) and g["tokens_down"].shape() == (1, h, k, tokens)
    assert g["to_queries.0"].shape() == (tokens, 2 * 2 * 8, h, 1)


# ---------------------------------------------------------------------------- slow: transformers models
def mixtral_macs(c: dict, seq: int, batch: int = 1) -> int:
    """Mixtral MACs (prefill of ``seq`` tokens): per layer q and o (T H H each), k and v (T H kv_dim each), the
    attention GEMMs (2 heads T T d), the router (T H E) and top_k experts per token (T k 3 H I); lm_head T H V."""
    t, h, heads = batch * seq, c["hidden_size"], c["num_attention_heads"]
    d = c.get("head_dim") or h // heads
    kv = c["num_key_value_heads"] * d
    layer = (2 * t * h * heads * d + 2 * t * h * kv + 2 * batch * heads * seq * seq * d
             + t * h * c["num_local_experts"] + t * c["num_experts_per_tok"] * 3 * h * c["intermediate_size"])
    return c["num_hidden_layers"] * layer + t * h * c["vocab_size"]


@pytest.mark.slow
def test_tiny_mixtral_prefill_and_decode(tmp_path):
    path = _write(tmp_path, "config.json", MOE_TINY)
    wl = load_workload(f"hf:{path}:seq=64")
    assert sum(ly.macs for ly in wl.layers if isinstance(ly, Layer)) == mixtral_macs(MOE_TINY, 64)
    assert wl.meta["moe"]["layers"] == 2 and wl.meta["active_params"] < wl.meta["params"]
    dec = load_workload(f"hf:{path}:phase=decode,kv=32,batch=4")  # 8 (1 - (3/4)^4) -> 5 experts per layer
    hit = {ly.name.split(".")[5] for ly in dec.layers if ".layers.0.mlp.experts." in ly.name and isinstance(ly, Layer)}
    assert len(hit) == 5
    zipf = load_workload(f"hf:{path}:seq=64,routing=zipf:1.5")
    rows = [ly.M for ly in zipf.layers if isinstance(ly, Layer) and ly.name.startswith("model.layers.0.mlp.experts.")
            and ly.name.endswith("gate_up_proj")]
    assert rows == expert_loads(parse_routing("zipf:1.5", "t"), 64, 2, 8)
    per_layer = _write(tmp_path, "measured.json", {"counts": [[64, 64] + [0] * 6, [0] * 6 + [64, 64]]})
    wl = load_workload(f"hf:{path}:seq=64,routing={per_layer}")
    hit = sorted(ly.name.split(".")[2] + "/" + ly.name.split(".")[5] for ly in wl.layers
                 if isinstance(ly, Layer) and ly.name.endswith("gate_up_proj"))
    assert hit == ["0/0", "0/1", "1/6", "1/7"] and wl.meta["options"]["routing"] == str(per_layer)


def test_hf_spec_options_may_hold_a_colon():
    from npukit.workloads.real_models import _split_path_options

    assert _split_path_options("/m/config.json:seq=8,routing=zipf:1.2") == ("/m/config.json", "seq=8,routing=zipf:1.2")
    assert _split_path_options("/m/config.json") == ("/m/config.json", "")
    assert _split_path_options("/m/config.json:") == ("/m/config.json", "")


@pytest.mark.slow
def test_tiny_deepseek_v2_shared_and_routed_experts(tmp_path):
    cfg = json.loads((ROOT / "workloads/configs/deepseek-v2-lite.json").read_text())
    cfg.update(hidden_size=64, intermediate_size=96, moe_intermediate_size=16, num_hidden_layers=3,
               num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=16, qk_nope_head_dim=8,
               qk_rope_head_dim=8, v_head_dim=8, vocab_size=128, n_routed_experts=8, num_experts_per_tok=3)
    path = _write(tmp_path, "config.json", cfg)
    wl = load_workload(f"hf:{path}:seq=32")
    g = {ly.name: ly for ly in wl.layers if isinstance(ly, Layer)}
    assert "model.layers.0.mlp.experts.0.gate_up_proj" not in g  # first_k_dense_replace = 1: layer 0 is dense
    assert g["model.layers.0.mlp.gate_proj"].N == 96
    routed = [ly for n, ly in g.items() if n.startswith("model.layers.1.mlp.experts.")]
    assert sum(ly.M for ly in routed if ly.name.endswith("gate_up_proj")) == 32 * 3
    assert g["model.layers.1.mlp.shared_experts.gate_proj"].shape() == (32, 2 * 16, 64, 1)  # 2 shared experts
    assert wl.meta["moe"]["layers"] == 2
    dec = load_workload(f"hf:{path}:phase=decode,kv=16")  # the MLA cache holds the latent (16) and rotary key (8)
    g = {ly.name: ly for ly in dec.layers if isinstance(ly, Layer)}
    assert g["model.layers.1.self_attn.kv_b_proj"].M == 17  # transformers expands the latent of every cached token
    assert sum(1 for n in g if n.startswith("model.layers.1.mlp.experts.") and n.endswith("gate_up_proj")) == 3


@pytest.mark.slow
def test_mixtral_8x7b_config_through_cli_matches_the_formula(tmp_path):
    """The done-when check: ``npukit sim --workload hf:PATH/config.json:seq=2048`` within 0.5% of the analytic count
    (2.72e13 MACs; the trace on the meta device used to report 4.12e12, no expert GEMM)."""
    cfg = json.loads((ROOT / "workloads/configs/mixtral-8x7b.json").read_text())
    path = _write(tmp_path, "config.json", cfg)
    out = subprocess.run([sys.executable, "-m", "npukit", "sim", "--workload", f"hf:{path}:seq=2048", "--out",
                          str(tmp_path / "out"), "--quiet"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    macs = int(re.search(r"([0-9,]+) MACs", out.stdout).group(1).replace(",", ""))
    want = mixtral_macs(cfg, 2048)
    assert abs(macs - want) / want < 0.005 and math.isclose(want, 2.72e13, rel_tol=0.01)
    builtin = load_workload("mixtral-8x7b:seq=2048")
    assert sum(ly.macs for ly in builtin.layers if isinstance(ly, Layer)) == macs
    assert round(builtin.meta["params"] / 1e9, 1) == 46.7 and round(builtin.meta["active_params"] / 1e9, 1) == 12.9


@pytest.mark.slow
def test_llama_with_omnimoe_and_peer_mlps():
    dense = load_workload("llama-3.1-8b:seq=256")
    omni = load_workload("llama-3.1-8b:seq=256,mlp=omnimoe,experts=65536,topk=16")
    peer = load_workload("llama-3.1-8b:seq=256,mlp=peer,experts=65536,topk=16,heads=4")
    assert omni.meta["moe"]["layers"] == peer.meta["moe"]["layers"] == 32
    g = {ly.name: ly for ly in peer.layers if isinstance(ly, Layer)}
    assert g["model.layers.31.mlp.tokens_up"].shape() == (1, 16, 4096, 256)
    up = [ly for ly in omni.layers if isinstance(ly, Layer) and ly.name.startswith("model.layers.5.mlp.experts_up")]
    assert sum(ly.M * ly.batch for ly in up) == 256 * 16
    assert "model.layers.0.mlp.gate_proj" in {ly.name for ly in dense.layers}
