"""FLOP and byte accounting of the OmniMoE paths, counted from shapes into an npukit Ledger.

Components (declared by :func:`declare`): ``alu`` (floating-point work: ``fp_mac`` for
multiply-adds, ``fp_add`` for adds, compares and the few ops of each activation, at 16 or 32 bits
by the input dtype), ``hbm`` (device DRAM: ``dram_read``/``dram_write``, count = elements of
``bits`` bits) and ``l2`` (the on-chip cache: ``sram_read``/``sram_write``; default capacity
50 MiB, the H100/H200 L2 -- NVIDIA H100 Tensor Core GPU Architecture whitepaper, 2022, "50 MB L2").

Traffic model (documented choice; the papers do not give one): a tensor that is gathered per
(token, expert) pair is served by the L2 when the whole tensor fits the L2, else every gather
goes to DRAM. So the expert-centric path reads each *active* expert's u_e and v_e from DRAM once
(expert reuse = tokens*k/N amortises them) and gathers token rows from L2; the token-centric
(PEER-style) path gathers u_e and v_e once per pair, each gather hitting the L2 with probability
min(1, L2 / table bytes) (random rows, LRU), never fewer DRAM reads than the 2*A*H compulsory.
Indices are counted as 32-bit elements, routing scores and pre-activations as 32-bit.
"""

from __future__ import annotations

import math

from npukit.sim.ledger import Ledger

L2_BYTES = 50 * 1024 * 1024  # H100/H200 L2 (NVIDIA H100 whitepaper, 2022)
IDX_BITS = 32
ACC_BITS = 32


def declare(ledger: Ledger, l2_bytes: int = L2_BYTES) -> None:
    """Declare ``alu``, ``hbm`` and ``l2`` (capacity ``l2_bytes`` bytes) in ``ledger``."""
    ledger.declare("alu", kind="fp_alu")
    ledger.declare("hbm", kind="dram")
    ledger.declare("l2", kind="sram", capacity_bytes=l2_bytes)


def op_bits(bits: int) -> int:
    """Energy-table width of a floating-point op at storage width ``bits`` (16 or 32)."""
    return 16 if bits <= 16 else 32


def _fits(elements: float, bits: int, l2_bytes: int) -> bool:
    return elements * bits / 8 <= l2_bytes


def _token_gathers(pairs: int, active: int, hidden: int, table_bytes: float, l2_bytes: int) -> float:
    """DRAM elements of the per-pair u/v gathers: random rows hit the L2 with probability
    min(1, L2 / table bytes); never fewer than the compulsory 2*A*H."""
    hit = min(1.0, l2_bytes / table_bytes) if table_bytes > 0 else 1.0
    return max(2.0 * active * hidden, 2.0 * pairs * hidden * (1.0 - hit))


def _rec(led: Ledger, scope: str, items: list[tuple[str, str, int, float]]) -> None:
    for comp, act, bits, n in items:
        led.record(comp, act, bits, float(n), scope)


def record_router(led: Ledger, tokens: int, hidden: int, n: int, k: int, bits: int = 32, *,
                  dense: bool = False, scope: str = "router") -> None:
    """Router of ``n*n`` experts. Cartesian: 2 n-way projections, BatchNorm + log_softmax (6 ops
    per logit), per-axis top-min(k, n) (~n compares per axis), k'^2 candidate sums and their
    top-k (~k'^2 compares). Dense (``dense=True``): one N-way projection, its logits written to and
    read back from DRAM, log_softmax (3 ops per logit) and a top-k over N (~N compares)."""
    declare(led)
    T, H, N, ob = tokens, hidden, n * n, op_bits(bits)
    if dense:
        _rec(led, scope, [
            ("alu", "fp_mac", ob, T * N * H),
            ("alu", "fp_add", ob, T * N * 4),
            ("hbm", "dram_read", bits, T * H + N * H + T * N),
            ("hbm", "dram_write", bits, T * N + T * k),
            ("hbm", "dram_write", IDX_BITS, T * k),
        ])
        return
    kk = min(k, n)
    _rec(led, scope, [
        ("alu", "fp_mac", ob, T * 2 * n * H),
        ("alu", "fp_add", ob, T * (2 * n * 7 + 2 * kk * kk)),
        ("hbm", "dram_read", bits, T * H + 2 * n * H + 2 * T * n),
        ("hbm", "dram_write", bits, 2 * T * n + T * k),
        ("hbm", "dram_write", IDX_BITS, T * k),
    ])


