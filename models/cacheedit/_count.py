"""Count the work a diffusers transformer actually executes (MACs, bytes), whatever cache hooks skip it.

:class:`WorkCounter` puts PyTorch forward hooks on every ``nn.Linear`` of the transformer and on its
transformer pre-forward (to learn each call's sequence length). A cache that skips a block, an attention
or a token never calls those Linears, so only executed work is counted:

* a Linear on ``r`` rows (tokens x batch): ``r * in * out`` MACs; bytes (fp16, 2 bytes an element, each
  operand moved once): weights ``in * out * 2`` (+ bias) and activations ``r * (in + out) * 2``;
* the attention core of a block whose query projection (``to_q`` and, double-stream, ``add_q_proj``) ran on
  ``r`` rows, over the call's ``S`` keys (text + every image token: CacheEdit's spliced cached K/V count
  as keys): ``2 * r * S * inner`` MACs (scores and weighted values) and ``(2 * r + 2 * B * S) * inner * 2``
  bytes (Q, O; K, V).

Norms, RoPE, activations and the embedding of the timestep are not counted (per-token vector work, under
1 % of a block's MACs at these widths). :meth:`WorkCounter.record` writes a call group's counts into an
:class:`npukit.sim.ledger.Ledger` as executed and (against a full call's count) skipped work.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

BYTES = 2  # fp16 element (bytes)


class WorkCounter:
    """Executed MACs and bytes of ``transformer`` since the last :meth:`reset` (hooks until :meth:`remove`)."""

    def __init__(self, transformer: nn.Module) -> None:
        self.macs = 0
        self.bytes = 0
        self.calls = 0
        self._keys = 0
        self._batch = 1
        self._handles: list[Any] = [transformer.register_forward_pre_hook(self._on_call, with_kwargs=True)]
        for name, mod in transformer.named_modules():
            if isinstance(mod, nn.Linear):
                self._handles.append(mod.register_forward_hook(self._on_linear))
                if name.endswith(("attn.to_q", "attn.add_q_proj")):
                    inner = mod.out_features
                    self._handles.append(mod.register_forward_hook(
                        lambda m, i, o, inner=inner: self._on_query(i[0], inner)))

    def _on_call(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        hs = kwargs.get("hidden_states", args[0] if args else None)
        enc = kwargs.get("encoder_hidden_states", args[1] if len(args) > 1 else None)
        self._batch = int(hs.shape[0])
        self._keys = int(hs.shape[1]) + (int(enc.shape[1]) if enc is not None else 0)
        self.calls += 1

    def _on_linear(self, mod: nn.Linear, inp: tuple[torch.Tensor, ...], out: torch.Tensor) -> None:
        rows = inp[0].numel() // mod.in_features
        self.macs += rows * mod.in_features * mod.out_features
        w = mod.in_features * mod.out_features + (mod.out_features if mod.bias is not None else 0)
        self.bytes += BYTES * (w + rows * (mod.in_features + mod.out_features))

    def _on_query(self, x: torch.Tensor, inner: int) -> None:
        rows = x.numel() // x.shape[-1]
        self.macs += 2 * rows * self._keys * inner
        self.bytes += BYTES * inner * (2 * rows + 2 * self._batch * self._keys)

    def reset(self) -> tuple[int, int, int]:
        """Return (MACs, bytes, calls) so far and start again from zero."""
        got = (self.macs, self.bytes, self.calls)
        self.macs = self.bytes = self.calls = 0
        return got

    def remove(self) -> None:
        """Remove the hooks."""
        for h in self._handles:
            h.remove()
        self._handles = []


def record(ledger: Any, scope: str, macs: int, nbytes: int, full_macs: int, full_bytes: int) -> None:
    """Write executed work and the work it skipped (``full_*`` minus executed, at least 0) under
    ``executed/<scope>`` and ``skipped/<scope>`` (MACs on the PE array; bytes as 16-bit DRAM reads)."""
    ledger.record("pe_array", "mac", (16, 16, 32), macs, scope=f"executed/{scope}")
    ledger.record("dram", "dram_read", (16,), nbytes // BYTES, scope=f"executed/{scope}")
    ledger.record("pe_array", "mac", (16, 16, 32), max(0, full_macs - macs), scope=f"skipped/{scope}")
    ledger.record("dram", "dram_read", (16,), max(0, full_bytes - nbytes) // BYTES, scope=f"skipped/{scope}")
