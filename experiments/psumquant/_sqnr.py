"""How accurate the psums are, layer by layer, when top-1 no longer tells the policies apart.

:func:`layer_sqnr` feeds every converted layer the input it gets in the model with unquantized (32-bit)
psums, runs the layer once with 32-bit psums and once under each (policy, bits), and reports the
signal-to-quantization-noise ratio of its output: ``10 log10(sum y^2 / sum (y_B - y)^2)`` in dB, with
``y`` the layer's output without its bias (the GEMM result in real units) and ``y_B - y`` the error the
B-bit psums add (weights and activations are int8 in both, so only the psum error is measured).
Errors do not compound across layers here; the logit SQNR of ``_vision_rows`` measures the whole net.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch


def sqnr_db(ref: torch.Tensor, out: torch.Tensor) -> float:
    """10 log10(sum ref^2 / sum (out - ref)^2) in dB; inf when equal."""
    err = float((out.double() - ref.double()).square().sum())
    sig = float(ref.double().square().sum())
    return math.inf if err == 0 else 10.0 * math.log10(max(sig, 1e-300) / err)


class LayerProbe:
    """The inputs every converted layer of ``sweep`` gets for images ``x`` with 32-bit psums, and its
    32-bit-psum outputs (bias removed); :meth:`rows` measures the sweep's current setting on them."""

    @torch.no_grad()
    def __init__(self, sweep: Any, x: torch.Tensor) -> None:
        from npukit.models.psumquant import psum_layers, reconfigure

        model = sweep.model
        first = psum_layers(model)[0][1].config  # a sweep runs every layer at one policy and width
        reconfigure(model, policy="none")
        self.layers = psum_layers(model)
        self.seen: dict[str, torch.Tensor] = {}
        hooks = [m.register_forward_hook(lambda _m, inp, _out, n=n: self.seen.__setitem__(n, inp[0].detach()))
                 for n, m in self.layers]
        try:
            model(x)
            self.ref = {n: _no_bias(m, m(self.seen[n])) for n, m in self.layers}
        finally:
            for h in hooks:
                h.remove()
            reconfigure(model, policy=first.policy, psum_buffer_bits=first.psum_buffer_bits)  # back to the sweep's setting

    @torch.no_grad()
    def rows(self) -> list[dict[str, Any]]:
        """Per layer under the sweep's current policy and bits: ``sqnr_db``, ``K``, ``k_tiles``."""
        out = []
        for n, m in self.layers:
            out.append({"layer": n, "policy": m.config.policy, "bits": m.config.psum_buffer_bits, "K": m.geom.K,
                        "k_tiles": m.geom.kf, "sqnr_db": sqnr_db(self.ref[n], _no_bias(m, m(self.seen[n])))})
        return out


def _no_bias(m: Any, y: torch.Tensor) -> torch.Tensor:
    b = m.orig.bias
    if b is None:
        return y
    return y - b.detach().view(1, -1, 1, 1) if y.dim() == 4 else y - b.detach()


def layer_sqnr(sweep: Any, x: torch.Tensor, pairs: Sequence[tuple[str, int]]) -> list[dict[str, Any]]:
    """Per converted layer of ``sweep`` (a :class:`~._policy.PsumSweep`) and (policy, bits) in
    ``pairs``: ``sqnr_db`` of the layer's output on the inputs that ``x`` produces with 32-bit psums,
    ``K`` and ``k_tiles`` of the layer. The sweep is left at the last pair."""
    probe = LayerProbe(sweep, x)
    rows = []
    for pol, bits in pairs:
        sweep.set(pol, bits)
        rows += probe.rows()
    return rows
