"""replace_mlp: OmniMoE / PEER as drop-in MLPs of tiny random-init Llama and Qwen2/Qwen3 models (offline):
the layers are swapped, sizes default to the replaced MLP's, the model trains, and a save_pretrained folder
reloads to the same logits."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from npukit.models.omnimoe import PEER, OmniMoE  # noqa: E402
from npukit.models.replace_mlp import (  # noqa: E402
    OmniMoEConfig,
    PEERConfig,
    active_mlp_params,
    load_replaced,
    replace_mlp,
)
from npukit.sim.errors import ConfigError  # noqa: E402

SMALL = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=64)


def _llama() -> torch.nn.Module:
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(**SMALL))


def _qwen(version: int) -> torch.nn.Module:
    torch.manual_seed(1)
    if version == 3:
        return transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**SMALL, head_dim=8, tie_word_embeddings=True))
    return transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**SMALL))


def test_omnimoe_replaces_every_mlp_with_defaults_from_the_mlp() -> None:
    m = _llama()
    dense = m.model.layers[0].mlp
    replace_mlp(m, OmniMoEConfig(num_experts=16, top_k=4))
    for layer in m.model.layers:
        assert isinstance(layer.mlp, OmniMoE)
        assert (layer.mlp.hidden_size, layer.mlp.intermediate_size) == (32, 64)
    assert torch.equal(m.model.layers[0].mlp.gate_proj.weight, dense.gate_proj.weight)  # shared SwiGLU = old MLP
    assert active_mlp_params(m.model.layers[0].mlp) == 3 * 32 * 64 + 2 * 4 * 32 + 2 * 4 * 32
    assert active_mlp_params(dense) == 3 * 32 * 64
    # with the atomic experts' output zeroed the layer is the old MLP exactly
    x = torch.randn(5, 32)
    with torch.no_grad():
        m.model.layers[0].mlp.down_embed.weight.zero_()
        assert torch.allclose(m.model.layers[0].mlp(x), dense(x), atol=1e-6)
    replace_mlp(_qwen(2), OmniMoEConfig(num_experts=16, top_k=2, intermediate_size=24))


@pytest.mark.parametrize("make, cfg", [
    (_llama, OmniMoEConfig(num_experts=16, top_k=4)),
    pytest.param(lambda: _qwen(2), PEERConfig(num_experts=16, heads=2, experts_per_head=2), marks=pytest.mark.slow),
    pytest.param(lambda: _qwen(3), OmniMoEConfig(num_experts=9, top_k=3, intermediate_size=16), marks=pytest.mark.slow),
    pytest.param(lambda: _qwen(3), PEERConfig(num_experts=16, heads=2, experts_per_head=2, impl="peer-pytorch"),
                 marks=pytest.mark.slow),
])
def test_save_pretrained_reloads_to_the_same_logits(make, cfg, tmp_path) -> None:
    m = replace_mlp(make(), cfg)
    ids = torch.randint(0, 64, (2, 9))
    m.train()
    opt = torch.optim.SGD(m.parameters(), lr=0.5)
    m(ids, labels=ids).loss.backward()  # one training step: new weights, and the routers' BatchNorm statistics move
    opt.step()
    m.eval()
    m.save_pretrained(tmp_path)
    m2 = load_replaced(tmp_path)
    assert type(m2) is type(m) and type(m2.model.layers[1].mlp) is type(m.model.layers[1].mlp)
    with torch.no_grad():
        assert torch.equal(m(ids).logits, m2(ids).logits)
    # the untrained model's logits differ: the equality above is the reloaded state's doing
    other = replace_mlp(make(), cfg).eval()
    with torch.no_grad():
        assert not torch.allclose(other(ids).logits, m(ids).logits)


def test_peer_npukit_and_peer_pytorch_share_a_state_dict() -> None:
    cfg = dict(num_experts=16, heads=2, experts_per_head=2)
    a = replace_mlp(_qwen(2), PEERConfig(**cfg))
    b = replace_mlp(_qwen(2), PEERConfig(**cfg, impl="peer-pytorch"))
    assert isinstance(a.model.layers[0].mlp, PEER)
    b.load_state_dict(a.state_dict())
    ids = torch.randint(0, 64, (1, 7))
    with torch.no_grad():
        la, lb = a.eval()(ids).logits, b.eval()(ids).logits
    assert torch.allclose(la, lb, atol=1e-5)


def test_replace_mlp_rejects_bad_input(tmp_path) -> None:
    with pytest.raises(ConfigError, match="no SwiGLU"):
        replace_mlp(torch.nn.Linear(3, 3), OmniMoEConfig(num_experts=16, top_k=2))
    with pytest.raises(ConfigError, match="OmniMoEConfig or a PEERConfig"):
        replace_mlp(_llama(), {"num_experts": 16})
    with pytest.raises(ConfigError, match="top_k"):
        replace_mlp(_llama(), OmniMoEConfig(num_experts=16, top_k=17))
    with pytest.raises(ConfigError, match="square"):
        replace_mlp(_llama(), PEERConfig(num_experts=20))
    with pytest.raises(ConfigError, match="SiLU"):
        replace_mlp(transformers.LlamaForCausalLM(transformers.LlamaConfig(**SMALL, hidden_act="gelu")),
                    OmniMoEConfig(num_experts=16, top_k=2))
    with pytest.raises(ConfigError, match="config.json"):
        load_replaced(tmp_path)


@pytest.mark.slow
@pytest.mark.ml
@pytest.mark.parametrize("cfg", [None, OmniMoEConfig(num_experts=16, top_k=4), PEERConfig(num_experts=16, heads=2,
                                                                                          experts_per_head=2)])
def test_replaced_model_still_trains(cfg) -> None:
    torch.manual_seed(0)
    m = _llama() if cfg is None else replace_mlp(_llama(), cfg)
    ids = torch.arange(64).repeat(4, 1)[:, :32] % 16  # a learnable pattern: counting mod 16
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    losses = []
    for _ in range(30):
        loss = m(ids, labels=ids).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]
    if cfg is not None:
        assert m.model.layers[0].mlp.down_embed.weight.grad is not None if isinstance(cfg, OmniMoEConfig) else \
            m.model.layers[0].mlp.weight_up_embed.weight.grad is not None


def test_router_temperature_sharpens_routing_and_survives_reload(tmp_path) -> None:
    torch.manual_seed(3)
    base = OmniMoE(16, 8, 64, 8).eval()
    sharp = OmniMoE(16, 8, 64, 8, router_temperature=0.5).eval()
    sharp.load_state_dict(base.state_dict())
    x = torch.randn(32, 16)
    with torch.no_grad():
        (s1, i1), (s2, i2) = base.route(x), sharp.route(x)
    assert torch.equal(i1.sort(1).values, i2.sort(1).values)  # same experts (the order of scores is kept) ...
    assert float(s2.exp().sum(1).mean()) > float(s1.exp().sum(1).mean())  # ... with more of the weight on them
    with pytest.raises(ConfigError, match="router_temperature"):
        OmniMoE(16, 8, 64, 8, router_temperature=0.0)
    m = replace_mlp(_llama(), OmniMoEConfig(num_experts=16, top_k=4, router_temperature=0.5)).eval()
    m.save_pretrained(tmp_path)
    m2 = load_replaced(tmp_path)
    assert m2.model.layers[0].mlp.router_temperature == 0.5
    ids = torch.randint(0, 64, (1, 7))
    with torch.no_grad():
        assert torch.equal(m(ids).logits, m2(ids).logits)


@pytest.mark.parametrize("cfg", [None, OmniMoEConfig(num_experts=16, top_k=4), PEERConfig(num_experts=16, heads=2,
                                                                                          experts_per_head=2)])
def test_sparse_recipe_groups_every_parameter_once(cfg) -> None:
    from npukit.experiments.omnimoe._quality import param_groups

    m = _llama() if cfg is None else replace_mlp(_llama(), cfg)
    groups = param_groups(m, "sparse", lr=1e-3, expert_lr=3.0)
    ids = [id(p) for g in groups for p in g["params"]]
    assert sorted(ids) == sorted(id(p) for p in m.parameters()) and len(set(ids)) == len(ids)
    names = {id(p): n for n, p in m.named_parameters()}
    by = {(g["lr"], g["weight_decay"]): {names[id(p)] for p in g["params"]} for g in groups}
    decay = by[(1e-3, 0.01)]
    assert "model.layers.0.self_attn.q_proj.weight" in decay and "lm_head.weight" in decay
    assert not any("norm" in n or "embed" in n for n in decay)
    if cfg is None:
        assert (3e-3, 0.0) not in by
    else:
        experts = by[(3e-3, 0.0)]
        assert "model.layers.0.mlp.keys" in experts if isinstance(cfg, PEERConfig) else \
            "model.layers.0.mlp.up_embed.weight" in experts
    uniform = param_groups(m, "uniform", lr=1e-3)
    assert len(uniform) == 1 and len(uniform[0]["params"]) == len(list(m.parameters()))
