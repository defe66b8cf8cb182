"""Packing of GEMM operands into npu_top's buffer words and unpacking of its output buses.

Lane i of a packed word holds bits [i*W, (i+1)*W) (two's complement), as in the Verilog.
Buffer layouts (the order of the words on npu_top's input streams, see npu_top.v): ws: A[i*M + m] lane
r = A[m, i*R + r], B[(j*kf + i)*R + t] lane c = B[i*R + R-1-t, j*C + c] (load order); os: A[i*K + k] lane
r = A[i*R + r, k], B[j*K + k] lane c = B[k, j*C + c]. Padding lanes are zero.
"""

from __future__ import annotations

import numpy as np


def pack_lanes(values, width: int) -> int:
    """Pack signed ints into one unsigned int, lane i at bits [i*width, (i+1)*width)."""
    mask = (1 << width) - 1
    word = 0
    for i, v in enumerate(values):
        word |= (int(v) & mask) << (i * width)
    return word


def unpack_lanes(bits: str, width: int, lanes: list[int], signed: bool) -> dict[int, int | None]:
    """Decode lanes from an MSB-first bit string; a lane holding x or z decodes to None."""
    total = len(bits)
    out: dict[int, int | None] = {}
    for lane in lanes:
        s = bits[total - (lane + 1) * width: total - lane * width]
        if not set(s) <= {"0", "1"}:
            out[lane] = None
            continue
        v = int(s, 2)
        if signed and v >= 1 << (width - 1):
            v -= 1 << width
        out[lane] = v
    return out


def operand_words(
    a: np.ndarray, b: np.ndarray, rows: int, cols: int, dataflow: str, data_bits: int
) -> tuple[list[int], list[int]]:
    """(A buffer words, B buffer words) for ``a`` (M x K) @ ``b`` (K x N) on a rows x cols array.

    ``dataflow`` 'is' loads the weight-stationary layout of B^T @ A^T (the hardware then emits out^T)."""
    if dataflow == "is":
        return operand_words(np.asarray(b).T, np.asarray(a).T, rows, cols, "ws", data_bits)
    m, k = a.shape
    n = b.shape[1]
    if dataflow == "ws":
        kf, nf = -(-k // rows), -(-n // cols)
        ap = np.zeros((m, kf * rows), dtype=np.int64)
        ap[:, :k] = a
        bp = np.zeros((kf * rows, nf * cols), dtype=np.int64)
        bp[:k, :n] = b
        a_words = [pack_lanes(ap[mm, i * rows:(i + 1) * rows], data_bits) for i in range(kf) for mm in range(m)]
        b_words = [
            pack_lanes(bp[i * rows + rows - 1 - t, j * cols:(j + 1) * cols], data_bits)
            for j in range(nf) for i in range(kf) for t in range(rows)
        ]
        return a_words, b_words
    mf, nf = -(-m // rows), -(-n // cols)
    ap = np.zeros((mf * rows, k), dtype=np.int64)
    ap[:m, :] = a
    bp = np.zeros((k, nf * cols), dtype=np.int64)
    bp[:, :n] = b
    a_words = [pack_lanes(ap[i * rows:(i + 1) * rows, kk], data_bits) for i in range(mf) for kk in range(k)]
    b_words = [pack_lanes(bp[kk, j * cols:(j + 1) * cols], data_bits) for j in range(nf) for kk in range(k)]
    return a_words, b_words
