"""Psum traffic of a converted model into a :class:`~npukit.sim.Ledger`: :class:`PsumTraffic` counts what the
converted layers move during forwards (GEMM rows, psum-buffer updates, MACs) and records it by the simulator's
one set of psum charging rules (:func:`npukit.sim.psum_path.psum_records`); re-exported by
:mod:`npukit.models.psumquant`."""

from __future__ import annotations

from typing import Any

from torch import nn

from npukit.sim.arch import PsumQuantHW
from npukit.sim.datapath import Bits
from npukit.sim.ledger import Ledger
from npukit.sim.psum_path import PsumCounts, psum_records
from npukit.sim.quant import MULT_BITS

from ._config import PsumQuantConfig, PsumQuantError
from ._exec import TOP_K
from ._layer import psum_layers


def psum_hw(c: PsumQuantConfig) -> PsumQuantHW | None:
    """The psum path hardware a config stands for (None: policy 'none', psums kept whole, or psums as wide as
    pe_psum_bits: as :func:`npukit.sim.psum_path.quantized`, there is nothing to narrow). ``psumquant`` is the
    quantizer, feature unit and scale predictor; every other quantizing policy (static, tile-max, a2q, sigma)
    is charged as a quantizer with stored scales (``static``): their scale logic is not priced."""
    if c.policy == "none" or c.psum_buffer_bits >= c.pe_psum_bits:
        return None
    return PsumQuantHW(policy="psumquant" if c.policy == "psumquant" else "static", semantics=c.semantics,
                       scale_form=c.scale_form, multiplier_bits=MULT_BITS, top_k=TOP_K)


def datapath_bits(c: PsumQuantConfig) -> Bits:
    """The datapath widths of a config: operands at ``wa_bits`` (32 for float), ``pe_psum_bits``, and the psum
    buffer at ``psum_buffer_bits`` (``pe_psum_bits`` when policy is 'none': unquantized psums)."""
    wa = c.wa_bits or 32
    buf = c.pe_psum_bits if c.policy == "none" else c.psum_buffer_bits
    return Bits(input=wa, weight=wa, pe_psum=c.pe_psum_bits, psum_buffer=buf, output=wa)


class PsumTraffic:
    """Context manager counting the psum traffic of the converted layers during forwards.

    ``record(ledger, scope=None)`` writes per layer (scope = layer name under ``scope``) what
    :func:`npukit.sim.psum_path.psum_records` makes of the layer's GEMMs (M rows in all, K, N, the
    config's array) at the widths :func:`datapath_bits` and the hardware :func:`psum_hw`: ``psum_buffer``
    reads and writes and ``psum_adder`` adds, M*N*(kf-1) each (the last K-fold's sum goes to the
    output, not back to the buffer), and the ``psum_quantizer``/``psum_features``/``psum_predictor``
    work of a quantizing policy; plus ``pe_array`` ``mac`` at (wa, wa, pe_psum_bits) (wa = ``wa_bits``
    or 32): the layer's MACs.

    The psum_buffer SRAM needs a capacity for energy: pass ``arch`` (an :class:`npukit.sim.Arch`)
    to declare the simulator's components, or declare ``psum_buffer`` yourself. Converted attention
    matmuls (:class:`PsumMatmul`) are not counted."""

    def __init__(self, model: nn.Module) -> None:
        self.layers = psum_layers(model)
        if not self.layers:
            raise PsumQuantError("PsumTraffic: the model has no converted layer; call convert(model, config) first")

    def __enter__(self) -> PsumTraffic:
        for _, layer in self.layers:
            layer.traffic = {}
        self.counts: dict[str, dict[str, float]] = {}
        return self

    def __exit__(self, *exc: Any) -> None:
        for name, layer in self.layers:
            self.counts[name] = dict(layer.traffic or {})
            layer.traffic = None

    def record(self, ledger: Ledger, scope: str | None = None, arch: Any = None) -> Ledger:
        """Write the counted traffic into ``ledger`` (see the class docstring); returns it."""
        if arch is not None:
            from npukit.sim.simulator import declare_components

            declare_components(ledger, arch)
        for name, layer in self.layers:
            t = self.counts.get(name, {})
            if not t:
                continue
            c, g = layer.config, layer.geom
            sc = "/".join(p for p in (scope, name or "root") if p)
            updates = int(t["tile_psums"] - t["outputs"])  # K-folds after the first
            counts = PsumCounts(int(t["outputs"]) // g.N, g.K, g.N, g.rows, g.cols, updates, updates)
            b = datapath_bits(c)
            for comp, act, bits, n in psum_records(counts, b, psum_hw(c)):
                ledger.record(comp, act, bits, n, sc)
            ledger.record("pe_array", "mac", (b.input, b.weight, b.pe_psum), t["macs"], sc)
        return ledger
