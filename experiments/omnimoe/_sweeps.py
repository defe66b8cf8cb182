"""The measured and modelled sweeps of the OmniMoE experiment.

- :func:`router_sweep`: Cartesian vs dense N-way router time (CPU, measured) and FLOPs (counted)
  against N, with the fitted log-log slope (sqrt N growth is slope 0.5, O(N) is slope 1).
- :func:`centric_time_sweep`: expert-centric (scheduler included) vs token-centric forward time
  (CPU torch, measured) against N and tokens.
- :func:`centric_model_sweep`: the same comparison in modelled GPU DRAM bytes (the Ledger's
  traffic model, :mod:`npukit.kernels.omnimoe.accounting`) and on the 128x128 NPU model
  (:mod:`.npu_cost`) at the paper's sizes; its (T, N) points run on a sweep executor (local or Dask).
- :func:`crossover`: the expert reuse (tokens * k / N) at which a token/expert ratio crosses 1.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from npukit.kernels.omnimoe import accounting as acc
from npukit.kernels.omnimoe.expert import omni_expert
from npukit.kernels.omnimoe.router import cartesian_router, dense_router
from npukit.kernels.omnimoe.token import token_centric
from npukit.kernels.timing import median_timer
from npukit.sim.ledger import Ledger
from npukit.sweeps import Executor, SerialExecutor

from .npu_cost import npu_cost, uniform_counts


def loglog_slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of log(y) against log(x)."""
    lx = [math.log(x) for x in xs]
    ly = [math.log(max(y, 1e-12)) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    den = sum((a - mx) ** 2 for a in lx)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly, strict=True)) / den if den else float("nan")


def router_sweep(experts: list[int], tokens: int, hidden: int, k: int, reps: int = 3) -> list[dict[str, Any]]:
    """Rows (router, N, ms, gflop) for the Cartesian and the dense router at each N."""
    timer = median_timer(False, reps)
    rows = []
    torch.manual_seed(0)
    x = torch.randn(tokens, hidden)
    for N in experts:
        n = math.isqrt(N)
        wx, wy = torch.randn(n, hidden) * hidden**-0.5, torch.randn(n, hidden) * hidden**-0.5
        wd = torch.randn(N, hidden) * hidden**-0.5

        def cart(wx: torch.Tensor = wx, wy: torch.Tensor = wy, kk: int = min(k, N)) -> Any:
            lx = torch.log_softmax(torch.nn.functional.batch_norm(x @ wx.t(), None, None, training=True), -1)
            ly = torch.log_softmax(torch.nn.functional.batch_norm(x @ wy.t(), None, None, training=True), -1)
            return cartesian_router(lx, ly, kk)

        def dense(wd: torch.Tensor = wd, kk: int = min(k, N)) -> Any:
            return dense_router(x, wd, kk)

        with torch.no_grad():
            for name, fn, is_dense in (("cartesian", cart, False), ("dense", dense, True)):
                led = Ledger()
                acc.record_router(led, tokens, hidden, n, min(k, N), 32, dense=is_dense)
                rows.append(dict(router=name, experts=N, tokens=tokens, hidden=hidden, topk=k, ms=timer(fn),
                                 gflop=acc.flops(led) / 1e9, hbm_mb=acc.bytes_moved(led) / 1e6))
    return rows


def centric_time_sweep(experts: list[int], tokens: list[int], hidden: int, k: int, reps: int = 3
                       ) -> list[dict[str, Any]]:
    """Measured CPU forward time of both schedules at uniform-random routing."""
    timer = median_timer(False, reps)
    rows = []
    for T in tokens:
        for N in experts:
            g_ = torch.Generator().manual_seed(T * 7 + N)
            idx = torch.stack([torch.randperm(N, generator=g_)[:k] for _ in range(T)]) if N < 4 * k else \
                torch.randint(0, N, (T, k), generator=g_)
            x = torch.randn(T, hidden, generator=g_)
            u = torch.randn(N, hidden, generator=g_) * hidden**-0.5
            v = torch.randn(N, hidden, generator=g_) * hidden**-0.5
            g = torch.rand(T, k, generator=g_)
            with torch.no_grad():
                ms_e = timer(lambda: omni_expert(x, u, v, g, idx))  # noqa: B023
                ms_t = timer(lambda: token_centric(x, u, v, g, idx))  # noqa: B023
            A = int(torch.unique(idx).numel())
            rows.append(dict(tokens=T, experts=N, hidden=hidden, topk=k, reuse=T * k / N, active=A,
                             expert_ms=ms_e, token_ms=ms_t, token_over_expert=ms_t / ms_e))
    return rows


