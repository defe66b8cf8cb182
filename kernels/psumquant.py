"""Psum-quantized tiled matmul: a Triton kernel, its plain-torch reference, and the automatic choice.

``psumquant_matmul(a, b, inv_step, rows=R, cols=C, bits=B, semantics, overflow)`` computes
``a @ b`` (``a``: M x K, ``b``: K x N, float32) as a weight-stationary R x C systolic array with a
B-bit psum path would: K is split into tiles of ``rows``; the psum ``p_t`` of K-tile ``t`` is
quantized at the tile boundary, ``q_t = clamp(rne(p_t * inv_step), -2^(B-1), 2^(B-1)-1)``
(rne = round half to even, as :func:`npukit.sim.quant.rne_shift`), and

* ``semantics='buffer'`` (the psum buffer holds B bits, the default of :mod:`npukit.models.psumquant`):
  ``acc <- ovf_B(acc + q_t)`` with one step per output tile for all K-tiles; the result is
  ``acc * step``. ``inv_step`` has shape (M, nt) (one value per output row and N-tile of ``cols``
  columns; broadcastable shapes are accepted).
* ``semantics='transfer'`` (each K-tile psum is quantized for the transfer, accumulation stays at
  high precision): ``acc += ovf_B(rne(p_t * inv_step_t)) * step_t`` with a step per (row, K-tile,
  N-tile): ``inv_step`` has shape (M, kf, nt). Here ``overflow='wrap'`` wraps the quantizer's B-bit
  output instead of saturating it (a quantizer without saturation logic).

``ovf_B`` is saturation or two's-complement wrap at B bits (``overflow``). ``step = 1 / inv_step``
is in the units of the psums (for integer-valued inputs: integer psum units). All arithmetic is
float32; with integer-valued inputs whose tile psums stay below 2^24 in magnitude, B <= 22 and
power-of-two steps, the result is exact and equals the integer path bit for bit.

Backends (:data:`PSUM_BACKENDS`, resolved by :func:`npukit.kernels.backend.choose_backend`): ``'triton'``
(CUDA tensors, or any tensors under ``TRITON_INTERPRET=1``), ``'torch'`` (plain eager torch, anywhere),
``'numba'`` (CPU: ``torch.mm`` per K-tile plus one fused numba quantize-accumulate pass; same results as
``'torch'``), ``'auto'`` = Triton on CUDA, numba on CPU (torch where numba cannot run: ``bits > 22``, no
numba). Forward only (no autograd).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from npukit.sim.datapath import OVERFLOW_MODES, PSUM_SEMANTICS
from npukit.sim.errors import NpukitError

from .backend import BACKENDS, choose_backend, interpreting

if TYPE_CHECKING:  # imported lazily at first kernel use (keeps `import npukit.models` light)
    import triton.language as tl

#: the psum matmul's backends: the shared ones plus its fused CPU path
PSUM_BACKENDS = (*BACKENDS, "numba")


class PsumKernelError(NpukitError):
    """Bad arguments to the psum-quantized matmul (shapes, widths, backend)."""


# ---------------------------------------------------------------------------------- checks
def _check(a: torch.Tensor, b: torch.Tensor, rows: int, cols: int, bits: int, semantics: str, overflow: str) -> None:
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise PsumKernelError(f"psumquant_matmul needs a (M x K) and b (K x N), got {tuple(a.shape)} and {tuple(b.shape)}")
    if not (isinstance(rows, int) and rows >= 1 and isinstance(cols, int) and cols >= 1):
        raise PsumKernelError(f"rows and cols must be positive integers, got rows={rows!r} cols={cols!r}")
    if not isinstance(bits, int) or not 2 <= bits <= 32:
        raise PsumKernelError(f"psum bits (the psum_buffer width) must be an integer in 2..32, got {bits!r}")
    if semantics not in PSUM_SEMANTICS:
        raise PsumKernelError(f"unknown psum semantics '{semantics}': use one of {', '.join(PSUM_SEMANTICS)}")
    if overflow not in OVERFLOW_MODES:
        raise PsumKernelError(f"unknown overflow mode '{overflow}': use one of {', '.join(OVERFLOW_MODES)}")


def tile_counts(K: int, N: int, rows: int, cols: int) -> tuple[int, int]:
    """(kf, nt): number of K-tiles of ``rows`` and of N-tiles of ``cols``."""
    return -(-K // rows), -(-N // cols)


def _expand_inv(inv_step: torch.Tensor | float, M: int, kf: int, nt: int, semantics: str, device: Any) -> torch.Tensor:
    """Broadcast ``inv_step`` to (M, nt) (buffer) or (M, kf, nt) (transfer), float32, contiguous."""
    t = torch.as_tensor(inv_step, dtype=torch.float32, device=device)
    shape = (M, nt) if semantics == "buffer" else (M, kf, nt)
    try:
        t = torch.broadcast_to(t, shape)
    except RuntimeError:
        raise PsumKernelError(
            f"inv_step of shape {tuple(t.shape)} does not broadcast to {shape} ({semantics} semantics: "
            f"{'(M, N-tiles)' if semantics == 'buffer' else '(M, K-tiles, N-tiles)'})"
        ) from None
    if not bool(torch.isfinite(t).all()) or bool((t <= 0).any()):
        raise PsumKernelError("inv_step must be finite and > 0 (a psum scale of 0 or NaN); check the scale policy")
    return t.contiguous()


# ---------------------------------------------------------------------------------- torch reference
def _per_col(x: torch.Tensor, N: int, cols: int) -> torch.Tensor:
    """(M, nt) -> (M, N) by repeating each N-tile value over its columns."""
    return x.repeat_interleave(cols, dim=1)[:, :N]


def _wrap_(v: torch.Tensor, bits: int) -> torch.Tensor:
    lo, span = -(2.0 ** (bits - 1)), 2.0**bits
    return v.sub_(lo).remainder_(span).add_(lo)


_NUMBA: dict[str, Any] = {}


def _numba_kernels() -> dict[str, Any] | None:
    """Fused quantize-accumulate loops (one pass per K-tile instead of five torch passes), or None."""
    if "buffer" in _NUMBA or "missing" in _NUMBA:
        return _NUMBA or None if "missing" not in _NUMBA else None
    try:
        import numba
        import numpy as np
    except Exception:  # pragma: no cover - numba is a declared dependency
        _NUMBA["missing"] = True
        return None

    magic = np.float32(12582912.0)  # 1.5 * 2^23: (x + magic) - magic rounds half to even for |x| < 2^22

    @numba.njit(parallel=True, cache=True)
    def buffer_step(acc, p, inv, cols, lo, hi, wrap, first):  # pragma: no cover - compiled
        M, N = p.shape
        nt = inv.shape[1]
        span = hi - lo + np.float32(1.0)
        for i in numba.prange(M):
            for jt in range(nt):
                s = inv[i, jt]
                j0 = jt * cols
                j1 = min(N, j0 + cols)
                a = acc[i, j0:j1]
                pp = p[i, j0:j1]
                if first:
                    for j in range(j1 - j0):
                        x = min(max(pp[j] * s, lo), hi)  # clamp, then round: same as round, then clamp
                        a[j] = (x + magic) - magic
                elif wrap:
                    for j in range(j1 - j0):
                        x = min(max(pp[j] * s, lo), hi)
                        v = a[j] + ((x + magic) - magic)
                        v = v - span if v > hi else v
                        a[j] = v + span if v < lo else v
                else:
                    for j in range(j1 - j0):
                        x = min(max(pp[j] * s, lo), hi)
                        v = a[j] + ((x + magic) - magic)
                        a[j] = min(max(v, lo), hi)

    @numba.njit(parallel=True, cache=True)
    def transfer_step(acc, p, inv, step, cols, lo, hi, wrap, first):  # pragma: no cover - compiled
        M, N = p.shape
        nt = inv.shape[1]
        span = hi - lo + np.float32(1.0)
        for i in numba.prange(M):
            for jt in range(nt):
                s = inv[i, jt]
                st = step[i, jt]
                j0 = jt * cols
                j1 = min(N, j0 + cols)
                a = acc[i, j0:j1]
                pp = p[i, j0:j1]
                if wrap:
                    for j in range(j1 - j0):
                        q = np.rint(pp[j] * s)
                        q = q - span * np.floor((q - lo) / span)
                        a[j] = q * st if first else a[j] + q * st
                elif first:
                    for j in range(j1 - j0):
                        x = min(max(pp[j] * s, lo), hi)
                        a[j] = ((x + magic) - magic) * st
                else:
                    for j in range(j1 - j0):
                        x = min(max(pp[j] * s, lo), hi)
                        a[j] = a[j] + ((x + magic) - magic) * st

    _NUMBA.update(buffer=buffer_step, transfer=transfer_step)
    return _NUMBA


def _cpu_fused(a: torch.Tensor, b: torch.Tensor, inv: torch.Tensor, rows: int, cols: int, bits: int,
               semantics: str, overflow: str, chunk: int) -> torch.Tensor:
    """CPU path: torch.mm per (row chunk, K-tile) + one fused NumPy/numba pass; equals the torch loop."""
    import numpy as np

    ker = _numba_kernels()
    assert ker is not None
    M, K = a.shape
    N = b.shape[1]
    kf, _ = tile_counts(K, N, rows, cols)
    lo, hi = np.float32(-(2.0 ** (bits - 1))), np.float32(2.0 ** (bits - 1) - 1)
    out = torch.empty(M, N, dtype=torch.float32)
    step = 1.0 / inv
    wrap = overflow == "wrap"
    p = torch.empty(min(chunk, M), N, dtype=torch.float32)
    on, pn = out.numpy(), p.numpy()
    for r0 in range(0, M, chunk):
        r1 = min(M, r0 + chunk)
        pc, acc = pn[: r1 - r0], on[r0:r1]
        for t in range(kf):
            k0, k1 = t * rows, min(K, (t + 1) * rows)
            torch.mm(a[r0:r1, k0:k1], b[k0:k1], out=p[: r1 - r0])
            if semantics == "buffer":
                ker["buffer"](acc, pc, inv[r0:r1].numpy(), cols, lo, hi, wrap, t == 0)
            else:
                ker["transfer"](acc, pc, inv[r0:r1, t].contiguous().numpy(), step[r0:r1, t].contiguous().numpy(),
                                cols, lo, hi, wrap, t == 0)
    if semantics == "buffer":
        if N % cols == 0:
            out.view(M, -1, cols).mul_(step.unsqueeze(2))
        else:
            out.mul_(_per_col(step, N, cols))
    return out


def numba_available(bits: int) -> bool:
    """Whether the fused numba path can run ``bits``-bit psums (numba imports and ``bits <= 22``)."""
    return bits <= 22 and _numba_kernels() is not None


def psumquant_matmul_numba(
    a: torch.Tensor,
    b: torch.Tensor,
    inv_step: torch.Tensor | float,
    rows: int,
    cols: int,
    bits: int,
    semantics: str = "buffer",
    overflow: str = "saturate",
    chunk: int = 512,
) -> torch.Tensor:
    """Fused CPU path of :func:`psumquant_matmul`: each K-tile is one ``torch.mm`` per chunk of ``chunk`` rows
    followed by one fused numba pass (quantize, accumulate, overflow), cache-resident; gives the results of
    :func:`psumquant_matmul_torch` bit for bit. CPU tensors and ``bits <= 22`` only."""
    _check(a, b, rows, cols, bits, semantics, overflow)
    if not a.device.type == b.device.type == "cpu":
        raise PsumKernelError("backend 'numba' runs CPU tensors only; use 'triton' or 'torch' on a GPU")
    if not numba_available(bits):
        raise PsumKernelError(f"backend 'numba' needs numba and bits <= 22 (got bits={bits}); use backend='torch'")
    a = a.float()
    b = b.float()
    M, K = a.shape
    N = b.shape[1]
    kf, nt = tile_counts(K, N, rows, cols)
    if K == 0 or M == 0:
        return psumquant_matmul_torch(a, b, inv_step, rows, cols, bits, semantics, overflow)
    inv = _expand_inv(inv_step, M, kf, nt, semantics, a.device)
    return _cpu_fused(a, b, inv, rows, cols, bits, semantics, overflow, chunk)


def psumquant_matmul_torch(
    a: torch.Tensor,
    b: torch.Tensor,
    inv_step: torch.Tensor | float,
    rows: int,
    cols: int,
    bits: int,
    semantics: str = "buffer",
    overflow: str = "saturate",
) -> torch.Tensor:
    """Plain eager-torch path of :func:`psumquant_matmul` (float32, any device; the reference); returns M x N."""
    _check(a, b, rows, cols, bits, semantics, overflow)
    a = a.float()
    b = b.float()
    M, K = a.shape
    N = b.shape[1]
    kf, nt = tile_counts(K, N, rows, cols)
    inv = _expand_inv(inv_step, M, kf, nt, semantics, a.device)
    lo, hi = -(2.0 ** (bits - 1)), 2.0 ** (bits - 1) - 1
    even = N % cols == 0

    def scaled(p: torch.Tensor, s: torch.Tensor) -> torch.Tensor:  # p *= s (s: (M, nt)), in place
        if even:
            p.view(M, nt, cols).mul_(s.unsqueeze(2))
        else:
            p.mul_(_per_col(s, N, cols))
        return p

    acc: torch.Tensor | None = None
    step = 1.0 / inv
    for t in range(kf):
        k0, k1 = t * rows, min(K, (t + 1) * rows)
        p = a[:, k0:k1] @ b[k0:k1]
        if semantics == "buffer":
            scaled(p, inv).round_().clamp_(lo, hi)
            if acc is None:
                acc = p
            else:
                acc.add_(p)
                if overflow == "saturate":
                    acc.clamp_(lo, hi)
                else:
                    _wrap_(acc, bits)
        else:
            scaled(p, inv[:, t]).round_()
            if overflow == "saturate":
                p.clamp_(lo, hi)
            else:
                _wrap_(p, bits)
            scaled(p, step[:, t])
            if acc is None:
                acc = p
            else:
                acc.add_(p)
    if acc is None:  # K == 0
        return torch.zeros(M, N, dtype=torch.float32, device=a.device)
    if semantics == "buffer":
        scaled(acc, step)
    return acc


# ---------------------------------------------------------------------------------- Triton kernel
def _psumquant_kernel(
    a_ptr, b_ptr, c_ptr, s_ptr, st_ptr,
    M, N, K, kf, lo, hi, span, inv_span,
    sam, sak, sbk, sbn, scm, scn, ssm, sst, ssj,
    ROWS: tl.constexpr, COLS: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
    TRANSFER: tl.constexpr, WRAP: tl.constexpr,
):  # pragma: no cover - compiled by Triton (or run by its interpreter)
    # s_ptr: 1/step, st_ptr: step (both precomputed in float32 by the launcher, as the torch path does:
    # no division inside the kernel, so GPU approximate division cannot change a result)
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BM + tl.arange(0, BM)
    offs_n = pid_n * BN + tl.arange(0, BN)
    j = (pid_n * BN) // COLS  # BN divides COLS: the whole block lies in N-tile j
    m_ok = offs_m < M
    n_ok = offs_n < N
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    inv = tl.load(s_ptr + offs_m * ssm + j * ssj, mask=m_ok, other=1.0)
    stp = tl.load(st_ptr + offs_m * ssm + j * ssj, mask=m_ok, other=1.0)
    for t in range(0, kf):
        p = tl.zeros((BM, BN), dtype=tl.float32)
        for kk in range(0, ROWS, BK):
            offs_k = t * ROWS + kk + tl.arange(0, BK)
            k_ok = (offs_k < K) & (kk + tl.arange(0, BK) < ROWS)
            a = tl.load(a_ptr + offs_m[:, None] * sam + offs_k[None, :] * sak, mask=m_ok[:, None] & k_ok[None, :], other=0.0)
            b = tl.load(b_ptr + offs_k[:, None] * sbk + offs_n[None, :] * sbn, mask=k_ok[:, None] & n_ok[None, :], other=0.0)
            p += tl.dot(a, b, input_precision="ieee")
        if TRANSFER:
            inv = tl.load(s_ptr + offs_m * ssm + t * sst + j * ssj, mask=m_ok, other=1.0)
            stp = tl.load(st_ptr + offs_m * ssm + t * sst + j * ssj, mask=m_ok, other=1.0)
        x = p * inv[:, None]
        r = tl.floor(x)
        d = x - r
        odd = (r - 2.0 * tl.floor(r * 0.5)) == 1.0
        q = r + tl.where((d > 0.5) | ((d == 0.5) & odd), 1.0, 0.0)
        if TRANSFER:
            if WRAP:
                q = q - span * tl.floor((q - lo) * inv_span)
            else:
                q = tl.minimum(tl.maximum(q, lo), hi)
            acc += q * stp[:, None]
        else:
            q = tl.minimum(tl.maximum(q, lo), hi)
            acc = acc + q
            if WRAP:
                acc = tl.where(acc > hi, acc - span, tl.where(acc < lo, acc + span, acc))
            else:
                acc = tl.minimum(tl.maximum(acc, lo), hi)
    if not TRANSFER:
        acc = acc * stp[:, None]
    tl.store(c_ptr + offs_m[:, None] * scm + offs_n[None, :] * scn, acc, mask=m_ok[:, None] & n_ok[None, :])


_KERNELS: dict[bool, Any] = {}


def _kernel() -> Any:
    """The jitted kernel; decorated lazily so that ``TRITON_INTERPRET`` is read at first use."""
    import triton
    import triton.language as tl

    interp = interpreting()
    if interp not in _KERNELS:
        fn = _psumquant_kernel
        fn.__annotations__ = {k: (tl.constexpr if v == tl.constexpr else v) for k, v in fn.__annotations__.items()}
        _KERNELS[interp] = triton.jit(fn)
    return _KERNELS[interp]


def _pow2_divisor(n: int, cap: int) -> int:
    d = 1
    while d * 2 <= cap and n % (d * 2) == 0:
        d *= 2
    return d


def psumquant_matmul_triton(
    a: torch.Tensor,
    b: torch.Tensor,
    inv_step: torch.Tensor | float,
    rows: int,
    cols: int,
    bits: int,
    semantics: str = "buffer",
    overflow: str = "saturate",
    block_m: int = 64,
) -> torch.Tensor:
    """Triton kernel of :func:`psumquant_matmul`; needs a CUDA device or ``TRITON_INTERPRET=1``.

    Block sizes: BN = the largest power of two <= 64 dividing ``cols``, BK = the largest power of
    two <= 32 dividing ``rows``; both must be >= 16 (``tl.dot``), so ``rows`` and ``cols`` must be
    multiples of 16."""
    _check(a, b, rows, cols, bits, semantics, overflow)
    if bits > 22:
        raise PsumKernelError(f"the Triton psum kernel supports bits <= 22 (float32 exact rounding), got {bits}")
    interp = interpreting()
    if not (a.is_cuda or interp):
        raise PsumKernelError("the Triton psum kernel needs CUDA tensors (or TRITON_INTERPRET=1); use backend='torch'")
    bn, bk = _pow2_divisor(cols, 64), _pow2_divisor(rows, 32)
    if bn < 16 or bk < 16:
        raise PsumKernelError(f"the Triton psum kernel needs rows and cols that are multiples of 16, got {rows} x {cols}")
    a = a.float().contiguous()
    b = b.float().contiguous()
    M, K = a.shape
    N = b.shape[1]
    kf, nt = tile_counts(K, N, rows, cols)
    inv = _expand_inv(inv_step, M, kf, nt, semantics, a.device)
    if semantics == "buffer":
        ssm, sst, ssj = inv.stride(0), 0, inv.stride(1)
    else:
        ssm, sst, ssj = inv.stride(0), inv.stride(1), inv.stride(2)
    step = (1.0 / inv).contiguous()
    c = torch.empty(M, N, dtype=torch.float32, device=a.device)
    bm = max(16, min(block_m, _pow2_divisor(1 << 20, max(16, M))))
    grid = (-(-M // bm), -(-N // bn))
    lo, hi, span = -(2.0 ** (bits - 1)), 2.0 ** (bits - 1) - 1, 2.0**bits
    _kernel()[grid](
        a, b, c, inv, step, M, N, K, kf, lo, hi, span, 1.0 / span,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1), ssm, sst, ssj,
        ROWS=rows, COLS=cols, BM=bm, BN=bn, BK=bk,
        TRANSFER=semantics == "transfer", WRAP=overflow == "wrap",
    )
    return c


def psumquant_matmul(
    a: torch.Tensor,
    b: torch.Tensor,
    inv_step: torch.Tensor | float,
    rows: int,
    cols: int,
    bits: int,
    semantics: str = "buffer",
    overflow: str = "saturate",
    backend: str = "auto",
) -> torch.Tensor:
    """Psum-quantized ``a @ b`` (see the module docstring); ``backend`` one of :data:`PSUM_BACKENDS`.

    'auto' picks Triton for CUDA tensors when Triton imports and ``bits <= 22`` and rows/cols are
    multiples of 16, numba for CPU tensors when numba runs ``bits``, else the torch path (never silently on a
    bad argument: those raise)."""
    explicit = backend != "auto"
    triton_ok = bits <= 22 and rows % 16 == 0 and cols % 16 == 0
    backend = choose_backend(backend, a, triton_ok=triton_ok, choices=PSUM_BACKENDS, error=PsumKernelError)
    if backend == "torch" and a.device.type == b.device.type == "cpu" and numba_available(bits) and not explicit:
        backend = "numba"
    with torch.no_grad():
        if backend == "triton":
            return psumquant_matmul_triton(a, b, inv_step, rows, cols, bits, semantics, overflow)
        if backend == "numba":
            return psumquant_matmul_numba(a, b, inv_step, rows, cols, bits, semantics, overflow)
        return psumquant_matmul_torch(a, b, inv_step, rows, cols, bits, semantics, overflow)
