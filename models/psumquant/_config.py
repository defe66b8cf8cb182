"""PsumQuant's configuration (:class:`PsumQuantConfig`, widths in bits, array size in PEs) and its error type;
re-exported by :mod:`npukit.models.psumquant`."""

from __future__ import annotations

import math
from dataclasses import dataclass

from npukit.kernels.psumquant import PSUM_BACKENDS
from npukit.sim.datapath import OVERFLOW_MODES, PSUM_SEMANTICS, PSUMQUANT_ALIASES, SCALE_FORMS, check_psum_widths, rename
from npukit.sim.errors import NpukitError

from ._policies import POLICIES


class PsumQuantError(NpukitError):
    """Bad PsumQuant input: unknown policy, impossible width, nothing to convert, NaN activations..."""


ACT_GRANULARITIES = ("tensor", "token")
# fields that change the tile geometry or the number system: changing them needs a new calibration
GEOMETRY_FIELDS = ("rows", "cols", "wa_bits", "act_granularity")


@dataclass(frozen=True)
class _PsumQuantConfig:
    """How psums are held. Widths in bits; ``rows`` x ``cols`` is the array (PEs).

    Widths use the datapath names of :mod:`npukit.sim.datapath`. rows/cols: array size (K-tile = rows,
    N-tile = cols). psum_buffer_bits: B, the width psums are quantized to (2..32; the float path is exact
    up to 22, the Triton kernel needs <= 22): the running psums of the psum buffer in 'buffer' semantics,
    the psum leaving the array in 'transfer' semantics (dequantized there into a pe_psum-bit running psum).
    policy: one of :data:`POLICIES`.
    semantics: 'buffer' | 'transfer'. overflow: 'saturate' | 'wrap'. exact: integer-exact NumPy path.
    wa_bits: weight/activation width (int, symmetric) or None for float32 weights/activations.
    act_granularity: activation scale of the integer path: 'tensor' (default; one static scale per
    layer from calibration, the integer-exact / RTL-matching setting) or 'token' (one dynamic scale
    per row of x, i.e. per token, or per output pixel's im2col patch for a conv: s_m = max|x_m| /
    (2^(wa_bits-1) - 1), as LLM int8 deployments do, e.g. LLM.int8() vector-wise and SmoothQuant's
    per-token activation quantization). Row m's psums are then integer tile sums in units of
    s_m * s_w[n]; the psum quantizer still sees integers (one row of an output tile shares s_m), so
    the scale policies, the float path and the integer-exact path are unchanged, and the output is
    ``psum * s_m * s_w[n]`` (the per-row rescale happens after the psum buffer, with the per-channel one).
    scale_form: 'pow2' (step = 2^shift) | 'mult_shift' (16-bit multiplier and shift).
    pe_psum_bits: width P of the in-array psum registers (exact path), also the width of the running
    psums of 'transfer' semantics and of policy 'none' (unquantized psums) in the traffic ledger. Old
    keywords (deprecated, one warning): bits -> psum_buffer_bits, psum_bits -> pe_psum_bits; acc_bits
    (the old traffic width of 'transfer'/'none' buffers, now pe_psum_bits) is accepted only equal to
    pe_psum_bits. sigma_k: k of the sigma policy. calib_rows: rows per layer kept from the
    calibration batches for the predictor fit (margin_rows of them for the margin choice).
    headroom_log2: extra head-room (log2 units, >= 0 means fewer clipped tiles) added to the margin
    the psumquant fit picks by output MSE.
    backend: 'auto' (Triton on CUDA, numba on CPU) | 'torch' (plain torch) | 'numba' | 'triton'. seed: sampling seed.
    """

    rows: int = 128
    cols: int = 128
    psum_buffer_bits: int = 8
    policy: str = "psumquant"
    semantics: str = "buffer"
    overflow: str = "saturate"
    exact: bool = False
    wa_bits: int | None = 8
    scale_form: str = "pow2"
    pe_psum_bits: int = 32
    sigma_k: float = 3.0
    calib_rows: int = 1024
    margin_rows: int = 512
    headroom_log2: float = 0.0
    backend: str = "auto"
    seed: int = 0
    act_granularity: str = "tensor"

    def __post_init__(self) -> None:
        def bad(msg: str) -> None:
            raise PsumQuantError(msg)

        if self.policy not in POLICIES:
            bad(f"unknown psum scale policy '{self.policy}': use one of {', '.join(POLICIES)}")
        for name in ("rows", "cols"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                bad(f"{name} must be a positive integer (array size in PEs), got {v!r}")
        B = self.psum_buffer_bits
        if isinstance(B, bool) or not isinstance(B, int) or not 2 <= B <= 32:
            bad(f"psum_buffer_bits must be an integer in 2..32, got {B!r}")
        if self.semantics not in PSUM_SEMANTICS:
            bad(f"unknown psum semantics '{self.semantics}': use 'buffer' (B-bit psum buffer) or 'transfer' (B-bit transfers)")
        if self.overflow not in OVERFLOW_MODES:
            bad(f"unknown overflow mode '{self.overflow}': use 'saturate' or 'wrap'")
        if self.scale_form not in SCALE_FORMS:
            bad(f"unknown scale_form '{self.scale_form}': use 'pow2' or 'mult_shift'")
        if self.backend not in PSUM_BACKENDS:
            bad(f"unknown backend '{self.backend}': use one of {', '.join(PSUM_BACKENDS)}")
        wa = self.wa_bits
        if wa is not None and (isinstance(wa, bool) or not isinstance(wa, int) or not 2 <= wa <= 16):
            bad(f"wa_bits must be None (float weights/activations) or an integer in 2..16, got {self.wa_bits!r}")
        if self.act_granularity not in ACT_GRANULARITIES:
            bad(f"unknown act_granularity '{self.act_granularity}': use 'tensor' (per-tensor activation scale) "
                "or 'token' (per-row activation scales)")
        if self.act_granularity == "token" and self.wa_bits is None:
            bad("act_granularity='token' needs integer activations: set wa_bits (e.g. 8)")
        if self.exact and self.wa_bits is None:
            bad("exact=True needs integer weights/activations: set wa_bits (e.g. 8)")
        P = self.pe_psum_bits
        if isinstance(P, bool) or not isinstance(P, int) or not 2 <= P <= 62:
            bad(f"pe_psum_bits (in-array psum width) must be an integer in 2..62, got {P!r}")
        # quantized psums are never wider than the array's psums they come from (datapath width rule)
        check_psum_widths(P, B, None, "PsumQuantConfig", ("pe_psum_bits", "psum_buffer_bits"), PsumQuantError)
        if not (isinstance(self.headroom_log2, int | float) and math.isfinite(self.headroom_log2)):
            bad(f"headroom_log2 must be a finite number (log2 units), got {self.headroom_log2!r}")
        if not (isinstance(self.sigma_k, int | float) and math.isfinite(self.sigma_k) and self.sigma_k > 0):
            bad(f"sigma_k must be a positive number, got {self.sigma_k!r}")
        if not (isinstance(self.calib_rows, int) and self.calib_rows >= 16 and isinstance(self.margin_rows, int)
                and self.margin_rows >= 1):
            bad(f"calib_rows must be >= 16 and margin_rows >= 1, got {self.calib_rows!r}, {self.margin_rows!r}")

    @property
    def bits(self) -> int:
        """Deprecated name of :attr:`psum_buffer_bits`."""
        from npukit.sim.datapath import deprecated

        deprecated("bits", "psum_buffer_bits", "PsumQuantConfig")
        return self.psum_buffer_bits

    @property
    def integer(self) -> bool:
        """True when psums are integers (weights and activations quantized to ``wa_bits``)."""
        return self.wa_bits is not None


class PsumQuantConfig(_PsumQuantConfig):
    __doc__ = _PsumQuantConfig.__doc__

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs = rename(kwargs, PSUMQUANT_ALIASES, "PsumQuantConfig")
        if "acc_bits" in kwargs:  # deprecated: the 'transfer'/'none' traffic width, now pe_psum_bits
            acc = kwargs.pop("acc_bits")
            from npukit.sim.datapath import deprecated

            deprecated("acc_bits", "pe_psum_bits", "PsumQuantConfig")
            if acc != kwargs.get("pe_psum_bits", 32):
                raise PsumQuantError(f"PsumQuantConfig: acc_bits = {acc!r} differs from pe_psum_bits; unquantized and "
                                     "'transfer' running psums are held at pe_psum_bits now: drop acc_bits")
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
