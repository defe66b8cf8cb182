"""The one place the experiment touches the psum-quantization library (:mod:`npukit.models.psumquant`).

:class:`PsumSweep` converts a deep copy of a model once per array (``rows`` x ``rows``), calibrates
it on real inputs, then switches policy and bit-width with ``reconfigure`` (refit from the stored
calibration statistics, no data pass). Settings used for every number of the experiment: buffer
semantics (the B-bit psum buffer re-quantizes the running sum after every K-tile), saturating
overflow, int8 symmetric per-channel weights and int8 per-tensor activations (``wa_bits=8``: the
paper's setting, psums are integers), power-of-two scales, the float fake-quant path (``exact=False``;
the library tests that it equals the integer-exact path for these widths).
MiniLM is also evaluated with ``wa_bits=None`` (float32 weights/activations, only psums quantized):
its int8 per-tensor activations alone cost ~0.02 embedding cosine, more than the psums do; and with
``act_granularity='token'`` (int8 per-token activation scales, as LLM int8 deployments), with and
without its attention matmuls (``Matmul`` slots) on the array.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from npukit.models.psumquant import POLICIES, PsumQuantConfig, convert, fit_report, reconfigure

__all__ = ["POLICIES", "PsumSweep", "SETTINGS"]

SETTINGS = {"semantics": "buffer", "overflow": "saturate", "wa_bits": 8, "scale_form": "pow2", "exact": False}


class PsumSweep:
    """A psum-quantized copy of ``model`` on an R x R array; the original is never changed."""

    def __init__(self, model: Any, rows: int, calib: Iterable[Any], calib_rows: int = 1024, wa_bits: int | None = 8,
                 act_granularity: str = "tensor", matmuls: bool = False) -> None:
        """``wa_bits``: weight/activation width of the array (8: the experiment's setting, see
        SETTINGS); None keeps weights and activations float32 so that only the psums are quantized
        (used for MiniLM to separate the psum cost from the int8 per-tensor activation cost).
        ``act_granularity``: 'tensor' (SETTINGS) or 'token' (per-token activation scales).
        ``matmuls``: also run the model's :class:`~npukit.models.psumquant.Matmul` slots (attention
        QK^T and PV) on the array with psum quantization."""
        self.rows = rows
        cfg = PsumQuantConfig(rows=rows, cols=rows, psum_buffer_bits=8, policy="none", calib_rows=calib_rows,
                              **{**SETTINGS, "wa_bits": wa_bits, "act_granularity": act_granularity})
        self.model = convert(copy.deepcopy(model).eval(), cfg, list(calib), matmuls=matmuls)

    def set(self, policy: str, bits: int) -> Any:
        """The converted model with ``policy`` at ``bits``-bit psums (refit from calibration stats)."""
        return reconfigure(self.model, policy=policy, psum_buffer_bits=bits)

    def fit_figures(self) -> dict[str, float | None]:
        """The current policy's fit on the calibration tiles, averaged over layers: ``range_mae_log2``
        (mean |log2 predicted range - log2 true range|, log2 units) and ``clip_frac`` (fraction of
        tiles whose true range exceeds the hardware-rounded range); None where no layer reports it."""
        reps = list(fit_report(self.model).values())
        out: dict[str, float | None] = {}
        for key in ("range_mae_log2", "clip_frac"):
            vals = [float(r[key]) for r in reps if isinstance(r.get(key), int | float)]
            out[key] = sum(vals) / len(vals) if vals else None
        return out
