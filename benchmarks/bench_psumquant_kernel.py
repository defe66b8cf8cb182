"""Benchmark: psum-quantized tiled matmul vs plain fp32 torch.matmul (4096 x 4096 x 4096 by default).

CPU: the torch path of ``npukit.kernels.psumquant`` (``torch.mm`` per K-tile and row chunk + one
fused numba quantize-accumulate pass; and the plain eager-torch loop for reference) against
``torch.matmul`` on the same fp32 operands, for both psum semantics, 128 x 128 tiles, B = 8,
per-(row, N-tile) / per-(row, K-tile, N-tile) scales. Target: within 3x.
GPU (when CUDA is present): the Triton kernel against ``torch.matmul`` (TF32 off). Target: 1.5x.
Times: min / median / max seconds over ``--repeats`` samples after one warm-up (benchmarks/_timing.py); ratios
are of medians; a spread max/min above 2x is flagged WIDE with a warning line. Default: 2048^3 and no eager loop
(well under 3 min on 2 cores); ``--full`` is 4096^3 with the eager loop.

    python benchmarks/bench_psumquant_kernel.py [--size 2048] [--full] [--repeats 5] [--out out/bench] [--eager]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from npukit.benchmarks._timing import Spread, measure, wide_warnings


def _time(fn, repeats: int, cuda: bool = False) -> Spread:
    """Per-call seconds over ``repeats`` samples after a warm-up (benchmarks/_timing.py); CUDA calls synchronise."""
    if cuda:
        import torch

        return measure(lambda: (fn(), torch.cuda.synchronize()), repeats=repeats)
    return measure(fn, repeats=repeats)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=None, help="M = K = N (default 2048; --full 4096)")
    ap.add_argument("--full", action="store_true", help="4096^3 and the eager loop (minutes on 2 cores)")
    ap.add_argument("--rows", type=int, default=128)
    ap.add_argument("--cols", type=int, default=128)
    ap.add_argument("--bits", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--eager", action="store_true", help="also time the (slow) eager-torch reference loop")
    ap.add_argument("--out", default="out/bench")
    args = ap.parse_args()

    import torch

    from npukit.kernels.psumquant import (
        psumquant_matmul_numba,
        psumquant_matmul_torch,
        psumquant_matmul_triton,
        tile_counts,
    )

    n = args.size or (4096 if args.full else 2048)
    eager = args.eager or args.full
    R, C, B = args.rows, args.cols, args.bits
    kf, nt = tile_counts(n, n, R, C)
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(n, n, generator=g), torch.randn(n, n, generator=g)
    inv = {"buffer": torch.full((n, nt), 0.25), "transfer": torch.full((n, kf, nt), 1.0)}
    rows: list[dict] = []

    def row(device: str, impl: str, sem: str, t: Spread, ref: Spread | None) -> dict:
        return {"device": device, "impl": impl, "semantics": sem, "seconds": t.median,
                "ratio": 1.0 if ref is None else t.median / ref.median, **t.columns("s_")}

    t_mm = _time(lambda: torch.matmul(a, b), args.repeats)
    rows.append(row("cpu", "torch.matmul fp32", "-", t_mm, None))
    for sem in ("buffer", "transfer"):
        t = _time(lambda sem=sem: psumquant_matmul_numba(a, b, inv[sem], R, C, B, sem), args.repeats)
        rows.append(row("cpu", "numba (mm + fused pass)", sem, t, t_mm))
        if eager:
            t = _time(lambda sem=sem: psumquant_matmul_torch(a, b, inv[sem], R, C, B, sem), 1)
            rows.append(row("cpu", "torch (eager loop)", sem, t, t_mm))
    gpu_note = "no CUDA device"
    if torch.cuda.is_available():
        torch.backends.cuda.matmul.allow_tf32 = False
        ag, bg = a.cuda(), b.cuda()
        t_g = _time(lambda: torch.matmul(ag, bg), args.repeats, cuda=True)
        rows.append(row("cuda", "torch.matmul fp32", "-", t_g, None))
        for sem in ("buffer", "transfer"):
            ig = inv[sem].cuda()
            t = _time(lambda sem=sem, ig=ig: psumquant_matmul_triton(ag, bg, ig, R, C, B, sem), args.repeats, cuda=True)
            rows.append(row("cuda", "triton kernel", sem, t, t_g))
        gpu_note = torch.cuda.get_device_name(0)

    print(f"psum-quantized matmul {n}x{n}x{n}, {R}x{C} tiles, B={B} ({torch.get_num_threads()} CPU threads; GPU: {gpu_note})")
    hdr = ["device", "impl", "semantics", "seconds", "ratio", "s_min", "s_median", "s_max", "s_n", "s_spread",
           "s_spread_flag"]
    print(f"{'device':>6}  {'impl':<30} {'semantics':>9} {'s median':>9} {'s min':>9} {'s max':>9} {'n':>3} "
          f"{'max/min':>7} {'flag':>4} {'x matmul':>9}")
    for r in rows:
        print(f"{r['device']:>6}  {r['impl']:<30} {r['semantics']:>9} {r['seconds']:9.3f} {r['s_min']:9.3f} "
              f"{r['s_max']:9.3f} {r['s_n']:3d} {r['s_spread']:7.2f} {r['s_spread_flag']:>4} {r['ratio']:9.2f}")
    for ln in wide_warnings(rows, lambda r: f"{r['device']} {r['impl']} {r['semantics']}", prefix="s_"):
        print(ln)
    cpu = [r["ratio"] for r in rows if r["device"] == "cpu" and r["impl"].startswith("numba")]
    print(f"target: CPU numba path within 3x of torch.matmul (worst here {max(cpu):.2f}x, ratio of medians)")
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
