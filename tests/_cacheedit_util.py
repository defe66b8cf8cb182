"""Shared fixtures of the CacheEdit tests: a tiny perturbed Flux editor and a batch of procedural edits."""

from __future__ import annotations

import numpy as np
import torch

from npukit.models import cacheedit as ce
from npukit.models._cacheedit_data import make_batch

TINY = dict(layers=1, single_layers=1, heads=2, head_dim=16, joint_dim=16)


def tiny_model(seed: int = 0, perturb: bool = True) -> ce.FluxEditor:
    """A 1+1-block Flux editor; ``perturb``: its zero-initialised output projection made non-zero."""
    torch.manual_seed(seed)
    m = ce.FluxEditor(ce.FluxEditorConfig(**TINY))
    if perturb:
        with torch.no_grad():
            for p in m.parameters():
                p.add_(0.05 * torch.randn_like(p))
    return m.eval()


def edit_batch(n: int = 3, seed: int = 1) -> tuple[torch.Tensor, ...]:
    src, ins, tgt, mask = make_batch(np.random.default_rng(seed), n, keep_prob=0.0, shade=True)
    return torch.from_numpy(src), torch.from_numpy(ins), torch.from_numpy(tgt), torch.from_numpy(mask)
