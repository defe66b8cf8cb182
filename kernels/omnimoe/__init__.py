"""OmniMoE kernels: Cartesian router, expert-centric scheduler, fused expert forward/backward and
the token-centric (PEER-style) baseline. Each has a torch reference and a Triton kernel; the
public entry points pick Triton on CUDA tensors and torch on CPU (``backend='auto'``).
Triton modules are imported lazily, never at package import."""

from .accounting import record_expert_backward, record_expert_forward, record_router, record_schedule
from .expert import expert_backward_torch, expert_forward_torch, omni_expert
from .router import cartesian_router, cartesian_topk_torch, dense_router, dense_topk_torch
from .scheduler import Schedule, build_schedule, schedule_torch
from .token import token_centric, token_forward_torch

__all__ = [
    "record_expert_backward", "record_expert_forward", "record_router", "record_schedule",
    "expert_backward_torch", "expert_forward_torch", "omni_expert",
    "cartesian_router", "cartesian_topk_torch", "dense_router", "dense_topk_torch",
    "Schedule", "build_schedule", "schedule_torch",
    "token_centric", "token_forward_torch",
]
