"""npukit bench omnimoe: microbenchmarks of the OmniMoE paths, PEER and the torch reference.

For every (tokens, experts, topk) point at the given hidden size it times the Cartesian router, a
dense N-way router, the scheduler, the expert-centric forward and backward, the token-centric
(PEER-style) forward and backward, the whole OmniMoE layer (forward; forward+backward), the npukit
PEER layer, the public PEER-pytorch layer and the OmniMoE_Pytorch-style torch reference. The grid is
run by triton.testing.perf_report, which also writes omnimoe_ms.csv and omnimoe_ms.png (median ms per
path and point, the band between min and max). Times: on CUDA every sample of triton.testing.do_bench
(warm-up, cache flush); on CPU --reps samples after one warm-up call, each sample a block of calls of at
least 50 ms (benchmarks/_timing.py; short kernels are not timed one call at a time). Every row has
min / median / max, the number of samples and the spread max/min; a spread above 2x is flagged WIDE
(a warning line per row: too noisy to read a single number). FLOPs and
DRAM bytes are counted from shapes in a Ledger (npukit.kernels.omnimoe.accounting) and give achieved
GFLOP/s and GB/s against ceilings measured on the device (a large copy and a large matmul).

It then measures the router target point (N = 1,048,576, hidden 1,024, k = 32, tokens 4,096 with --full
or on CUDA, 256 by default on CPU, where one dense call over 4,096 tokens takes minutes; both routers'
cost is linear in the tokens: Cartesian vs dense router; the dense logits are computed in chunks of
tokens) and prints "router speedup: NNx" with its range over the samples, and maps one point onto the
128x128 NPU model (expert-centric vs token-centric, npukit.experiments.omnimoe.npu_cost). Writes
bench_omnimoe.csv (every path and point with its counts), npu_cost.csv and summary.txt to --out, and
gpu_figures.md on CUDA; results.html shows the plot and the table.

Default run on a 2-core CPU: one token count (256), experts 4,096 and 65,536, hidden 256, k = 16, plus the
router target at 256 tokens (a few minutes at most); --full runs the earlier full CPU grid (tokens 256, 1,024;
k 16, 32) and the 4,096-token router target (tens of minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from npukit.benchmarks._omnimoe_report import PLOT_NAME, gpu_targets, results_html, router_speedup
from npukit.benchmarks._timing import Spread, measure, spread, wide_warnings

DEFAULT_OUT = "out/bench/omnimoe"
GPU_GRID = dict(tokens=[1024, 4096], experts=[4096, 65536, 1048576], hidden=1024, topk=[16, 32])
CPU_GRID = dict(tokens=[256], experts=[4096, 65536], hidden=256, topk=[16])
CPU_FULL_GRID = dict(tokens=[256, 1024], experts=[4096, 65536], hidden=256, topk=[16, 32])
CPU_TARGET_TOKENS = 256  # the CPU default's router target tokens (--full: TARGET's 4,096)
TARGET = dict(tokens=4096, experts=1048576, hidden=1024, topk=32)
CPU_MEM_BUDGET = 6 * 2**30  # bytes a CPU point may allocate; bigger points are skipped with a note


def _int_list(text: str) -> list[int]:
    try:
        vals = [int(v) for v in text.replace(" ", "").split(",") if v]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got '{text}'") from None
    if not vals or any(v < 1 for v in vals):
        raise argparse.ArgumentTypeError(f"expected positive integers, got '{text}'")
    return vals


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``npukit bench omnimoe``."""
    p.add_argument("--tokens", type=_int_list, metavar="T[,T..]",
                   help="token counts (default CUDA 1024,4096; CPU 256,1024)")
    p.add_argument("--experts", type=_int_list, metavar="N[,N..]",
                   help="expert counts, perfect squares (default CUDA 4096,65536,1048576; CPU 4096,65536)")
    p.add_argument("--hidden", type=int, metavar="H", help="hidden size (default CUDA 1024; CPU 256)")
    p.add_argument("--topk", type=_int_list, metavar="K[,K..]", help="experts per token (default 16,32)")
    p.add_argument("--reps", type=int, default=5, metavar="R",
                   help="CPU timing samples after one warm-up, each a block of >= 50 ms of calls (default 5)")
    p.add_argument("--full", action="store_true",
                   help="CPU: the full grid (tokens 256,1024; k 16,32) and the router target at 4,096 tokens "
                   "(tens of minutes on 2 cores; default: a reduced run of a few minutes)")
    p.add_argument("--seed", type=int, default=0, metavar="S",
                   help="seed of the random inputs and layer weights of every point (default 0)")
    p.add_argument("--no-router-target", dest="router_target", action="store_false",
                   help="skip the router target point (N=1,048,576, hidden 1,024, k=32; CPU: 256 tokens, --full 4,096)")
    p.add_argument("--npu-point", type=_int_list, metavar="T,N,H,K", default=None,
                   help="point mapped onto the NPU model (default: the largest benchmarked point)")
    p.add_argument("--out", default=DEFAULT_OUT, metavar="DIR", help=f"output folder (default {DEFAULT_OUT})")


