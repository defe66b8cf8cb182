"""CacheEdit sparse-token kernels: Triton (under TRITON_INTERPRET=1, in a child process, because the
variable must be set before triton is first imported) against the torch references, and the
references against plain dense computations."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from npukit.kernels.cacheedit import ops


def _case(b: int, n: int, a: int, d: int, seed: int, pad: bool) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(b, n, d, generator=g)
    idx = torch.stack([torch.randperm(n, generator=g)[:a] for _ in range(b)])
    if pad:
        idx[0, a // 2:] = -1
    shift, scale, gate = (torch.randn(b, d, generator=g) for _ in range(3))
    y = torch.randn(b, a, d, generator=g)
    return h, idx, shift, scale, gate, y


def _child() -> None:
    assert os.environ.get("TRITON_INTERPRET") == "1"
    from npukit.kernels.cacheedit import _triton as tk

    res = {}
    for b, n, a, d, pad in [(2, 37, 11, 24, True), (3, 132, 20, 96, False), (1, 9, 9, 5, False)]:
        h, idx, shift, scale, gate, y = _case(b, n, a, d, 7 + d, pad)
        key = f"{b}x{n}x{a}x{d}"
        res[f"gather {key}"] = (tk.gather_modulate_triton(h, idx, shift, scale) - ops.gather_modulate_ref(h, idx, shift, scale)
                                ).abs().max().item()
        h1, h2 = h.clone(), h.clone()
        tk.scatter_residual_triton(h1, idx, y, gate)
        ops.scatter_residual_ref(h2, idx, y, gate)
        res[f"scatter-gate {key}"] = (h1 - h2).abs().max().item()
        h1, h2 = h.clone(), h.clone()
        tk.scatter_residual_triton(h1, idx, y, None)
        ops.scatter_residual_ref(h2, idx, y, None)
        res[f"scatter-copy {key}"] = (h1 - h2).abs().max().item()
        k1, v1, k2, v2 = h.clone(), -h.clone(), h.clone(), -h.clone()
        tk.kv_update_triton(k1, v1, idx, y, 2 * y)
        ops.kv_update_ref(k2, v2, idx, y, 2 * y)
        res[f"kv {key}"] = max((k1 - k2).abs().max().item(), (v1 - v2).abs().max().item())
        res[f"changed {key}"] = (k1 - h).abs().max().item()  # the update really wrote something
    # the hooks' layout on CUDA: per-head K/V caches (B, N, H, Dh) viewed as (B, N, H * Dh), one row set per batch
    torch.manual_seed(0)
    kc, vc = torch.randn(2, 40, 2, 8), torch.randn(2, 40, 2, 8)
    rows = torch.tensor([3, 7, 20, 39])
    k, v = torch.randn(2, 4, 2, 8), torch.randn(2, 4, 2, 8)
    k1, v1 = kc.clone(), vc.clone()
    tk.kv_update_triton(k1.view(2, 40, -1), v1.view(2, 40, -1), rows.expand(2, 4), k.reshape(2, 4, -1), v.reshape(2, 4, -1))
    k2, v2 = kc.clone(), vc.clone()
    k2.index_copy_(1, rows, k)
    v2.index_copy_(1, rows, v)
    res["kv hook layout"] = max((k1 - k2).abs().max().item(), (v1 - v2).abs().max().item())
    print("RESULT " + json.dumps(res))


@pytest.mark.slow
def test_triton_kernels_match_torch_under_interpreter() -> None:
    env = dict(os.environ, TRITON_INTERPRET="1")
    p = subprocess.run([sys.executable, __file__, "--child"], env=env, capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stderr[-3000:]
    line = next(ln for ln in p.stdout.splitlines() if ln.startswith("RESULT "))
    res = json.loads(line[len("RESULT "):])
    assert len(res) == 16
    for k, v in res.items():
        if k.startswith("changed"):
            assert v > 0.1, k
        else:
            assert v < 1e-4, (k, v)


@pytest.mark.parametrize("pad", [False, True])
def test_references_match_dense(pad: bool) -> None:
    b, n, a, d = 2, 20, 6, 16
    h, idx, shift, scale, gate, y = _case(b, n, a, d, 3, pad)
    out = ops.gather_modulate(h, idx, shift, scale)  # auto -> torch on CPU
    for i in range(b):
        for j in range(a):
            r = max(int(idx[i, j]), 0)
            want = F.layer_norm(h[i, r], (d,)) * (1 + scale[i]) + shift[i]
            assert torch.allclose(out[i, j], want, atol=1e-5)
    h2 = h.clone()
    ops.scatter_residual(h2, idx, y, gate)
    want = h.clone()
    for i in range(b):
        for j in range(a):
            r = int(idx[i, j])
            if r >= 0:
                want[i, r] += gate[i] * y[i, j]
    assert torch.allclose(h2, want, atol=1e-6)
    assert not torch.allclose(h2, h)


def test_active_attention_equals_sdpa_rows() -> None:
    g = torch.Generator().manual_seed(0)
    b, n, d, heads = 2, 12, 16, 4
    q, k, v = (torch.randn(b, n, d, generator=g) for _ in range(3))
    full = ops.active_attention(q, k, v, heads)
    rows = torch.tensor([1, 5, 7])
    part = ops.active_attention(q[:, rows], k, v, heads)
    assert torch.allclose(part, full[:, rows], atol=1e-5)


def test_bad_impl_is_a_config_error() -> None:
    from npukit.sim.errors import ConfigError

    h, idx, shift, scale, _, _ = _case(1, 4, 2, 8, 0, False)
    with pytest.raises(ConfigError, match="unknown kernel backend"):
        ops.gather_modulate(h, idx, shift, scale, backend="cuda")


if __name__ == "__main__" and "--child" in sys.argv:
    _child()
