"""The GEMM-shaped ONNX operators (Conv, Gemm, MatMul, Einsum, Attention) -> npukit layers: the methods
:class:`~npukit.workloads._onnx_lower._Lowering` inherits; the graph walk, fusions and vector ops stay there."""

from __future__ import annotations

import math
from typing import Any

from ._onnx_graph import _broadcast

_CONVS = {"Conv": (0, 1), "ConvInteger": (0, 1), "QLinearConv": (0, 3), "ConvTranspose": (0, 1)}


class _GemmLowering:
    """GEMM-shaped operator lowerings; uses the walker's ``attrs``, ``need``, ``fail``, ``gemm``, ``vector``,
    ``skip`` and ``name`` (defined by :class:`~npukit.workloads._onnx_lower._Lowering`)."""

    def conv(self, n: Any, i: int) -> None:
        xi, wi = _CONVS[n.op_type]
        x, w, y = self.need(n.input[xi], i), self.need(n.input[wi], i), self.need(n.output[0], i)
        at = self.attrs(n)
        if len(x) < 3 or len(w) != len(x) or len(y) != len(x):
            raise self.fail(n, i, f"expected input and weight of rank >= 3 (N, C, spatial...), got {list(x)} and {list(w)}")
        g, sp = int(at.get("group", 1)), len(x) - 2
        ks = [int(k) for k in (at.get("kernel_shape") or w[2:])]
        strides = [int(s) for s in (at.get("strides") or [1] * sp)]
        dil = [int(d) for d in (at.get("dilations") or [1] * sp)]
        nb, cin = x[0], x[1]
        if not len(ks) == len(strides) == len(dil) == sp or min(ks + strides + dil) <= 0:
            raise self.fail(n, i, f"kernel_shape {ks}, strides {strides} and dilations {dil} must be {sp} positive ints")
        if g <= 0 or cin % g:
            raise self.fail(n, i, f"group {g} does not divide the {cin} input channels")
        if n.op_type == "ConvTranspose":  # weight (Cin, Cout/group, *kernel): the scatter GEMM
            self.gemm(n, i, nb * math.prod(x[2:]), w[1] * math.prod(ks), cin // g, g, "conv")
            return
        cout = w[0]
        if w[1] * g != cin or cout % g:
            raise self.fail(n, i, f"input has {cin} channels but weight {list(w)} with group {g} takes {w[1] * g}")
        out_sp = list(y[2:])
        pads = self._pads(n, i, at, list(x[2:]), out_sp, ks, strides, dil)
        conv = None
        if sp in (1, 2) and all(d == 1 for d in dil) and len(set(strides)) == 1:
            if sp == 2:
                conv = (x[2] + pads[0], x[3] + pads[1], ks[0], ks[1], cin // g, cout // g, strides[0])
            else:
                conv = (1, x[2] + pads[0], 1, ks[0], cin // g, cout // g, strides[0])
            h, wd, fh, fw, *_, s = conv
            if fh > h or fw > wd or ((h - fh) // s + 1) * ((wd - fw) // s + 1) != math.prod(out_sp):
                conv = None  # not a SCALE-Sim conv row: keep the exact GEMM shape only
        if conv is not None and nb > 1:  # the row describes one image: a GEMM per (group, image), images sharing weights
            self.gemm(n, i, math.prod(out_sp), cout // g, w[1] * math.prod(ks), g * nb, "conv", conv, shared=nb)
            return
        self.gemm(n, i, nb * math.prod(out_sp), cout // g, w[1] * math.prod(ks), g, "conv", conv)

    def _pads(self, n: Any, i: int, at: dict[str, Any], in_sp: list[int], out_sp: list[int], ks: list[int],
              strides: list[int], dil: list[int]) -> list[int]:
        """Total padding (begin + end) per spatial dim."""
        auto = at.get("auto_pad", "NOTSET")
        sp = len(in_sp)
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            dims = zip(in_sp, out_sp, ks, strides, dil, strict=True)
            return [max((o - 1) * s + (k - 1) * d + 1 - x, 0) for x, o, k, s, d in dims]
        if auto == "VALID":
            return [0] * sp
        if auto != "NOTSET":
            raise self.fail(n, i, f"unknown auto_pad '{auto}' (NOTSET, SAME_UPPER, SAME_LOWER or VALID)")
        pads = [int(v) for v in (at.get("pads") or [0] * (2 * sp))]
        if len(pads) != 2 * sp:
            raise self.fail(n, i, f"pads {pads} should have {2 * sp} values (begins then ends)")
        return [pads[k] + pads[k + sp] for k in range(sp)]

    def gemm_op(self, n: Any, i: int) -> None:
        a, b = self.need(n.input[0], i), self.need(n.input[1], i)
        at = self.attrs(n)
        if len(a) != 2 or len(b) != 2:
            raise self.fail(n, i, f"Gemm operands must be 2-D, got {list(a)} and {list(b)}")
        M, K = (a[1], a[0]) if at.get("transA", 0) else (a[0], a[1])
        K2, N = (b[1], b[0]) if at.get("transB", 0) else (b[0], b[1])
        if K != K2:
            raise self.fail(n, i, f"A {list(a)} and B {list(b)} (transA={at.get('transA', 0)}, "
                                  f"transB={at.get('transB', 0)}) do not share K")
        self.gemm(n, i, M, N, K, 1, "linear" if n.input[1] in self.const else "matmul")

    def matmul(self, n: Any, i: int, a: tuple[int, ...], b: tuple[int, ...], const_b: bool) -> None:
        if not a or not b:
            raise self.fail(n, i, "MatMul of a scalar")
        a2 = (1, a[0]) if len(a) == 1 else a
        b2 = (b[0], 1) if len(b) == 1 else b
        M, K, K2, N = a2[-2], a2[-1], b2[-2], b2[-1]
        if K != K2:
            raise self.fail(n, i, f"operands {list(a)} and {list(b)} do not share K")
        ba, bb = a2[:-2], b2[:-2]
        pa, pb = math.prod(ba), math.prod(bb)
        batch = 1
        if pb == 1:
            M *= pa  # a shared right operand (a weight): the batch dims are rows of one GEMM
        elif pa == 1:
            N *= pb  # a shared left operand: its columns
        else:
            full = _broadcast(ba, bb)
            if full is None:
                raise self.fail(n, i, f"batch dims of {list(a)} and {list(b)} do not broadcast")
            batch = math.prod(full)
        self.gemm(n, i, M, N, K, batch, "linear" if const_b and pb == 1 else "matmul")

    def einsum(self, n: Any, i: int) -> None:
        ins = [x for x in n.input if x]
        eq = str(self.attrs(n).get("equation", "")).replace(" ", "")
        if len(ins) != 2:
            if len(ins) == 1:  # a transpose, trace or sum of one operand
                x = self.need(ins[0], i)
                self.vector(n, i, "other", math.prod(x))
            else:
                self.unknown(n, i)
            return
        shapes = [self.need(x, i) for x in ins]
        lhs, arrow, rhs = eq.partition("->")
        terms = lhs.split(",")
        if len(terms) != 2:
            raise self.fail(n, i, f"equation '{eq}' does not have two operands")
        ell = "".join(chr(0x2460 + k) for k in range(16))  # stand-ins for the dims of '...', right-aligned
        size: dict[str, int] = {}
        letters, ranks = [], []
        for term, shape in zip(terms, shapes, strict=True):
            k = len(shape) - (len(term) - 3) if "..." in term else 0
            if not 0 <= k <= 16:
                raise self.fail(n, i, f"equation term '{term}' does not match operand shape {list(shape)}")
            term = term.replace("...", ell[16 - k:])
            if len(term) != len(shape):
                raise self.fail(n, i, f"equation term '{term}' does not match operand shape {list(shape)}")
            for ch, d in zip(term, shape, strict=True):
                size[ch] = max(size.get(ch, 1), d)
            letters.append(term)
            ranks.append(k)
        both = letters[0] + letters[1]
        if arrow:
            out = rhs.replace("...", ell[16 - max(ranks):])
        else:  # implicit output: the broadcast dims, then the letters seen once, in alphabetical order
            out = ell[16 - max(ranks):] + "".join(sorted(c for c in set(both) if both.count(c) == 1 and c not in ell))
        A, B, O = set(letters[0]), set(letters[1]), set(out)
        prod = lambda cs: math.prod(size[c] for c in cs)  # noqa: E731
        batch, M, N, K = prod(A & B & O), prod((A & O) - B), prod((B & O) - A), prod((A & B) - O)
        self.gemm(n, i, M, N, K, batch, "linear" if ins[1] in self.const and batch == 1 else "matmul")

    def attention(self, n: Any, i: int) -> None:
        at = self.attrs(n)
        q, k, v = (self.need(n.input[j], i) for j in range(3))
        if len(q) == 4:
            b, hq, lq, e = q
            lk, ev = k[-2], v[-1]
        elif len(q) == 3:
            hq, hkv = int(at.get("q_num_heads", 0)), int(at.get("kv_num_heads", 0))
            if hq <= 0 or hkv <= 0:
                raise self.fail(n, i, "3-D Attention needs the q_num_heads and kv_num_heads attributes")
            b, lq, e = q[0], q[1], q[2] // hq
            lk, ev = k[1], v[2] // hkv
        else:
            raise self.fail(n, i, f"Q must be 3-D or 4-D, got {list(q)}")
        if len(n.input) > 4 and n.input[4]:
            lk += self.need(n.input[4], i)[-2]  # past keys
        self.gemm(n, i, lq, lk, e, b * hq, "attention", role="scores")
        self.vector(n, i, "softmax", b * hq * lq * lk, reduce=lk, role="softmax")
        self.gemm(n, i, lq, ev, lk, b * hq, "attention", role="context")

    # ------------------------------------------------------------------ vector ops
