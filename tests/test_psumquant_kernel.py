"""The psum-quantized tiled matmul: hand-computed cases, the fused CPU path against the eager
reference, and the Triton kernel (under TRITON_INTERPRET=1) against the torch path."""

from __future__ import annotations

import pytest
import torch

from npukit.kernels.psumquant import (
    PsumKernelError,
    psumquant_matmul,
    psumquant_matmul_numba,
    psumquant_matmul_torch,
    psumquant_matmul_triton,
    tile_counts,
)


def _case(M: int, K: int, N: int, rows: int, cols: int, semantics: str, seed: int, integer: bool = True):
    g = torch.Generator().manual_seed(seed)
    if integer:
        a = torch.randint(-127, 128, (M, K), generator=g).float()
        b = torch.randint(-127, 128, (K, N), generator=g).float()
    else:
        a = torch.randn(M, K, generator=g)
        b = torch.randn(K, N, generator=g)
    kf, nt = tile_counts(K, N, rows, cols)
    shape = (M, nt) if semantics == "buffer" else (M, kf, nt)
    if integer:
        inv = 2.0 ** -torch.randint(6, 14, shape, generator=g).float()
    else:
        inv = torch.rand(shape, generator=g) * 4 + 0.5
    return a, b, inv


def test_buffer_hand_computed_saturate_and_wrap() -> None:
    # two K-tiles of 1 row each, psums 100 and 100, step 1, B = 8 (max 127)
    a = torch.tensor([[10.0, 10.0]])
    b = torch.tensor([[10.0], [10.0]])
    sat = psumquant_matmul_torch(a, b, 1.0, rows=1, cols=1, bits=8, semantics="buffer", overflow="saturate")
    wrp = psumquant_matmul_torch(a, b, 1.0, rows=1, cols=1, bits=8, semantics="buffer", overflow="wrap")
    assert sat.item() == 127.0
    assert wrp.item() == 200.0 - 256.0
    # transfer: each psum fits 8 bits, the wide accumulator does not overflow
    tr = psumquant_matmul_torch(a, b, torch.ones(1, 2, 1), rows=1, cols=1, bits=8, semantics="transfer")
    assert tr.item() == 200.0


def test_rounding_is_half_to_even_and_step_applies() -> None:
    # psums 5 and 7 with step 2: 2.5 -> 2, 3.5 -> 4 (ties to even); dequantized x2
    a = torch.tensor([[5.0], [7.0]])
    b = torch.tensor([[1.0]])
    y = psumquant_matmul_torch(a, b, 0.5, rows=1, cols=1, bits=8)
    assert y.flatten().tolist() == [4.0, 8.0]


@pytest.mark.parametrize("semantics", ["buffer", "transfer"])
@pytest.mark.parametrize("overflow", ["saturate", "wrap"])
def test_fused_cpu_path_equals_eager_reference(semantics: str, overflow: str) -> None:
    a, b, inv = _case(70, 150, 45, 32, 16, semantics, seed=3, integer=False)
    fused = psumquant_matmul_numba(a, b, inv, 32, 16, 5, semantics, overflow, chunk=32)
    eager = psumquant_matmul_torch(a, b, inv, 32, 16, 5, semantics, overflow)
    assert torch.equal(fused, eager)
    assert not torch.equal(fused, a @ b)  # quantization did something


def test_quantization_error_shrinks_with_bits() -> None:
    a, b, _ = _case(64, 256, 64, 64, 32, "buffer", seed=4, integer=False)
    ref = a @ b
    errs = []
    for bits in (4, 8, 12):
        inv = torch.full((64, 2), (2.0 ** (bits - 1) - 1) / float(ref.abs().max()))
        errs.append(float((psumquant_matmul_torch(a, b, inv, 64, 32, bits) - ref).abs().mean()))
    assert errs[0] > errs[1] > errs[2]


