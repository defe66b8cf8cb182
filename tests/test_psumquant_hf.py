"""PsumQuant on transformers models as they are: every nn.Linear, and QK^T / PV through transformers'
attention interface (the "npukit_psum" implementation), on tiny random-init Llama and BERT models."""

from __future__ import annotations

import copy

import pytest
import torch

transformers = pytest.importorskip("transformers")

from npukit.models.psumquant import (  # noqa: E402
    PsumQuantConfig,
    PsumQuantError,
    PsumQuantLayer,
    convert,
    fit_report,
    psum_layers,
    psum_matmuls,
    unconvert,
)
from npukit.models.psumquant import _hf as _psum_hf  # noqa: E402


def _llama() -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return transformers.LlamaForCausalLM(cfg).eval(), {"input_ids": torch.randint(0, 64, (2, 12))}


def _bert() -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    torch.manual_seed(1)
    cfg = transformers.BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=64, max_position_embeddings=32)
    mask = torch.ones(2, 10, dtype=torch.long)
    mask[1, 7:] = 0  # padding: the additive mask must reach the attention function
    return transformers.BertModel(cfg).eval(), {"input_ids": torch.randint(0, 50, (2, 10)), "attention_mask": mask}


def _out(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    with torch.no_grad():
        o = model(**batch)
    return o.logits if hasattr(o, "logits") else o.last_hidden_state


FLOAT32 = PsumQuantConfig(rows=8, cols=8, psum_buffer_bits=32, policy="none", wa_bits=None)


@pytest.mark.parametrize("make", [_llama, _bert])
def test_32_bit_none_equals_the_unconverted_model(make) -> None:
    model, batch = make()
    ref = _out(model, batch)
    q = convert(copy.deepcopy(model), FLOAT32, [batch], matmuls=True)
    n_linear = sum(isinstance(m, torch.nn.Linear) for m in model.modules())
    n_attn = len(_psum_hf.attention_modules(model))
    assert n_attn == 2 and len(psum_layers(q)) == n_linear and len(psum_matmuls(q)) == 2 * n_attn
    assert q.config._attn_implementation == _psum_hf.ATTN_NAME
    # float32 K-tiles of 8 summed in another order than the BLAS GEMM: equal to float32 rounding
    torch.testing.assert_close(_out(q, batch), ref, rtol=1e-5, atol=1e-5)
    u = unconvert(q)
    assert u.config._attn_implementation == model.config._attn_implementation
    assert not any(n.endswith(("psum_qk", "psum_pv")) for n, _ in u.named_modules())
    torch.testing.assert_close(_out(u, batch), ref, rtol=0, atol=0)


def test_attention_slots_are_really_used() -> None:
    model, batch = _llama()
    ref = _out(model, batch)
    cfg = PsumQuantConfig(rows=8, cols=8, psum_buffer_bits=4, policy="static", wa_bits=None)
    q = convert(copy.deepcopy(model), cfg, [batch], matmuls=True, skip=[n for n, m in model.named_modules()
                                                                       if isinstance(m, torch.nn.Linear)])
    assert not psum_layers(q) and len(psum_matmuls(q)) == 4
    assert float((_out(q, batch) - ref).abs().max()) > 1e-3  # 4-bit psums in QK^T / PV change the logits


def _layer_inputs(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, tuple[torch.Tensor, ...]]:
    """Inputs of every nn.Linear and attention Matmul slot of the float32 model, by qualified name."""
    ref = copy.deepcopy(model)
    _psum_hf.install(ref)
    seen: dict[str, tuple[torch.Tensor, ...]] = {}
    hooks = [m.register_forward_pre_hook(lambda mod, args, n=n: seen.__setitem__(n, tuple(a.detach() for a in args)))
             for n, m in ref.named_modules() if isinstance(m, torch.nn.Linear) or n.endswith(("psum_qk", "psum_pv"))]
    _out(ref, batch)
    for h in hooks:
        h.remove()
    return seen


@pytest.mark.slow  # the psumquant fit tries ~14 margins per layer: ~1 min on 2 CPU cores
@pytest.mark.parametrize("make", [_llama, _bert])
def test_8_bit_psumquant_error_per_layer_is_what_fit_report_says(make) -> None:
    """The chosen margin's calibration MSE in fit_report is the psum error of that layer (all calibration
    rows are kept): re-measured here on the float32 model's inputs to the layer, psum domain = real units."""
    model, batch = make()
    cfg = PsumQuantConfig(rows=8, cols=8, psum_buffer_bits=8, policy="psumquant", wa_bits=None)
    q = convert(copy.deepcopy(model), cfg, [batch], matmuls=True)
    rep = fit_report(q)
    inputs = _layer_inputs(model, batch)
    mods = dict(q.named_modules())
    assert set(rep) == set(inputs)
    errs = []
    for name, r in rep.items():
        m, args = mods[name], inputs[name]
        with torch.no_grad():
            if isinstance(m, PsumQuantLayer):
                bias = m.orig.bias if m.orig.bias is not None else 0.0
                y, exact = m(*args) - bias, args[0] @ m.orig.weight.T
            else:
                y, exact = m(*args), args[0] @ args[1]
        mse = float((y - exact).double().square().mean())
        assert mse == pytest.approx(min(r["margin_mse"].values()), rel=1e-3, abs=1e-12), name
        errs.append(mse)
    assert max(errs) > 0  # 8 bits do cost something


def test_bad_input() -> None:
    model, batch = _llama()
    q = convert(copy.deepcopy(model), FLOAT32, None, matmuls=True)
    with pytest.raises(PsumQuantError, match="already converted"):
        convert(q, FLOAT32, matmuls=True)
    mm = psum_matmuls(q)[0][1]
    with pytest.raises(PsumQuantError, match="equal leading dims"):
        mm(torch.zeros(2, 3, 4), torch.zeros(3, 4, 5))
    with pytest.raises(PsumQuantError, match="attention sinks"):
        _psum_hf.psum_attention(torch.nn.Module(), torch.zeros(1, 1, 2, 4), torch.zeros(1, 1, 2, 4),
                                torch.zeros(1, 1, 2, 4), None, s_aux=torch.zeros(1))