def measure_ceilings(cuda: bool) -> dict[str, float]:
    """Device ceilings: copy bandwidth (GB/s, read+write) and fp32/bf16 matmul throughput (GFLOP/s)."""
    import torch

    dev = "cuda" if cuda else "cpu"
    nbytes = (1 << 30) if cuda else (1 << 27)
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=dev)
    dst = torch.empty_like(src)
    timer = spread_timer(cuda, 3)
    ms = timer(lambda: dst.copy_(src)).median
    n = 8192 if cuda else 1024
    dt = torch.bfloat16 if cuda else torch.float32
    a = torch.randn(n, n, device=dev, dtype=dt)
    b = torch.randn(n, n, device=dev, dtype=dt)
    ms_mm = timer(lambda: a @ b).median
    return {"gbps": 2 * nbytes / ms / 1e6, "gflops": 2 * n**3 / ms_mm / 1e6}


def spread_timer(cuda: bool, reps: int) -> Callable[[Callable[[], Any]], Spread]:
    """A timer of ``fn`` returning a :class:`Spread` in ms: every sample of ``triton.testing.do_bench`` on CUDA,
    :func:`npukit.benchmarks._timing.measure` (``reps`` blocked samples after a warm-up) on CPU."""
    if cuda:
        import triton.testing

        return lambda fn: spread([float(t) for t in triton.testing.do_bench(fn, return_mode="all")])

    def cpu(fn: Callable[[], Any]) -> Spread:
        s = measure(fn, repeats=reps, warmup=1)
        return Spread(n=s.n, min=s.min * 1e3, median=s.median * 1e3, max=s.max * 1e3)

    return cpu


def _timing_cells(sp: Spread | None) -> dict[str, Any]:
    if sp is None:
        nan = float("nan")
        return dict(median_ms=nan, low_ms=nan, high_ms=nan, n=0, spread=nan, spread_flag="")
    c = sp.columns()
    return dict(median_ms=sp.median, low_ms=sp.min, high_ms=sp.max, n=sp.n, spread=c["spread"],
                spread_flag=c["spread_flag"])


# ---------------------------------------------------------------------------------------------- paths
def _mem_estimate(T: int, N: int, H: int, k: int) -> float:
    """Bytes a CPU point allocates (fp32): expert tables x2 layers (OmniMoE, PEER x2) and dense grads."""
    return 4.0 * (2 * N * H * 3 + 2 * N * H + 6 * T * k * H)


