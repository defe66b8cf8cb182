"""OmniMoE and PEER layers: reference semantics, dtypes, training, ledger, bad input."""

import pytest
import torch

from npukit.models.omnimoe import PEER, OmniMoE
from npukit.models.omnimoe._reference import reference_forward, reference_route
from npukit.sim.errors import ConfigError
from npukit.sim.ledger import Ledger

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # torch on one thread (conftest)


REF_KEYS = {"gate_proj.weight", "up_proj.weight", "down_proj.weight", "router_gate_x.weight", "router_gate_y.weight",
            "router_norm_x.running_mean", "router_norm_x.running_var", "router_norm_x.num_batches_tracked",
            "router_norm_y.running_mean", "router_norm_y.running_var", "router_norm_y.num_batches_tracked",
            "up_embed.weight", "down_embed.weight"}


@pytest.mark.parametrize("train", [False, True])
def test_omnimoe_equals_reference_algorithm(train):
    torch.manual_seed(0)
    m = OmniMoE(32, 48, 256, 12)
    assert set(m.state_dict()) == REF_KEYS  # OmniMoE_Pytorch's parameter names
    with torch.no_grad():  # non-trivial BatchNorm running statistics
        m.router_norm_x.running_mean.normal_()
        m.router_norm_x.running_var.uniform_(0.5, 2)
    m.train(train)
    x = torch.randn(3, 7, 32)
    ref_m = OmniMoE(32, 48, 256, 12)
    ref_m.load_state_dict(m.state_dict())
    ref_m.train(train)
    s, i = m.route(x.reshape(-1, 32))
    s_ref, i_ref = reference_route(ref_m, x.reshape(-1, 32))
    assert torch.equal(i, i_ref)
    assert torch.allclose(s, s_ref)
    y, y_ref = m(x), reference_forward(ref_m, x)
    assert y.shape == x.shape
    assert ((y - y_ref).norm() / y_ref.norm()).item() < 1e-5


def test_omnimoe_gradients_match_reference():
    torch.manual_seed(1)
    m = OmniMoE(16, 24, 64, 5).double()
    ref_m = OmniMoE(16, 24, 64, 5).double()
    ref_m.load_state_dict(m.state_dict())
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    m(x).square().sum().backward()
    reference_forward(ref_m, x).square().sum().backward()
    for (name, p), q in zip(m.named_parameters(), ref_m.parameters(), strict=True):
        assert torch.allclose(p.grad, q.grad, rtol=1e-8, atol=1e-10), name


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_omnimoe_trains_in_every_dtype(dtype):
    torch.manual_seed(2)
    m = OmniMoE(32, 32, 64, 4).to(dtype)
    x = torch.randn(4, 8, 32).to(dtype)
    target = torch.randn(4, 8, 32).to(dtype)
    opt = torch.optim.SGD(m.parameters(), lr=0.05)
    losses = []
    for _ in range(6):
        loss = (m(x).float() - target.float()).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert m(x).dtype == dtype
    assert all(p.grad is None or p.grad.dtype == dtype for p in m.parameters())
    assert losses[-1] < losses[0]


def test_omnimoe_ledger_records_every_part():
    led = Ledger()
    m = OmniMoE(16, 32, 64, 4, ledger=led)
    m(torch.randn(10, 16)).sum().backward()
    scopes = {sc for sc, *_ in led.counts}
    assert {"router", "scheduler", "mlp", "expert_fwd", "expert_bwd", "router_bwd", "mlp_bwd"} <= scopes
    T, H, k, n, I = 10, 16, 4, 8, 32
    assert led.count("alu", "fp_mac", "router") == T * 2 * n * H
    assert led.count("alu", "fp_mac", "mlp") == 3 * T * H * I
    assert led.count("alu", "fp_mac", "expert_fwd") == 2 * T * k * H


def test_peer_matches_peer_pytorch():
    ref_cls = pytest.importorskip("PEER_pytorch").PEER
    torch.manual_seed(3)
    x = torch.randn(2, 5, 32)
    for competing in (False, True):
        ref = ref_cls(32, heads=2, num_experts=64, num_experts_per_head=4, non_competing_scores=not competing)
        p = PEER(32, heads=2, num_experts=64, experts_per_head=4, non_competing_scores=not competing)
        p.load_state_dict(ref.state_dict())
        y, y_ref = p(x), ref(x)
        assert ((y - y_ref).norm() / y_ref.norm()).item() < 1e-5
        y.sum().backward()
        y_ref.sum().backward()
        assert torch.allclose(p.weight_up_embed.weight.grad, ref.weight_up_embed.weight.grad, atol=1e-6)
        assert torch.allclose(p.keys.grad, ref.keys.grad, atol=1e-5)


def test_peer_half_precision_and_ledger():
    led = Ledger()
    p = PEER(16, heads=2, num_experts=16, experts_per_head=2, non_competing_scores=False, ledger=led).to(torch.bfloat16)
    y = p(torch.randn(3, 16, dtype=torch.bfloat16))
    y.float().sum().backward()
    assert y.dtype == torch.bfloat16 and p.weight_down_embed.weight.grad.dtype == torch.bfloat16
    assert led.count("alu", "fp_mac", "token_fwd") == 2 * 3 * 4 * 16


def test_layers_reject_bad_configuration():
    with pytest.raises(ConfigError, match="top_k"):
        OmniMoE(16, 16, 16, 17)
    with pytest.raises(ConfigError, match="hidden_size"):
        OmniMoE(0, 16, 16, 2)
    with pytest.raises(ConfigError, match="square"):
        PEER(16, num_experts=20)
    with pytest.raises(ConfigError, match="expects inputs"):
        OmniMoE(16, 16, 16, 2)(torch.randn(3, 8))
