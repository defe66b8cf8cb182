"""Shared fixtures of the CacheEdit tests: a tiny perturbed DiT and a batch of procedural edits."""

from __future__ import annotations

import numpy as np
import torch

from npukit.models import cacheedit as ce
from npukit.models._cacheedit_data import make_batch


def tiny_model(seed: int = 0) -> ce.EditDiT:
    torch.manual_seed(seed)
    m = ce.EditDiT(ce.DiTConfig(dim=32, depth=2, heads=2))
    with torch.no_grad():  # adaLN-Zero starts at zero: perturb so every path matters
        for p in m.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return m.eval()


def edit_batch(n: int = 3, seed: int = 1) -> tuple[torch.Tensor, ...]:
    src, ins, tgt, mask = make_batch(np.random.default_rng(seed), n, keep_prob=0.0)
    return torch.from_numpy(src), torch.from_numpy(ins), torch.from_numpy(tgt), torch.from_numpy(mask)