def bench_point(T: int, N: int, H: int, k: int, cuda: bool, reps: int, dense_ok: bool = True,
                seed: int = 0) -> list[dict[str, Any]]:
    """Time every path at one point; returns CSV rows (median_ms, low_ms, high_ms, gflop, hbm_mb, ...)."""
    import torch

    from npukit.kernels.omnimoe import accounting as acc
    from npukit.kernels.omnimoe.expert import omni_expert
    from npukit.kernels.omnimoe.router import DENSE_CHUNK, dense_router
    from npukit.kernels.omnimoe.scheduler import build_schedule
    from npukit.kernels.omnimoe.token import token_centric
    from npukit.models.omnimoe import PEER, OmniMoE, reference_forward
    from npukit.sim.ledger import Ledger

    dev = "cuda" if cuda else "cpu"
    dt = torch.bfloat16 if cuda else torch.float32
    bits = 16 if cuda else 32
    torch.manual_seed(seed)
    timer = spread_timer(cuda, reps)
    n = math.isqrt(N)
    layer = OmniMoE(H, 4 * H, N, k).to(dev, dt).eval()
    x = torch.randn(T, H, device=dev, dtype=dt)
    with torch.no_grad():
        scores, idx = layer.route(x)
        g = torch.exp(scores)
    sched = build_schedule(idx, N)
    A = sched.num_active
    u, v = layer.up_embed.weight, layer.down_embed.weight
    rows: list[dict[str, Any]] = []

    def add(path: str, fn: Callable[[], Any] | None, record: Callable[[Ledger], None], note: str = "") -> None:
        led = Ledger()
        record(led)
        cells = _timing_cells(timer(fn) if fn is not None else None)
        rows.append(dict(path=path, device=dev, dtype=str(dt).replace("torch.", ""), tokens=T, experts=N, hidden=H,
                         topk=k, active=A, reuse=round(T * k / N, 4), **cells,
                         gflop=acc.flops(led) / 1e9, hbm_mb=acc.bytes_moved(led) / 1e6, note=note))

    with torch.no_grad():
        add("router (cartesian)", lambda: layer.route(x), lambda led: acc.record_router(led, T, H, n, k, bits))
        if dense_ok:
            wd = torch.randn(N, H, device=dev, dtype=dt) * H**-0.5
            add("router (dense N-way)", lambda: dense_router(x, wd, k),
                lambda led: acc.record_router(led, T, H, n, k, bits, dense=True), f"chunks of {DENSE_CHUNK} tokens")
            del wd
        add("scheduler", lambda: build_schedule(idx, N), lambda led: acc.record_schedule(led, T * k, N, A))
        add("expert fwd", lambda: omni_expert(x, u, v, g, idx, sched),
            lambda led: acc.record_expert_forward(led, T, H, k, N, A, bits))
        add("token-centric fwd", lambda: token_centric(x, u, v, g, idx),
            lambda led: acc.record_token_forward(led, T, H, k, N, A, bits))
        add("layer fwd", lambda: layer(x), lambda led: (
            acc.record_router(led, T, H, n, k, bits), acc.record_schedule(led, T * k, N, A),
            acc.record_mlp(led, T, H, 4 * H, bits), acc.record_expert_forward(led, T, H, k, N, A, bits)))
        add("torch reference fwd", lambda: reference_forward(layer, x), lambda led: (
            acc.record_router(led, T, H, n, n, bits), acc.record_mlp(led, T, H, 4 * H, bits),
            acc.record_token_forward(led, T, H, k, N, A, bits)), "OmniMoE_Pytorch algorithm: full-n ranking + gather")
    # backward paths
    xg, ug, vg, gg = (t.detach().clone().requires_grad_() for t in (x, u, v, g))
    dout = torch.randn_like(x)
    out_e = omni_expert(xg, ug, vg, gg, idx, sched)
    add("expert bwd", lambda: torch.autograd.grad(out_e, (xg, ug, vg, gg), dout, retain_graph=True),
        lambda led: acc.record_expert_backward(led, T, H, k, N, A, bits))
    out_t = token_centric(xg, ug, vg, gg, idx)
    add("token-centric bwd", lambda: torch.autograd.grad(out_t, (xg, ug, vg, gg), dout, retain_graph=True),
        lambda led: acc.record_token_backward(led, T, H, k, N, A, bits))
    layer.train()

    def layer_step() -> None:
        layer.zero_grad(set_to_none=True)
        layer(x).backward(dout)

    add("layer fwd+bwd", layer_step, lambda led: (
        acc.record_router(led, T, H, n, k, bits), acc.record_schedule(led, T * k, N, A),
        acc.record_mlp(led, T, H, 4 * H, bits), acc.record_mlp(led, T, H, 4 * H, bits, backward=True),
        acc.record_expert_forward(led, T, H, k, N, A, bits), acc.record_expert_backward(led, T, H, k, N, A, bits),
        acc.record_router_backward(led, T, n, k, bits)))
    layer.zero_grad(set_to_none=True)
    heads = max(1, k // 16)
    peer = PEER(H, heads=heads, num_experts=N, experts_per_head=k // heads, non_competing_scores=False).to(dev, dt).eval()
    peer_rec = lambda led: (acc.record_router(led, T * heads, H // 2, n, k // heads, bits),  # noqa: E731
                            acc.record_token_forward(led, T, H, heads * (k // heads), N, A, bits))
    with torch.no_grad():
        add("PEER fwd (npukit)", lambda: peer(x), peer_rec, f"{heads} head(s) x {k // heads} experts")
        try:
            from PEER_pytorch import PEER as RefPEER
        except ImportError:
            add("PEER-pytorch fwd", None, peer_rec, "PEER-pytorch not installed (pip install PEER-pytorch)")
        else:
            ref = RefPEER(H, heads=heads, num_experts=N, num_experts_per_head=k // heads,
                          non_competing_scores=False).to(dev, dt).eval()
            ref.load_state_dict(peer.state_dict())
            add("PEER-pytorch fwd", lambda: ref(x.unsqueeze(0)), peer_rec, f"{heads} head(s) x {k // heads} experts")
            del ref
    return rows


def router_target(cuda: bool, reps: int, seed: int = 0, tokens: int | None = None) -> list[dict[str, Any]]:
    """Cartesian vs dense router at the target point (router only; ``tokens`` replaces its 4,096 tokens)."""
    import torch

    from npukit.kernels.omnimoe import accounting as acc
    from npukit.kernels.omnimoe.router import DENSE_CHUNK, cartesian_router, dense_router
    from npukit.sim.ledger import Ledger

    T, N, H, k = tokens or TARGET["tokens"], TARGET["experts"], TARGET["hidden"], TARGET["topk"]
    n = math.isqrt(N)
    dev = "cuda" if cuda else "cpu"
    dt = torch.bfloat16 if cuda else torch.float32
    bits = 16 if cuda else 32
    torch.manual_seed(seed)
    gx = torch.nn.Linear(H, n, bias=False).to(dev, dt)
    gy = torch.nn.Linear(H, n, bias=False).to(dev, dt)
    nx = torch.nn.BatchNorm1d(n, affine=False).to(dev, dt).eval()
    ny = torch.nn.BatchNorm1d(n, affine=False).to(dev, dt).eval()

    x = torch.randn(T, H, device=dev, dtype=dt)

    def cart() -> Any:
        lx = torch.log_softmax(nx(gx(x)), -1)
        ly = torch.log_softmax(ny(gy(x)), -1)
        return cartesian_router(lx, ly, k)

    timer = spread_timer(cuda, reps)
    rows = []
    with torch.no_grad():
        for path, fn, dense in (("router (cartesian) [target]", cart, False), ("router (dense N-way) [target]", None, True)):
            if dense:
                w = torch.randn(N, H, device=dev, dtype=dt) * H**-0.5
                fn = lambda w=w: dense_router(x, w, k)  # noqa: E731
            led = Ledger()
            acc.record_router(led, T, H, n, k, bits, dense=dense)
            cells = _timing_cells(timer(fn))
            rows.append(dict(path=path, device=dev, dtype=str(dt).replace("torch.", ""), tokens=T, experts=N, hidden=H,
                             topk=k, active=float("nan"), reuse=round(T * k / N, 4), **cells,
                             gflop=acc.flops(led) / 1e9, hbm_mb=acc.bytes_moved(led) / 1e6,
                             note=f"dense logits in chunks of {DENSE_CHUNK} tokens" if dense else ""))
            if dense:
                del w
    return rows


def cuda_selfcheck() -> list[str]:
    """On CUDA: the Triton kernels against the torch references at small shapes (fp32)."""
    import torch

    from npukit.kernels.omnimoe.expert import (
        expert_backward_torch,
        expert_backward_triton,
        expert_forward_torch,
        expert_forward_triton,
    )
    from npukit.kernels.omnimoe.router import cartesian_topk_triton, dense_topk_torch
    from npukit.kernels.omnimoe.scheduler import schedule_torch
    from npukit.kernels.omnimoe.token import token_forward_torch, token_forward_triton

    def rel(a: Any, b: Any) -> float:
        return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30))

    g = torch.Generator(device="cuda").manual_seed(0)
    T, H, N, k = 512, 1024, 4096, 32
    lx = torch.randn(T, 64, device="cuda", generator=g).log_softmax(-1)
    ly = torch.randn(T, 64, device="cuda", generator=g).log_softmax(-1)
    same = torch.equal(cartesian_topk_triton(lx, ly, k)[1], dense_topk_torch(lx, ly, k)[1])
    x = torch.randn(T, H, device="cuda", generator=g)
    u = torch.randn(N, H, device="cuda", generator=g) * H**-0.5
    v = torch.randn(N, H, device="cuda", generator=g) * H**-0.5
    w = torch.rand(T, k, device="cuda", generator=g)
    idx = dense_topk_torch(lx, ly, k)[1]
    sched = schedule_torch(idx, N)
    ref, s = expert_forward_torch(x, u, v, w, sched)
    out = [rel(expert_forward_triton(x, u, v, w, idx, sched, det)[0], ref) for det in (False, True)]
    dout = torch.randn_like(x)
    want = expert_backward_torch(dout, x, u, v, w, s, sched)
    bwd = max(rel(a, b) for det in (False, True)
              for a, b in zip(expert_backward_triton(dout, x, u, v, w, idx, s, sched, det), want, strict=True))
    tok = rel(token_forward_triton(x, u, v, w, idx), token_forward_torch(x, u, v, w, idx))
    ok = same and max(out + [bwd, tok]) < 1e-4
    return [f"CUDA self-check ({'PASS' if ok else 'FAIL'}): router indices equal brute force: {same}; "
            f"expert fwd rel err {max(out):.1e}, bwd {bwd:.1e}, token-centric fwd {tok:.1e} (limit 1e-4)"]


# ---------------------------------------------------------------------------------------------- grid
PATHS = ("router (cartesian)", "router (dense N-way)", "scheduler", "expert fwd", "token-centric fwd", "layer fwd",
         "torch reference fwd", "expert bwd", "token-centric bwd", "layer fwd+bwd", "PEER fwd (npukit)", "PEER-pytorch fwd")


def _point_label(T: int, N: int, H: int, k: int) -> str:
    return f"T={T} N={N} H={H} k={k}"


def _run_grid(points: list[tuple[int, int, int, int]], cuda: bool, reps: int, seed: int,
              out: Path) -> tuple[list[dict[str, Any]], list[Path]]:
    """Every path at every point through ``triton.testing.perf_report`` (x: the point, one line per path), which
    writes ``omnimoe_ms.csv`` / ``.png`` to ``out``; returns the CSV rows of :func:`bench_point` and those files.
    Each point is set up and timed once (:func:`bench_point`); perf_report reads its paths' times."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import triton.testing

    done: dict[str, dict[str, dict[str, Any]]] = {}  # point label -> path -> row
    rows: list[dict[str, Any]] = []

    def timed(point: str, path: str) -> tuple[float, float, float]:
        if point not in done:
            T, N, H, k = next(p for p in points if _point_label(*p) == point)
            dense_ok = cuda or (N * H * 4 <= 2**30 and T * N * H <= 2e11)
            print(f"point {point} ...", flush=True)
            new = bench_point(T, N, H, k, cuda, reps, dense_ok, seed)
            rows.extend(new)
            done[point] = {r["path"]: r for r in new}
        r = done[point].get(path)
        return (r["median_ms"], r["low_ms"], r["high_ms"]) if r else (float("nan"),) * 3

    bench = triton.testing.Benchmark(
        x_names=["point"], x_vals=[_point_label(*p) for p in points], line_arg="path", line_vals=list(PATHS),
        line_names=list(PATHS), ylabel="ms", plot_name=PLOT_NAME, args={}, y_log=True,
        styles=[(f"C{i % 10}", "-" if i < 10 else "--") for i in range(len(PATHS))])
    if points:
        with matplotlib.rc_context({"lines.marker": "o", "figure.figsize": (10, 6)}):  # a one-point grid shows too
            triton.testing.perf_report(bench)(timed).run(save_path=str(out), print_data=False)
            fig = plt.gcf()  # perf_report plots the points at 0, 1, ...: name them and save the figure again
            fig.axes[0].set_xticks(range(len(points)), bench.x_vals, rotation=15, ha="right")
            fig.axes[0].legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
            fig.tight_layout()
            fig.savefig(out / f"{PLOT_NAME}.png")
        plt.close("all")
    files = [out / f"{PLOT_NAME}.csv", out / f"{PLOT_NAME}.png", out / "results.html"]
    return rows, [f for f in files if f.is_file()]


# ---------------------------------------------------------------------------------------------- CLI
def run(args: argparse.Namespace) -> int:
    """Run the benchmark; prints tables and writes CSVs to ``args.out``."""
    import torch

    from npukit.experiments.omnimoe.npu_cost import npu_cost
    from npukit.sim import format_table, prepare_out_dir, write_csv, write_text
    from npukit.sim.errors import ConfigError

    cuda = torch.cuda.is_available()
    grid = GPU_GRID if cuda else CPU_FULL_GRID if args.full else CPU_GRID
    tokens = args.tokens or grid["tokens"]
    experts = args.experts or grid["experts"]
    hidden = args.hidden if args.hidden is not None else grid["hidden"]
    topks = args.topk or grid["topk"]
    if hidden < 2:
        raise ConfigError(f"--hidden must be >= 2, got {hidden}")
    if args.reps < 1:
        raise ConfigError(f"--reps must be >= 1, got {args.reps}")
    for N in experts:
        if math.isqrt(N) ** 2 != N or N < 4:
            raise ConfigError(f"--experts values must be perfect squares >= 4 (n*n experts), got {N}")
        for k in topks:
            if k > N:
                raise ConfigError(f"--topk {k} exceeds --experts {N}; lower --topk")
    if args.npu_point is not None and len(args.npu_point) != 4:
        raise ConfigError("--npu-point takes four integers T,N,H,K")
    if not 0 <= args.seed < 2**63:
        raise ConfigError(f"--seed must be an integer in 0..2^63-1, got {args.seed}")
    out = prepare_out_dir(args.out)
    device = torch.cuda.get_device_name() if cuda else "CPU (torch paths; no CUDA device)"
    print(f"npukit bench omnimoe on {device}, {torch.get_num_threads()} threads")
    checks = cuda_selfcheck() if cuda else []
    for ln in checks:
        print(ln)
    ceil = measure_ceilings(cuda)
    print(f"measured ceilings: copy {ceil['gbps']:.1f} GB/s, matmul {ceil['gflops']:.1f} GFLOP/s")
    points = []
    for T in tokens:
        for N in experts:
            for k in topks:
                if not cuda and _mem_estimate(T, N, hidden, k) > CPU_MEM_BUDGET:
                    print(f"skip T={T} N={N} H={hidden} k={k}: needs ~{_mem_estimate(T, N, hidden, k) / 2**30:.1f} GiB on CPU")
                    continue
                points.append((T, N, hidden, k))
    rows, report_files = _run_grid(points, cuda, args.reps, args.seed, out)
    if args.router_target:
        t_tok = TARGET["tokens"] if cuda or args.full else CPU_TARGET_TOKENS
        print(f"router target point T={t_tok} N=1,048,576 H=1024 k=32 (dense router chunked over tokens) ...", flush=True)
        rows.extend(router_target(cuda, args.reps, args.seed, t_tok))
    for r in rows:
        s = r["median_ms"] / 1e3
        r["gflops_per_s"] = r["gflop"] / s if s == s and s > 0 else float("nan")
        r["gb_per_s"] = r["hbm_mb"] / 1e3 / s if s == s and s > 0 else float("nan")
        r["pct_bw_ceiling"] = 100 * r["gb_per_s"] / ceil["gbps"]
        r["pct_flop_ceiling"] = 100 * r["gflops_per_s"] / ceil["gflops"]
    headers = ["path", "T", "N", "k", "reuse", "ms median", "ms min", "ms max", "n", "max/min", "flag", "GFLOP", "MB",
               "GFLOP/s", "GB/s", "%BW", "note"]
    table = format_table(headers, [
        [r["path"], r["tokens"], r["experts"], r["topk"], r["reuse"], r["median_ms"], r["low_ms"], r["high_ms"], r["n"],
         r["spread"], r["spread_flag"], r["gflop"], r["hbm_mb"], r["gflops_per_s"], r["gb_per_s"],
         r["pct_bw_ceiling"], r["note"]] for r in rows])
    print(table)
    warnings = wide_warnings(rows, lambda r: f"{r['path']} at T={r['tokens']} N={r['experts']} k={r['topk']}")
    for ln in warnings:
        print(ln)
    lines = [f"device: {device}", f"date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}",
             f"ceilings: copy {ceil['gbps']:.1f} GB/s, matmul {ceil['gflops']:.1f} GFLOP/s"]
    sp = router_speedup(rows)
    if sp is not None:
        (ratio, lo, hi), where, wide = sp
        line = (f"router speedup: {ratio:.0f}x (Cartesian vs dense N-way router at {where}; ratio of medians, "
                f"{lo:.0f}-{hi:.0f}x between the extremes of the samples)")
        print(line)
        lines.append(line)
        if wide:
            ln = "warning: the router speedup's range is wider than 2x: too noisy to quote one number"
            print(ln)
            lines.append(ln)
    for ln in gpu_targets(rows, cuda):
        print(ln)
        lines.append(ln)
    lines += warnings + checks
    if cuda:
        text = "\n".join(["# OmniMoE GPU figures", "", *lines, "", table, ""])
        print(f"wrote {write_text(Path(out) / 'gpu_figures.md', text)}")
    if args.npu_point is not None:
        T, N, H, k = args.npu_point
    else:
        big = max(rows, key=lambda r: (r["tokens"] * r["topk"], r["experts"])) if rows else None
        T, N, H, k = (big["tokens"], big["experts"], big["hidden"], big["topk"]) if big else (1024, 4096, hidden, 16)
    npu = npu_cost(T, H, N, k)
    print(f"\nNPU model ({npu['arch']}, table {npu['table']}) at T={T} N={N} H={H} k={k}, "
          f"reuse {npu['reuse']:.3g}, {npu['active']} active experts:")
    print(format_table(["path", "part", "total_cycles", "DRAM MB", "energy uJ", "DRAM uJ"], [
        [r["path"], r["part"], r["cycles"], r["dram_bytes"] / 1e6, r["energy_total_pj"] / 1e6, r["energy_dram_pj"] / 1e6]
        for r in npu["rows"]]))
    for r in npu["rows"]:
        r.update(tokens=T, experts=N, hidden=H, topk=k)
    if report_files:
        report_files = [f for f in report_files if f.name != "results.html"]
        report_files.append(write_text(Path(out) / "results.html", results_html(device, lines, headers, rows)))
    for f in report_files:
        print(f"wrote {f}")
    print(f"wrote {write_csv(Path(out) / 'bench_omnimoe.csv', rows)}")
    print(f"wrote {write_csv(Path(out) / 'npu_cost.csv', npu['rows'])}")
    print(f"wrote {write_text(Path(out) / 'summary.txt', chr(10).join(lines) + chr(10) + table + chr(10))}")
    return 0
