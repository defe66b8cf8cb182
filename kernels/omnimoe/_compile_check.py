"""Compile every OmniMoE Triton kernel for a CUDA target without a GPU (PTX and cubin through the
ptxas shipped with Triton): catches GPU-only compile errors on machines that only have the
interpreter. Run as ``python -m npukit.kernels.omnimoe._compile_check [sm]`` (default 90, H100/H200)
with ``TRITON_INTERPRET`` unset; prints one ``OK``/``FAIL`` line per kernel variant, exit 1 on any FAIL.
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str]) -> int:
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        print("unset TRITON_INTERPRET to compile the kernels", file=sys.stderr)
        return 2
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from . import _triton_expert as E
    from . import _triton_router as R

    target = GPUTarget("cuda", int(argv[0]) if argv else 90, 32)
    fails = 0

    def comp(fn, sig: dict[str, str], cons: dict[str, object]) -> None:  # type: ignore[no-untyped-def]
        nonlocal fails
        sig = {**sig, **dict.fromkeys(cons, "constexpr")}
        try:
            triton.compile(ASTSource(fn=fn, signature=sig, constexprs=cons), target=target)
            print(f"OK {fn.__name__} {cons}")
        except Exception as exc:  # noqa: BLE001 - report every failure, keep going
            fails += 1
            print(f"FAIL {fn.__name__} {cons}: {type(exc).__name__}: {str(exc)[:400]}")

    i32, f32 = "i32", tl.float32
    for dt in ("fp32", "bf16"):
        comp(R._router_fwd, dict(LX=f"*{dt}", LY=f"*{dt}", S=f"*{dt}", I="*i64", n=i32, k=i32, stride_l=i32, stride_o=i32),
             dict(NP=1024, KP=32, KQ=32, ACC=f32))
    comp(R._router_bwd, dict(DS="*fp32", I="*i64", DLX="*fp32", DLY="*fp32", n=i32, k=i32, stride_o=i32, stride_l=i32),
         dict(KQ=32, ACC=f32, BLOCK_N=256))
    comp(E._histogram, dict(IDX="*i64", COUNTS="*i32", P=i32), dict(BLOCK=1024))
    for dt in ("fp32", "bf16"):
        for atomic in (True, False):
            comp(E._expert_fwd, dict(X=f"*{dt}", U=f"*{dt}", V=f"*{dt}", G="*fp32", TOK="*i64", EXP="*i64", OFF="*i64",
                                     S="*fp32", A="*fp32", OUT="*fp32", H=i32, stride_x=i32, stride_u=i32, stride_v=i32,
                                     stride_o=i32), dict(ATOMIC=atomic, ACC=f32, BLOCK_M=16, BLOCK_H=128))
            comp(E._expert_bwd, dict(X=f"*{dt}", U=f"*{dt}", V=f"*{dt}", G="*fp32", TOK="*i64", EXP="*i64", OFF="*i64",
                                     S="*fp32", DOUT=f"*{dt}", DG="*fp32", DS="*fp32", ASC="*fp32", DU="*fp32", DV="*fp32",
                                     DX="*fp32", H=i32, stride_x=i32, stride_u=i32, stride_v=i32, stride_do=i32, stride_du=i32,
                                     stride_dv=i32, stride_dx=i32), dict(ATOMIC=atomic, ACC=f32, BLOCK_M=16, BLOCK_H=128))
    comp(E._token_combine, dict(C="*fp32", IDX="*i64", W="*bf16", OUT="*bf16", k=i32, H=i32, stride_w=i32, stride_o=i32),
         dict(KB=32, ACC=f32, BLOCK_H=128))
    for act in (0, 1):
        comp(E._token_fwd, dict(X="*bf16", U="*bf16", V="*bf16", G="*bf16", IDX="*i64", S="*fp32", OUT="*bf16", k=i32,
                                H=i32, stride_x=i32, stride_u=i32, stride_v=i32, stride_o=i32),
             dict(ACT=act, KB=32, ACC=f32, BLOCK_H=128))
    return 1 if fails else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
