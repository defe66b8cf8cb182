"""NPU energy (pJ) and latency (cycles, s) of full vs cached editing rounds via :func:`npukit.sim.simulate`.

A DiT block at ``a`` query tokens over ``n`` keys lowers to GEMMs: QKV (a x d x 3d), scores
(heads x a x n x dh), attention-weighted values (heads x a x dh x n), output projection (a x d x d),
MLP up (a x d x rd) and down (a x rd x d). A round is the context stream once (its last block: the
K/V projection only), step 0 and any further full steps (tail / refresh) at full width, the reference
pass (blocks 0..layer; every round for the identity reference) and the other steps at ``a`` active
target tokens.
"""

from __future__ import annotations

from typing import Any


def block_layers(prefix: str, a: int, n: int, dim: int, heads: int, mlp_ratio: int, images: int = 1) -> list[Any]:
    """The GEMM layers of one block (``npukit.sim.workload.Layer``) for ``images`` images at once."""
    from npukit.sim.workload import Layer

    dh = dim // heads
    m = images * a
    return [
        Layer(f"{prefix}.qkv", m, 3 * dim, dim, kind="linear"),
        Layer(f"{prefix}.scores", a, n, dh, batch=heads * images, kind="attention"),
        Layer(f"{prefix}.av", a, dh, n, batch=heads * images, kind="attention"),
        Layer(f"{prefix}.proj", m, dim, dim, kind="linear"),
        Layer(f"{prefix}.fc1", m, mlp_ratio * dim, dim, kind="linear"),
        Layer(f"{prefix}.fc2", m, dim, mlp_ratio * dim, kind="linear"),
    ]


def step_cost(a: int, n: int, cfg: dict[str, int], arch: Any, blocks: int | None = None, images: int = 1,
              kv_last: bool = False) -> tuple[float, float]:
    """(cycles, energy pJ) of ``blocks`` blocks (default all) at ``a`` query tokens over ``n`` keys,
    for ``images`` images batched; ``kv_last`` (the context stream): the last block is its K/V projection only."""
    from npukit.sim.simulator import simulate
    from npukit.sim.workload import Layer, Workload

    layers = []
    nb = cfg["depth"] if blocks is None else blocks
    for li in range(nb):
        if kv_last and li == nb - 1:
            layers.append(Layer(f"block{li}.kv", images * a, 2 * cfg["dim"], cfg["dim"], kind="linear"))
            continue
        layers += block_layers(f"block{li}", a, n, cfg["dim"], cfg["heads"], cfg["mlp_ratio"], images)
    res = simulate(Workload(f"step_a{a}_n{n}", layers), arch)
    return float(res.cycles), float(res.energy_pj())


def session_cost(active_tokens: list[float], cfg: dict[str, int], steps: int, arch_name: str = "npu32",
                 ref_blocks: int | None = None, images: int = 1, ref_rounds: int = 1, full_extra: int = 0,
                 skip_every: int = 1) -> dict[str, Any]:
    """NPU cost of a session of ``len(active_tokens)`` rounds on ``images`` images edited together
    (weights are fetched once per step for the batch), full vs cached.

    Both run the context stream (C = P + 4 tokens) once per round and the target stream (P tokens
    over P + C keys) at step 0; full runs it at every step, cached at ``active_tokens[r]`` query
    tokens for steps 1.. of round r; ``ref_blocks``: blocks of the round-1 reference pass (context +
    target), None for none, run in the first ``ref_rounds`` rounds (every round for the identity
    reference); ``full_extra``: further full-width steps per round (tail / refresh); ``skip_every``
    > 1 (cacheedit+step): only every ``skip_every``-th sparse step runs.
    """
    from npukit.sim.arch import load_arch

    arch = load_arch(arch_name)
    p = (cfg["image"] // cfg["patch"]) ** 2
    c = p + 4
    ctx_c, ctx_e = step_cost(c, c, cfg, arch, images=images, kv_last=True)
    full_c, full_e = step_cost(p, p + c, cfg, arch, images=images)
    rounds = len(active_tokens)
    tot_full_c, tot_full_e = rounds * (ctx_c + steps * full_c), rounds * (ctx_e + steps * full_e)
    cc, ce = rounds * (ctx_c + full_c), rounds * (ctx_e + full_e)
    if ref_blocks:
        for a, n, kv in ((c, c, True), (p, p + c, False)):
            rc, re_ = step_cost(a, n, cfg, arch, blocks=ref_blocks, images=images, kv_last=kv)
            cc, ce = cc + min(ref_rounds, rounds) * rc, ce + min(ref_rounds, rounds) * re_
    cc, ce = cc + rounds * full_extra * full_c, ce + rounds * full_extra * full_e
    sparse = steps - 1 - full_extra
    sparse_run = -(-sparse // skip_every)  # ceil
    for a in active_tokens:
        sc, se = step_cost(max(1, int(round(a))), p + c, cfg, arch, images=images)
        cc, ce = cc + sparse_run * sc, ce + sparse_run * se
    ghz = arch.clock_ghz
    return {
        "arch": arch_name, "images": images,
        "full_cycles": tot_full_c, "cached_cycles": cc,
        "full_latency_ms": tot_full_c / (ghz * 1e9) * 1e3, "cached_latency_ms": cc / (ghz * 1e9) * 1e3,
        "full_energy_uj": tot_full_e / 1e6, "cached_energy_uj": ce / 1e6,
        "latency_speedup": tot_full_c / cc, "energy_ratio": tot_full_e / ce,
    }