def test_auto_backend_on_cpu_is_numba_and_bad_args_raise(monkeypatch: pytest.MonkeyPatch) -> None:
    import npukit.kernels.psumquant as kp

    a, b, inv = _case(8, 40, 8, 16, 16, "buffer", seed=5)
    ran: list[str] = []
    for name in ("psumquant_matmul_numba", "psumquant_matmul_torch"):
        fn = getattr(kp, name)
        monkeypatch.setattr(kp, name, lambda *x, fn=fn, name=name: ran.append(name) or fn(*x))
    ref = psumquant_matmul_torch(a, b, inv, 16, 16, 8)
    assert torch.equal(psumquant_matmul(a, b, inv, 16, 16, 8), ref)
    assert ran == ["psumquant_matmul_numba"]  # auto on CPU: the fused numba path
    ran.clear()
    assert torch.equal(psumquant_matmul(a, b, inv, 16, 16, 8, backend="torch"), ref)
    assert ran == ["psumquant_matmul_torch"]  # 'torch' is plain torch: never numba
    ran.clear()
    psumquant_matmul(a, b, inv, 16, 16, 23)
    assert ran == ["psumquant_matmul_torch"]  # numba cannot run > 22 bits: auto falls back to torch
    with pytest.raises(PsumKernelError, match="backend"):
        psumquant_matmul(a, b, inv, 16, 16, 8, backend="cuda")
    with pytest.raises(PsumKernelError, match="bits"):
        psumquant_matmul(a, b, inv, 16, 16, 1)
    with pytest.raises(PsumKernelError, match="broadcast"):
        psumquant_matmul(a, b, torch.ones(3, 3), 16, 16, 8)
    with pytest.raises(PsumKernelError, match="> 0"):
        psumquant_matmul(a, b, torch.zeros(8, 1), 16, 16, 8)


def test_triton_needs_cuda_or_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    a, b, inv = _case(8, 32, 16, 16, 16, "buffer", seed=6)
    with pytest.raises(PsumKernelError, match="CUDA"):
        psumquant_matmul_triton(a, b, inv, 16, 16, 8)


# shapes that do not divide the blocks: M, K, N ragged; rows/cols multiples of 16
SHAPES = [(37, 100, 48, 32, 16), (16, 64, 40, 16, 32)]


@pytest.mark.parametrize("semantics", ["buffer", "transfer"])
@pytest.mark.parametrize("overflow", ["saturate", "wrap"])
@pytest.mark.parametrize("shape", SHAPES)
def test_triton_interpreter_matches_torch_bit_exact(monkeypatch: pytest.MonkeyPatch, semantics, overflow, shape) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    M, K, N, rows, cols = shape
    a, b, inv = _case(M, K, N, rows, cols, semantics, seed=sum(shape))
    for bits in (4, 8):
        tri = psumquant_matmul_triton(a, b, inv, rows, cols, bits, semantics, overflow)
        ref = psumquant_matmul_torch(a, b, inv, rows, cols, bits, semantics, overflow)
        assert torch.equal(tri, ref), (bits, float((tri - ref).abs().max()))


def test_triton_interpreter_float_inputs_close(monkeypatch: pytest.MonkeyPatch) -> None:
    """Float inputs: tile psums may differ in the last bit (summation order), so a rounding
    boundary can flip by one LSB on a few elements; nothing more."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    a, b, inv = _case(33, 96, 32, 32, 32, "buffer", seed=9, integer=False)
    tri = psumquant_matmul_triton(a, b, inv, 32, 32, 8)
    ref = psumquant_matmul_torch(a, b, inv, 32, 32, 8)
    lsb = (1.0 / inv).repeat_interleave(32, 1)[:, :32]
    diff = (tri - ref).abs() / lsb
    assert float(diff.max()) <= 3.0 + 1e-6  # at most one LSB per K-tile (3 K-tiles)
    assert float((diff > 0).float().mean()) < 0.05