def centric_model_point(job: tuple[Any, ...]) -> dict[str, Any]:
    """One (tokens T, experts N) point of :func:`centric_model_sweep`; ``job`` = (T, N, hidden, k, bits,
    npu_max_pairs[, arch]) (arch: the NPU arch name or file, default npu128). Pure function of its
    arguments (fixed routing seed), so it runs on any executor worker."""
    T, N, hidden, k, bits, npu_max_pairs, *rest = job
    arch = rest[0] if rest else "npu128"
    counts = uniform_counts(T, k, N, seed=T + N)
    A = len(counts)
    le, lt = Ledger(), Ledger()
    acc.record_schedule(le, T * k, N, A)
    acc.record_expert_forward(le, T, hidden, k, N, A, bits)
    acc.record_token_forward(lt, T, hidden, k, N, A, bits)
    row = dict(tokens=T, experts=N, hidden=hidden, topk=k, reuse=T * k / N, active=A,
               expert_hbm_mb=acc.bytes_moved(le) / 1e6, token_hbm_mb=acc.bytes_moved(lt) / 1e6)
    row["token_over_expert_bytes"] = row["token_hbm_mb"] / row["expert_hbm_mb"]
    if T * k <= npu_max_pairs:
        res = npu_cost(T, hidden, N, k, arch=arch, counts=counts)
        tot = {r["path"]: r for r in res["rows"] if r["part"] == "total"}
        for p in ("expert_centric", "token_centric"):
            row[f"npu_{p}_cycles"] = tot[p]["cycles"]
            row[f"npu_{p}_uj"] = tot[p]["energy_total_pj"] / 1e6
            row[f"npu_{p}_expert_part_uj"] = sum(
                r["energy_total_pj"] for r in res["rows"] if r["path"] == p and r["part"] in ("experts", "extra")
            ) / 1e6
        row["npu_token_over_expert_cycles"] = tot["token_centric"]["cycles"] / tot["expert_centric"]["cycles"]
        row["npu_token_over_expert_energy"] = (tot["token_centric"]["energy_total_pj"]
                                               / tot["expert_centric"]["energy_total_pj"])
    return row


def centric_model_sweep(experts: list[int], tokens: list[int], hidden: int, k: int, bits: int = 16,
                        npu_max_pairs: int = 1 << 18, executor: Executor | None = None,
                        arch: str = "npu128") -> list[dict[str, Any]]:
    """Modelled GPU DRAM bytes (Ledger traffic model, ``bits``-bit tensors, 50 MiB L2) and NPU cycles
    and energy of both schedules (NPU skipped where T*k > ``npu_max_pairs``). Each (T, N) point runs
    on ``executor`` (default: in this process; a Dask executor spreads the grid over a cluster); rows
    come back in grid order (tokens outer, experts inner) whatever the backend. ``arch``: the NPU arch."""
    jobs = [(T, N, hidden, k, bits, npu_max_pairs, arch) for T in tokens for N in experts]
    ex = executor if executor is not None else SerialExecutor()
    return ex.map(centric_model_point, jobs)


def crossover(rows: list[dict[str, Any]], ratio_key: str, group_key: str = "tokens") -> dict[Any, str | None]:
    """Per group, where ``ratio_key`` (token / expert cost) crosses 1 along the expert reuse,
    log-interpolated between neighbouring points: ``"expert-centric wins above reuse R"`` (or
    ``below``); None when it never crosses in the sweep."""
    out: dict[Any, str | None] = {}
    for grp in sorted({r[group_key] for r in rows}):
        pts = sorted((r["reuse"], r[ratio_key]) for r in rows if r[group_key] == grp and ratio_key in r)
        found = None
        for (r0, q0), (r1, q1) in zip(pts, pts[1:], strict=False):
            if (q0 - 1) * (q1 - 1) <= 0 and q0 != q1:
                l0, l1 = math.log(r0), math.log(r1)
                f = (1 - q0) / (q1 - q0)
                side = "above" if q1 > q0 else "below"
                found = f"expert-centric wins {side} reuse {math.exp(l0 + f * (l1 - l0)):.3g}"
                break
        out[grp] = found
    return out