def record_router_topk(led: Ledger, tokens: int, n: int, k: int, bits: int = 32, scope: str = "router_topk") -> None:
    """The Cartesian top-k alone (no projections): ~n compares per axis, k'^2 sums and compares."""
    declare(led)
    kk = min(k, n)
    _rec(led, scope, [
        ("alu", "fp_add", op_bits(bits), tokens * (2 * n + 2 * kk * kk)),
        ("hbm", "dram_read", bits, 2 * tokens * n),
        ("hbm", "dram_write", bits, tokens * k),
        ("hbm", "dram_write", IDX_BITS, tokens * k),
    ])


def record_router_backward(led: Ledger, tokens: int, n: int, k: int, bits: int = 32, scope: str = "router_bwd") -> None:
    """Router backward kernel: d lp_x, d lp_y (T, n) from d scores (T, k)."""
    declare(led)
    _rec(led, scope, [
        ("alu", "fp_add", op_bits(bits), 2 * tokens * k),
        ("hbm", "dram_read", bits, tokens * k),
        ("hbm", "dram_read", IDX_BITS, tokens * k),
        ("hbm", "dram_write", bits, 2 * tokens * n),
    ])


def record_schedule(led: Ledger, pairs: int, num_experts: int, active: int, scope: str = "scheduler") -> None:
    """Stable sort of P 32-bit keys with their 32-bit pair ids (radix sort, 8 bits a pass), the
    histogram (P reads, P integer atomics) and the A+1 segment offsets."""
    declare(led)
    passes = max(1, math.ceil(math.log2(max(num_experts, 2)) / 8))
    _rec(led, scope, [
        ("hbm", "dram_read", IDX_BITS, pairs * (2 * passes + 1)),
        ("hbm", "dram_write", IDX_BITS, pairs * 2 * passes + (active + 1) + active),
        ("l2", "sram_write", IDX_BITS, pairs),
    ])


def record_expert_forward(led: Ledger, tokens: int, hidden: int, k: int, num_experts: int, active: int,
                          bits: int = 32, *, deterministic: bool = False, l2_bytes: int = L2_BYTES,
                          scope: str = "expert_fwd") -> None:
    """Expert-centric forward: 2*P*H multiply-adds (x.u_e and a*v_e), ~5 ops per pair for silu and
    the gate; DRAM: each active expert's u_e, v_e once, x and out once (or per pair when they do
    not fit the L2); L2: x gathered per pair, out accumulated per pair (32-bit atomics). The
    deterministic option replaces the atomics by a token-centric combine that gathers v per pair."""
    declare(led, l2_bytes)
    T, H, P, A, ob = tokens, hidden, tokens * k, active, op_bits(bits)
    x_dram = T * H if _fits(T * H, bits, l2_bytes) else P * H
    items = [
        ("alu", "fp_mac", ob, 2 * P * H),
        ("alu", "fp_add", ob, 5 * P),
        ("hbm", "dram_read", bits, x_dram + A * H + P),
        ("hbm", "dram_read", IDX_BITS, 2 * P + A + 1),
        ("hbm", "dram_write", ACC_BITS, 2 * P),
        ("l2", "sram_read", bits, P * H),
    ]
    if deterministic:
        v_dram = _token_gathers(P, A, H, num_experts * H * bits / 8, l2_bytes) / 2
        items += [
            ("hbm", "dram_read", bits, v_dram),
            ("hbm", "dram_read", ACC_BITS, P),
            ("hbm", "dram_write", bits, T * H),
        ]
    else:
        out_dram = T * H if _fits(T * H, ACC_BITS, l2_bytes) else P * H
        items += [
            ("hbm", "dram_read", bits, A * H),
            ("l2", "sram_read", ACC_BITS, P * H),
            ("l2", "sram_write", ACC_BITS, P * H),
            ("hbm", "dram_write", ACC_BITS, out_dram),
        ]
    _rec(led, scope, items)


def record_expert_backward(led: Ledger, tokens: int, hidden: int, k: int, num_experts: int, active: int,
                           bits: int = 32, *, deterministic: bool = False, l2_bytes: int = L2_BYTES,
                           scope: str = "expert_bwd") -> None:
    """Expert-centric backward: 4*P*H multiply-adds (da, du, dv, dx), ~10 ops per pair; DRAM: u_e,
    v_e read and du_e, dv_e written once per active expert plus the zero fill of the dense
    (N, H) gradients; x and dout once each when they fit the L2 (L2 gathers per pair, two passes);
    dx by 32-bit atomics in L2 (or, deterministic, a combine that gathers u per pair)."""
    declare(led, l2_bytes)
    T, H, P, A, N, ob = tokens, hidden, tokens * k, active, num_experts, op_bits(bits)
    act_dram = 2 * T * H if _fits(2 * T * H, bits, l2_bytes) else 3 * P * H
    items = [
        ("alu", "fp_mac", ob, 4 * P * H),
        ("alu", "fp_add", ob, 10 * P),
        ("hbm", "dram_read", bits, act_dram + 2 * A * H + P),
        ("hbm", "dram_read", IDX_BITS, 2 * P + A + 1),
        ("hbm", "dram_read", ACC_BITS, 3 * P),
        ("hbm", "dram_write", ACC_BITS, 3 * P),
        ("hbm", "dram_write", bits, 2 * N * H + 2 * A * H),
        ("l2", "sram_read", bits, 3 * P * H),
    ]
    if deterministic:
        u_dram = _token_gathers(P, A, H, N * H * bits / 8, l2_bytes) / 2
        items += [("hbm", "dram_read", bits, u_dram), ("hbm", "dram_write", bits, T * H)]
    else:
        items += [("l2", "sram_read", ACC_BITS, P * H), ("l2", "sram_write", ACC_BITS, P * H),
                  ("hbm", "dram_write", ACC_BITS, T * H)]
    _rec(led, scope, items)


