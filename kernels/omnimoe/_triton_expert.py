"""Triton kernels of the OmniMoE expert layer (imported lazily by :mod:`.expert`, :mod:`.token`
and :mod:`.scheduler`, so that ``TRITON_INTERPRET`` set before the first call applies).

Expert-centric kernels run one program per active expert (segment of the schedule): the expert's
u_e and v_e rows are read from DRAM once and stay on chip (L1/L2) while the program walks all its
tokens in tiles of BLOCK_M. Token-centric kernels run one program per token and gather its k
experts' rows.
"""

import triton
import triton.language as tl


@triton.jit
def _histogram(IDX, COUNTS, P, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < P
    e = tl.load(IDX + offs, mask=m, other=0)
    tl.atomic_add(COUNTS + e, tl.full((BLOCK,), 1, tl.int32), mask=m)


@triton.jit
def _silu(s):
    return s / (1.0 + tl.exp(-s))


@triton.jit
def _act(s, ACT: tl.constexpr):
    if ACT == 0:
        return s / (1.0 + tl.exp(-s))
    else:  # exact (erf) GELU
        return 0.5 * s * (1.0 + tl.math.erf(s * 0.7071067811865476))


@triton.jit
def _expert_fwd(X, U, V, G, TOK, EXP, OFF, S, A, OUT, H, stride_x, stride_u, stride_v, stride_o,
                ATOMIC: tl.constexpr, ACC: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_H: tl.constexpr):
    """Per active expert: s_p = x_t . u_e, a_p = silu(s_p) * g_p; out[t] += a_p * v_e (ATOMIC)."""
    seg = tl.program_id(0)
    start = tl.load(OFF + seg)
    end = tl.load(OFF + seg + 1)
    e = tl.load(EXP + seg).to(tl.int64)
    offs_h = tl.arange(0, BLOCK_H)
    for m0 in range(start, end, BLOCK_M):
        p = m0 + tl.arange(0, BLOCK_M)
        mp = p < end
        t = tl.load(TOK + p, mask=mp, other=0).to(tl.int64)
        acc = tl.zeros((BLOCK_M,), dtype=ACC)
        for h0 in range(0, H, BLOCK_H):
            h = h0 + offs_h
            mh = h < H
            x = tl.load(X + t[:, None] * stride_x + h[None, :], mask=mp[:, None] & mh[None, :], other=0.0)
            u = tl.load(U + e * stride_u + h, mask=mh, other=0.0)
            acc += tl.sum(x.to(ACC) * u.to(ACC)[None, :], axis=1)
        g = tl.load(G + p, mask=mp, other=0.0).to(ACC)
        a = _silu(acc) * g
        tl.store(S + p, acc, mask=mp)
        tl.store(A + p, a, mask=mp)
        if ATOMIC:
            for h0 in range(0, H, BLOCK_H):
                h = h0 + offs_h
                mh = h < H
                v = tl.load(V + e * stride_v + h, mask=mh, other=0.0).to(ACC)
                tl.atomic_add(OUT + t[:, None] * stride_o + h[None, :], a[:, None] * v[None, :],
                              mask=mp[:, None] & mh[None, :])


@triton.jit
def _expert_bwd(X, U, V, G, TOK, EXP, OFF, S, DOUT, DG, DS, ASC, DU, DV, DX, H,
                stride_x, stride_u, stride_v, stride_do, stride_du, stride_dv, stride_dx,
                ATOMIC: tl.constexpr, ACC: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_H: tl.constexpr):
    """Per active expert. Pass 1: da_p = dout_t . v_e, dg_p = da_p silu(s_p), ds_p = da_p g_p silu'(s_p).
    Pass 2: du_e = sum_p ds_p x_t and dv_e = sum_p a_p dout_t in segment order (deterministic: one
    program owns the expert, registers accumulate, one store); dx[t] += ds_p u_e (ATOMIC)."""
    seg = tl.program_id(0)
    start = tl.load(OFF + seg)
    end = tl.load(OFF + seg + 1)
    e = tl.load(EXP + seg).to(tl.int64)
    offs_h = tl.arange(0, BLOCK_H)
    for m0 in range(start, end, BLOCK_M):
        p = m0 + tl.arange(0, BLOCK_M)
        mp = p < end
        t = tl.load(TOK + p, mask=mp, other=0).to(tl.int64)
        da = tl.zeros((BLOCK_M,), dtype=ACC)
        for h0 in range(0, H, BLOCK_H):
            h = h0 + offs_h
            mh = h < H
            do = tl.load(DOUT + t[:, None] * stride_do + h[None, :], mask=mp[:, None] & mh[None, :], other=0.0)
            v = tl.load(V + e * stride_v + h, mask=mh, other=0.0)
            da += tl.sum(do.to(ACC) * v.to(ACC)[None, :], axis=1)
        s = tl.load(S + p, mask=mp, other=0.0)
        g = tl.load(G + p, mask=mp, other=0.0).to(ACC)
        sig = 1.0 / (1.0 + tl.exp(-s))
        act = s * sig
        tl.store(DG + p, da * act, mask=mp)
        tl.store(DS + p, da * g * (sig + act * (1.0 - sig)), mask=mp)
        tl.store(ASC + p, act * g, mask=mp)
    tl.debug_barrier()
    for h0 in range(0, H, BLOCK_H):
        h = h0 + offs_h
        mh = h < H
        du = tl.zeros((BLOCK_H,), dtype=ACC)
        dv = tl.zeros((BLOCK_H,), dtype=ACC)
        if ATOMIC:
            u = tl.load(U + e * stride_u + h, mask=mh, other=0.0).to(ACC)
        for m0 in range(start, end, BLOCK_M):
            p = m0 + tl.arange(0, BLOCK_M)
            mp = p < end
            t = tl.load(TOK + p, mask=mp, other=0).to(tl.int64)
            m2 = mp[:, None] & mh[None, :]
            ds = tl.load(DS + p, mask=mp, other=0.0)
            a = tl.load(ASC + p, mask=mp, other=0.0)
            x = tl.load(X + t[:, None] * stride_x + h[None, :], mask=m2, other=0.0).to(ACC)
            do = tl.load(DOUT + t[:, None] * stride_do + h[None, :], mask=m2, other=0.0).to(ACC)
            du += tl.sum(ds[:, None] * x, axis=0)
            dv += tl.sum(a[:, None] * do, axis=0)
            if ATOMIC:
                tl.atomic_add(DX + t[:, None] * stride_dx + h[None, :], ds[:, None] * u[None, :], mask=m2)
        tl.store(DU + e * stride_du + h, du.to(DU.dtype.element_ty), mask=mh)
        tl.store(DV + e * stride_dv + h, dv.to(DV.dtype.element_ty), mask=mh)


@triton.jit
def _token_combine(C, IDX, W, OUT, k, H, stride_w, stride_o, KB: tl.constexpr, ACC: tl.constexpr, BLOCK_H: tl.constexpr):
    """out[t, h] = sum_j c[t, j] * W[idx[t, j], h] in fixed j order (the deterministic scatter)."""
    t = tl.program_id(0).to(tl.int64)
    hb = tl.program_id(1)
    j = tl.arange(0, KB)
    mj = j < k
    c = tl.load(C + t * k + j, mask=mj, other=0.0).to(ACC)
    e = tl.load(IDX + t * k + j, mask=mj, other=0).to(tl.int64)
    h = hb * BLOCK_H + tl.arange(0, BLOCK_H)
    mh = h < H
    w = tl.load(W + e[:, None] * stride_w + h[None, :], mask=mj[:, None] & mh[None, :], other=0.0).to(ACC)
    tl.store(OUT + t * stride_o + h, tl.sum(c[:, None] * w, axis=0).to(OUT.dtype.element_ty), mask=mh)


@triton.jit
def _token_fwd(X, U, V, G, IDX, S, OUT, k, H, stride_x, stride_u, stride_v, stride_o,
               ACT: tl.constexpr, KB: tl.constexpr, ACC: tl.constexpr, BLOCK_H: tl.constexpr):
    """Token-centric (PEER-style): per token, gather its k experts' u and v rows;
    out = sum_j act(x . u_j) * g_j * v_j. Stores the pre-activations s (T, k)."""
    t = tl.program_id(0).to(tl.int64)
    j = tl.arange(0, KB)
    mj = j < k
    e = tl.load(IDX + t * k + j, mask=mj, other=0).to(tl.int64)
    offs_h = tl.arange(0, BLOCK_H)
    acc = tl.zeros((KB,), dtype=ACC)
    for h0 in range(0, H, BLOCK_H):
        h = h0 + offs_h
        mh = h < H
        x = tl.load(X + t * stride_x + h, mask=mh, other=0.0).to(ACC)
        u = tl.load(U + e[:, None] * stride_u + h[None, :], mask=mj[:, None] & mh[None, :], other=0.0).to(ACC)
        acc += tl.sum(u * x[None, :], axis=1)
    g = tl.load(G + t * k + j, mask=mj, other=0.0).to(ACC)
    a = _act(acc, ACT) * g
    tl.store(S + t * k + j, acc, mask=mj)
    for h0 in range(0, H, BLOCK_H):
        h = h0 + offs_h
        mh = h < H
        v = tl.load(V + e[:, None] * stride_v + h[None, :], mask=mj[:, None] & mh[None, :], other=0.0).to(ACC)
        tl.store(OUT + t * stride_o + h, tl.sum(a[:, None] * v, axis=0).to(OUT.dtype.element_ty), mask=mh)
