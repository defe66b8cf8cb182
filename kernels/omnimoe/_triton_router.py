"""Triton kernels of the Cartesian router (imported lazily by :mod:`.router`, so that
``TRITON_INTERPRET`` set before the first call applies)."""

import triton
import triton.language as tl


@triton.jit
def _order_key(v):
    # fp32 -> int64 in [0, 2^32) with the same order (-0.0 just below +0.0)
    b = v.to(tl.int32, bitcast=True).to(tl.int64)
    neg_key = -(b + 2147483648) - 1
    return tl.where(b >= 0, b, neg_key) + 2147483648

@triton.jit
def _router_fwd(LX, LY, S, I, n, k, stride_l, stride_o,
                NP: tl.constexpr, KP: tl.constexpr, KQ: tl.constexpr, ACC: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, NP)
    m = offs < n
    # everything in ACC (fp32, or fp64 for fp64 inputs) right after the loads; masked lanes -> -inf
    lx = tl.where(m, tl.load(LX + t * stride_l + offs, mask=m, other=0.0).to(ACC), float("-inf"))
    ly = tl.where(m, tl.load(LY + t * stride_l + offs, mask=m, other=0.0).to(ACC), float("-inf"))
    low = 2147483647
    # pack (score order key, inverted index): larger score first, ties to the lower index
    kx = tl.topk(_order_key(lx.to(tl.float32)) * 2147483648 + (low - offs.to(tl.int64)), KP)
    ky = tl.topk(_order_key(ly.to(tl.float32)) * 2147483648 + (low - offs.to(tl.int64)), KP)
    ix = low - (kx % 2147483648)
    iy = low - (ky % 2147483648)
    kvalid = (tl.arange(0, KP) < tl.minimum(k, n)) & (ix < n) & (iy < n)
    sx = tl.where(kvalid, tl.load(LX + t * stride_l + ix, mask=kvalid, other=0.0).to(ACC), float("-inf"))
    sy = tl.where(kvalid, tl.load(LY + t * stride_l + iy, mask=kvalid, other=0.0).to(ACC), float("-inf"))
    # candidate sums rounded to the input dtype (as the reference adds them), then ranked in fp32
    cand = (sx[:, None] + sy[None, :]).to(LX.dtype.element_ty).to(tl.float32)
    pos = tl.arange(0, KP)[:, None] * KP + tl.arange(0, KP)[None, :]
    ck = _order_key(cand) * 2147483648 + (low - pos.to(tl.int64))
    best = tl.topk(tl.reshape(ck, (KP * KP,)), KQ)
    p = low - (best % 2147483648)
    pi = p // KP
    pj = p % KP
    # recover the chosen rows/columns and their scores from the per-axis winners (one match per row)
    offs_p = tl.arange(0, KP)
    sel_i = tl.sum(tl.where(offs_p[None, :] == pi[:, None], ix[None, :], 0), axis=1)
    sel_j = tl.sum(tl.where(offs_p[None, :] == pj[:, None], iy[None, :], 0), axis=1)
    sc_x = tl.sum(tl.where(offs_p[None, :] == pi[:, None], sx[None, :], 0.0), axis=1)
    sc_y = tl.sum(tl.where(offs_p[None, :] == pj[:, None], sy[None, :], 0.0), axis=1)
    score = sc_x + sc_y  # rounded once to the output dtype on store, like the reference's add
    ok = tl.arange(0, KQ) < k
    tl.store(S + t * stride_o + tl.arange(0, KQ), score.to(S.dtype.element_ty), mask=ok)
    tl.store(I + t * stride_o + tl.arange(0, KQ), sel_i * n + sel_j, mask=ok)

@triton.jit
def _router_bwd(DS, I, DLX, DLY, n, k, stride_o, stride_l, KQ: tl.constexpr, ACC: tl.constexpr, BLOCK_N: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    nb = tl.program_id(1)
    ok = tl.arange(0, KQ) < k
    ds = tl.load(DS + t * stride_o + tl.arange(0, KQ), mask=ok, other=0.0).to(ACC)
    idx = tl.load(I + t * stride_o + tl.arange(0, KQ), mask=ok, other=-1)
    row = tl.where(ok, idx // n, -1)
    col = tl.where(ok, idx % n, -1)
    offs = nb * BLOCK_N + tl.arange(0, BLOCK_N)
    # fixed-order reductions: deterministic, no atomics
    gx = tl.sum(tl.where(row[:, None] == offs[None, :], ds[:, None], 0.0), axis=0)
    gy = tl.sum(tl.where(col[:, None] == offs[None, :], ds[:, None], 0.0), axis=0)
    m = offs < n
    tl.store(DLX + t * stride_l + offs, gx.to(DLX.dtype.element_ty), mask=m)
    tl.store(DLY + t * stride_l + offs, gy.to(DLY.dtype.element_ty), mask=m)
