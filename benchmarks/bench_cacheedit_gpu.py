"""One-shot CacheEdit GPU benchmark, to run when a CUDA device is available.

The same diffusers hooks as on the CPU (:func:`npukit.models.cacheedit.apply_cacheedit`) on a CUDA device, where
the sparse steps use the Triton kernels (K/V-cache row update, row scatter of the block outputs): per-call full vs
sparse times at several active fractions on the shipped Flux editor and on a wider random-init FLUX
(:mod:`bench_cacheedit`), plus the Triton kernels checked against their torch references on the device.
Records the date, the device name, torch / triton / diffusers versions. Without CUDA it prints one line and
exits 0 (nothing written).
``python benchmarks/bench_cacheedit_gpu.py [--reps 20] [--out out/bench/cacheedit_gpu]``
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def kernels_match(device: str) -> dict[str, float]:
    """Max abs difference of each Triton kernel vs its torch reference on ``device``."""
    import torch

    from npukit.kernels.cacheedit import kv_update, kv_update_ref, scatter_residual, scatter_residual_ref

    g = torch.Generator(device=device).manual_seed(0)
    b, n, d, a = 2, 512, 256, 48
    idx = torch.stack([torch.randperm(n, device=device, generator=g)[:a] for _ in range(b)])
    h = torch.randn(b, n, d, device=device, generator=g)
    y = torch.randn(b, a, d, device=device, generator=g)
    h1, h2 = h.clone(), h.clone()
    scatter_residual(h1, idx, y)
    scatter_residual_ref(h2, idx, y)
    kc, vc = torch.randn(b, n, d, device=device, generator=g), torch.randn(b, n, d, device=device, generator=g)
    k, v = torch.randn(b, a, d, device=device, generator=g), torch.randn(b, a, d, device=device, generator=g)
    k1, v1, k2, v2 = kc.clone(), vc.clone(), kc.clone(), vc.clone()
    kv_update(k1, v1, idx, k, v)
    kv_update_ref(k2, v2, idx, k, v)
    return {"scatter_max_abs": float((h1 - h2).abs().max()), "kv_update_max_abs": float(max((k1 - k2).abs().max(),
                                                                                             (v1 - v2).abs().max()))}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--fracs", default="0.05,0.1,0.2,0.5,1.0")
    p.add_argument("--out", default="out/bench/cacheedit_gpu")
    a = p.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("bench_cacheedit_gpu: no CUDA device here; skipped (nothing written)")
        return 0
    import diffusers
    from bench_cacheedit import per_call, write

    dev = "cuda"
    meta = {"date_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "device": torch.cuda.get_device_name(0), "torch": torch.__version__, "diffusers": diffusers.__version__}
    try:
        import triton

        meta["triton"] = triton.__version__
    except ImportError:
        meta["triton"] = None
    meta["kernels_vs_torch"] = kernels_match(dev)
    fracs = [float(x) for x in a.fracs.split(",")]
    rows = per_call("editor", dev, fracs, a.reps) + per_call("wide", dev, fracs, a.reps)
    for r in rows:
        r.update(date_utc=meta["date_utc"], device_name=meta["device"])
    print(json.dumps(meta))
    print(f"{'model':>7} {'frac':>6} {'full ms':>9} {'sparse ms':>10} {'speedup':>8}")
    for r in rows:
        print(f"{r['model']:>7} {r['active_frac']:>6} {r['full_ms']:>9} {r['sparse_ms']:>10} {r['speedup']:>8}")
    out = Path(a.out)
    path = write(rows, out, "bench_cacheedit_gpu.csv")
    (out / "bench_cacheedit_gpu.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(f"wrote {path}")
    print(f"wrote {out / 'bench_cacheedit_gpu.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