def record_token_forward(led: Ledger, tokens: int, hidden: int, k: int, num_experts: int, active: int,
                         bits: int = 32, *, l2_bytes: int = L2_BYTES, scope: str = "token_fwd") -> None:
    """Token-centric (PEER-style) forward: the same 2*P*H multiply-adds; DRAM: x and out once, u and
    v gathered once per pair (2*P*H elements) unless the whole (N, H) tables fit the L2."""
    declare(led, l2_bytes)
    T, H, P, ob = tokens, hidden, tokens * k, op_bits(bits)
    gathers = _token_gathers(P, active, H, 2 * num_experts * H * bits / 8, l2_bytes)
    _rec(led, scope, [
        ("alu", "fp_mac", ob, 2 * P * H),
        ("alu", "fp_add", ob, 5 * P),
        ("hbm", "dram_read", bits, T * H + gathers + P),
        ("hbm", "dram_read", IDX_BITS, P),
        ("hbm", "dram_write", bits, T * H),
        ("hbm", "dram_write", ACC_BITS, P),
        ("l2", "sram_read", bits, 2 * P * H),
    ])


def record_token_backward(led: Ledger, tokens: int, hidden: int, k: int, num_experts: int, active: int,
                          bits: int = 32, *, l2_bytes: int = L2_BYTES, scope: str = "token_bwd") -> None:
    """Token-centric backward: 4*P*H multiply-adds; u, v gathered again per pair and du, dv
    scattered per pair (atomics in DRAM unless the tables fit the L2), plus the dense grad fill."""
    declare(led, l2_bytes)
    T, H, P, N, ob = tokens, hidden, tokens * k, num_experts, op_bits(bits)
    per_pair = _token_gathers(P, active, H, 2 * N * H * bits / 8, l2_bytes)
    _rec(led, scope, [
        ("alu", "fp_mac", ob, 4 * P * H),
        ("alu", "fp_add", ob, 10 * P),
        ("hbm", "dram_read", bits, 2 * T * H + per_pair),
        ("hbm", "dram_read", ACC_BITS, per_pair),
        ("hbm", "dram_write", ACC_BITS, per_pair + 2 * N * H),
        ("hbm", "dram_write", bits, T * H + P),
    ])


def record_mlp(led: Ledger, tokens: int, hidden: int, intermediate: int, bits: int = 32, *,
               backward: bool = False, scope: str = "mlp") -> None:
    """Shared SwiGLU MLP: 3*T*H*I multiply-adds forward (x2 backward), weights read once."""
    declare(led)
    T, H, I, ob = tokens, hidden, intermediate, op_bits(bits)
    mult = 2 if backward else 1
    _rec(led, scope, [
        ("alu", "fp_mac", ob, mult * 3 * T * H * I),
        ("alu", "fp_add", ob, mult * 5 * T * I),
        ("hbm", "dram_read", bits, mult * (3 * H * I + T * H + 2 * T * I)),
        ("hbm", "dram_write", bits, mult * (T * H + 2 * T * I)),
    ])


def bytes_moved(led: Ledger, scope_prefix: str = "", component: str = "hbm") -> float:
    """Bytes read plus written on ``component`` under ``scope_prefix``."""
    total = 0.0
    for (sc, comp, act, bits), n in led.counts.items():
        if comp == component and act.endswith(("_read", "_write")) and (
            not scope_prefix or sc == scope_prefix or sc.startswith(scope_prefix.rstrip("/") + "/")
        ):
            total += n * bits[0] / 8
    return total


def flops(led: Ledger, scope_prefix: str = "") -> float:
    """FLOPs under ``scope_prefix``: 2 per fp_mac, 1 per fp_add/fp_mult."""
    return 2 * led.count("alu", "fp_mac", scope_prefix) + led.count("alu", "fp_add", scope_prefix) + led.count(
        "alu", "fp_mult", scope_prefix)
