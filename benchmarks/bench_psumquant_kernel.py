"""Benchmark: psum-quantized tiled matmul vs plain fp32 torch.matmul (4096 x 4096 x 4096 by default).

CPU: the torch path of ``npukit.kernels.psumquant`` (``torch.mm`` per K-tile and row chunk + one
fused numba quantize-accumulate pass; and the plain eager-torch loop for reference) against
``torch.matmul`` on the same fp32 operands, for both psum semantics, 128 x 128 tiles, B = 8,
per-(row, N-tile) / per-(row, K-tile, N-tile) scales. Target: within 3x.
GPU (when CUDA is present): the Triton kernel against ``torch.matmul`` (TF32 off). Target: 1.5x.
Times are the best of ``--repeats`` runs after one warm-up (seconds).

    python benchmarks/bench_psumquant_kernel.py [--size 4096] [--repeats 3] [--out out/bench] [--no-eager]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path


def _best(fn, repeats: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _best_cuda(fn, repeats: int) -> float:
    import torch

    fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=4096, help="M = K = N")
    ap.add_argument("--rows", type=int, default=128)
    ap.add_argument("--cols", type=int, default=128)
    ap.add_argument("--bits", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-eager", action="store_true", help="skip the (slow) eager-torch reference loop")
    ap.add_argument("--out", default="out/bench")
    args = ap.parse_args()

    import torch

    from npukit.kernels.psumquant import (
        psumquant_matmul_numba,
        psumquant_matmul_torch,
        psumquant_matmul_triton,
        tile_counts,
    )

    n, R, C, B = args.size, args.rows, args.cols, args.bits
    kf, nt = tile_counts(n, n, R, C)
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(n, n, generator=g), torch.randn(n, n, generator=g)
    inv = {"buffer": torch.full((n, nt), 0.25), "transfer": torch.full((n, kf, nt), 1.0)}
    rows: list[dict] = []
    t_mm = _best(lambda: torch.matmul(a, b), args.repeats)
    rows.append({"device": "cpu", "impl": "torch.matmul fp32", "semantics": "-", "seconds": t_mm, "ratio": 1.0})
    for sem in ("buffer", "transfer"):
        t = _best(lambda sem=sem: psumquant_matmul_numba(a, b, inv[sem], R, C, B, sem), args.repeats)
        rows.append({"device": "cpu", "impl": "numba (mm + fused pass)", "semantics": sem, "seconds": t, "ratio": t / t_mm})
        if not args.no_eager:
            t = _best(lambda sem=sem: psumquant_matmul_torch(a, b, inv[sem], R, C, B, sem), 1)
            rows.append({"device": "cpu", "impl": "torch (eager loop)", "semantics": sem, "seconds": t, "ratio": t / t_mm})
    gpu_note = "no CUDA device"
    if torch.cuda.is_available():
        torch.backends.cuda.matmul.allow_tf32 = False
        ag, bg = a.cuda(), b.cuda()
        t_g = _best_cuda(lambda: torch.matmul(ag, bg), args.repeats)
        rows.append({"device": "cuda", "impl": "torch.matmul fp32", "semantics": "-", "seconds": t_g, "ratio": 1.0})
        for sem in ("buffer", "transfer"):
            ig = inv[sem].cuda()
            t = _best_cuda(lambda sem=sem, ig=ig: psumquant_matmul_triton(ag, bg, ig, R, C, B, sem), args.repeats)
            rows.append({"device": "cuda", "impl": "triton kernel", "semantics": sem, "seconds": t, "ratio": t / t_g})
        gpu_note = torch.cuda.get_device_name(0)

    print(f"psum-quantized matmul {n}x{n}x{n}, {R}x{C} tiles, B={B} ({torch.get_num_threads()} CPU threads; GPU: {gpu_note})")
    hdr = ["device", "impl", "semantics", "seconds", "ratio"]
    print(f"{'device':>6}  {'impl':<30} {'semantics':>9} {'seconds':>9} {'x matmul':>9}")
    for r in rows:
        print(f"{r['device']:>6}  {r['impl']:<30} {r['semantics']:>9} {r['seconds']:9.3f} {r['ratio']:9.2f}")
    cpu = [r["ratio"] for r in rows if r["device"] == "cpu" and r["impl"].startswith("torch path")]
    print(f"target: CPU torch path within 3x of torch.matmul (worst here {max(cpu):.2f}x)")
    if gpu_note == "no CUDA device":
        print("GPU: no CUDA device (the Triton kernel is tested under TRITON_INTERPRET=1 only)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from npukit.sim import write_csv

    path = write_csv(out / "bench_psumquant_kernel.csv", [{h: r[h] for h in hdr} | {"size": n, "bits": B} for r in rows])
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
