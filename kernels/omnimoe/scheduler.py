"""Expert-centric scheduler: (token, expert) pairs sorted by expert, with segment offsets.

Computed once per layer call from the router's indices and shared by the forward and the backward
kernels. For ``indices`` of shape (T, k) the P = T*k pairs are numbered ``p = t * k + j``.

:class:`Schedule` fields (all on the indices' device):

- ``pair_order`` (P,) int64: pair ids sorted by expert, stable (ties keep token order), so every
  reduction over a segment has a fixed order (the deterministic option relies on it);
- ``token_ids`` (P,) int64: the token of each sorted pair (``pair_order // k``);
- ``expert_ids`` (A,) int64: the A active experts, ascending;
- ``offsets`` (A+1,) int64: segment ``a`` is ``pair_order[offsets[a]:offsets[a+1]]``;
- ``counts`` (A,) int64: tokens per active expert.

Paths: :func:`schedule_torch` (stable sort + unique) and :func:`schedule_triton` (the same stable
sort, whose CUDA implementation is a radix sort, with the per-expert histogram from a Triton
kernel; integer atomics, so the result is deterministic).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from npukit.sim.errors import ConfigError
from npukit.sim.ledger import Ledger

from ..backend import choose_backend
from .accounting import record_schedule


@dataclass(frozen=True)
class Schedule:
    """Sorted (token, expert) pairs and segment offsets; see the module docstring."""

    pair_order: torch.Tensor
    token_ids: torch.Tensor
    expert_ids: torch.Tensor
    offsets: torch.Tensor
    counts: torch.Tensor
    num_tokens: int
    k: int
    num_experts: int

    @property
    def num_pairs(self) -> int:
        return self.num_tokens * self.k

    @property
    def num_active(self) -> int:
        return int(self.expert_ids.numel())

    def segment_of_pair(self) -> torch.Tensor:
        """(P,) int64: the active-expert slot (0..A-1) of each sorted pair."""
        return torch.repeat_interleave(torch.arange(self.num_active, device=self.counts.device), self.counts)


def _check(indices: torch.Tensor, num_experts: int) -> None:
    if indices.dim() != 2 or indices.dtype not in (torch.int64, torch.int32):
        raise ConfigError(f"scheduler indices must be a (tokens, k) integer tensor, got {tuple(indices.shape)} {indices.dtype}")
    if num_experts < 1:
        raise ConfigError(f"num_experts must be >= 1, got {num_experts}")
    # value check on CPU only: on CUDA it would cost a host sync per call
    if not indices.is_cuda and indices.numel() and (int(indices.min()) < 0 or int(indices.max()) >= num_experts):
        raise ConfigError(f"expert indices must lie in [0, {num_experts}); got {int(indices.min())}..{int(indices.max())}")


def _finish(indices: torch.Tensor, order: torch.Tensor, counts_all: torch.Tensor, num_experts: int) -> Schedule:
    T, k = indices.shape
    expert_ids = torch.nonzero(counts_all, as_tuple=False).flatten()
    counts = counts_all[expert_ids].to(torch.int64)
    offsets = torch.zeros(expert_ids.numel() + 1, dtype=torch.int64, device=indices.device)
    torch.cumsum(counts, 0, out=offsets[1:])
    return Schedule(order, order // max(k, 1), expert_ids, offsets, counts, T, k, num_experts)


def schedule_torch(indices: torch.Tensor, num_experts: int) -> Schedule:
    """Torch reference: stable argsort of the flat expert ids + a bincount for the segments."""
    _check(indices, num_experts)
    flat = indices.reshape(-1).to(torch.int64)
    order = torch.sort(flat, stable=True).indices
    counts_all = torch.bincount(flat, minlength=num_experts)
    return _finish(indices, order, counts_all, num_experts)


def schedule_triton(indices: torch.Tensor, num_experts: int) -> Schedule:
    """Triton launcher: histogram kernel (int32 atomics) + stable sort; equal to :func:`schedule_torch`."""
    _check(indices, num_experts)
    from . import _triton_expert as K

    flat = indices.reshape(-1).to(torch.int64).contiguous()
    counts_all = torch.zeros(num_experts, dtype=torch.int32, device=flat.device)
    P = flat.numel()
    if P:
        block = 1024
        K._histogram[(-(-P // block),)](flat, counts_all, P, BLOCK=block)
    order = torch.sort(flat, stable=True).indices
    return _finish(indices, order, counts_all, num_experts)


def build_schedule(indices: torch.Tensor, num_experts: int, backend: str = "auto", ledger: Ledger | None = None
                   ) -> Schedule:
    """The schedule of ``indices`` (T, k) over ``num_experts`` experts (auto: Triton on CUDA);
    ``ledger`` (optional) receives its traffic (scope ``scheduler``)."""
    be = choose_backend(backend, indices)
    sched = schedule_triton(indices, num_experts) if be == "triton" else schedule_torch(indices, num_experts)
    if ledger is not None:
        record_schedule(ledger, sched.num_pairs, num_experts, sched.num_active)
    return sched
