"""OmniMoE speed targets (the issue's section 5), one prepared run.

CPU: ``npukit bench omnimoe`` at reduced sizes plus the router target point (N = 1,048,576,
tokens 4,096, hidden 1,024, k = 32; target: the Cartesian router >= 50x faster than a dense N-way
router). CUDA: the full grid (N in {4,096, 65,536, 1,048,576}, tokens {1,024, 4,096}, hidden 1,024,
k {16, 32}) plus the shapes of flash-algo/omni-moe's tests (1,024 tokens, hidden 1,024, N 1k..64k,
k = 32); targets: layer >= 10x the PEER kernel at 4,096 tokens, expert kernel >= 50% of the
measured bandwidth ceiling. On CUDA the figures of both runs, with date and device name, are joined into
``DIR/gpu_figures_<date>.md`` (only the output folder is written; nothing in the source tree).

Usage: python benchmarks/bench_omnimoe.py [--out DIR] [extra npukit bench omnimoe options]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    import torch

    from npukit.cli import main as npukit_main

    out = "out/bench/omnimoe"
    if "--out" in argv:
        out = argv[argv.index("--out") + 1]
    else:
        argv = [*argv, "--out", out]
    rc = npukit_main(["bench", "omnimoe", *argv])
    if rc == 0 and torch.cuda.is_available():
        rc = npukit_main(["bench", "omnimoe", "--tokens", "1024", "--experts", "1024,4096,16384,65536", "--hidden", "1024",
                          "--topk", "32", "--no-router-target", "--out", f"{out}/omni_moe_test_shapes"])
        from npukit.sim import write_text

        parts = [Path(out) / "gpu_figures.md", Path(out) / "omni_moe_test_shapes" / "gpu_figures.md"]
        dest = write_text(Path(out) / f"gpu_figures_{time.strftime('%Y%m%d')}.md",
                          "\n\n".join(p.read_text() for p in parts if p.exists()))
        print(f"wrote {dest}")
    return rc


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
