"""Psum traffic of a converted model into a :class:`~npukit.sim.Ledger`: :class:`PsumTraffic` counts what the
converted layers move during forwards (psum-buffer writes and reads, psum adds, quantizer work, MACs) and
records it at the psum width; re-exported by :mod:`npukit.models.psumquant`."""

from __future__ import annotations

from typing import Any

from torch import nn

from npukit.sim.ledger import Ledger

from ._config import PsumQuantError
from ._layer import psum_layers


class PsumTraffic:
    """Context manager counting the psum traffic of the converted layers during forwards.

    ``record(ledger, scope=None)`` writes per layer (scope = layer name under ``scope``):

    * ``psum_buffer`` ``sram_write`` at W bits: M*N*kf (every K-tile writes each output),
      ``sram_read`` at W bits: M*N*(kf-1) (read-modify-write), ``psum_adder`` ``int_add`` at W bits:
      M*N*(kf-1), where W = B for buffer semantics and ``acc_bits`` for transfer semantics and for
      policy 'none' (unquantized psums);
    * ``psum_quantizer``: ``int_mult`` at (psum_bits, 16) per tile psum with ``mult_shift`` scales,
      and ``int_add`` at psum_bits (the rounding increment) per tile psum, unless policy is 'none';
    * ``pe_array`` ``mac`` at (wa, wa, psum_bits) (wa = ``wa_bits`` or 32): the layer's MACs.

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
            c = layer.config
            sc = "/".join(p for p in (scope, name or "root") if p)
            quantized = c.policy != "none"
            w = c.bits if (quantized and c.semantics == "buffer") else c.acc_bits
            writes = t["tile_psums"]
            reads = t["tile_psums"] - t["outputs"]
            ledger.record("psum_buffer", "sram_write", w, writes, sc)
            ledger.record("psum_buffer", "sram_read", w, reads, sc)
            ledger.record("psum_adder", "int_add", w, reads, sc)
            if quantized:
                if c.scale_form == "mult_shift":
                    ledger.record("psum_quantizer", "int_mult", (c.psum_bits, 16), writes, sc)
                ledger.record("psum_quantizer", "int_add", c.psum_bits, writes, sc)
            wa = c.wa_bits or 32
            ledger.record("pe_array", "mac", (wa, wa, c.psum_bits), t["macs"], sc)
        return ledger
