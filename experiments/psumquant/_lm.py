"""A small byte-level causal language model trained here on the python3-doc prose (``_corpus.py``).

It stands in for the PsumQuant paper's Llama-3.1 perplexity result, which cannot be reproduced
offline on this machine. GPT-style: byte embeddings (vocab 256), learned positions, pre-LayerNorm
blocks (causal self-attention, GELU MLP), tied-free output head; every projection is an
``nn.Linear`` so the psum library converts it (K = 192 -> 2 K-tiles on a 128-row array, the MLP's
K = 768 -> 6). Corpus split: the first 95% of the bytes train, the last 5% evaluate. Weights cached.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ._cache import load_state, save_state
from ._corpus import text


@dataclass(frozen=True)
class LMConfig:
    d_model: int = 192
    n_layers: int = 3
    n_heads: int = 4
    ctx: int = 64
    corpus_bytes: int = 2_000_000


class _Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(a)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class ByteLM(nn.Module):
    """``forward(ids [B, T] long) -> logits [B, T, 256]``."""

    def __init__(self, cfg: LMConfig) -> None:
        super().__init__()
        self.emb = nn.Embedding(256, cfg.d_model)
        self.pos = nn.Embedding(cfg.ctx, cfg.d_model)
        self.blocks = nn.ModuleList(_Block(cfg.d_model, cfg.n_heads) for _ in range(cfg.n_layers))
        self.ln = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, 256)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.emb(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))[None]
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


@dataclass(frozen=True)
class Corpus:
    train: torch.Tensor  # uint8 bytes as long
    valid: torch.Tensor


def load_corpus(cfg: LMConfig) -> Corpus:
    """The python3-doc prose as bytes, split 95/5 (train / held-out)."""
    data = torch.tensor(list(text(cfg.corpus_bytes).encode("ascii")), dtype=torch.long)
    cut = int(len(data) * 0.95)
    return Corpus(data[:cut], data[cut:])


def eval_batches(corpus: Corpus, cfg: LMConfig, n_seq: int, batch: int = 32) -> list[torch.Tensor]:
    """``n_seq`` non-overlapping held-out windows of ctx+1 bytes, in batches."""
    w = cfg.ctx + 1
    n = min(n_seq, len(corpus.valid) // w)
    seqs = corpus.valid[: n * w].view(n, w)
    return [seqs[i:i + batch] for i in range(0, n, batch)]


def calib_batches(corpus: Corpus, cfg: LMConfig, n_seq: int = 64, batch: int = 32) -> list[torch.Tensor]:
    """Calibration inputs ([B, ctx] byte ids) from the training split (never the held-out part)."""
    gen = torch.Generator().manual_seed(1)
    starts = torch.randint(0, len(corpus.train) - cfg.ctx, (n_seq,), generator=gen)
    x = torch.stack([corpus.train[s:s + cfg.ctx] for s in starts.tolist()])
    return [x[i:i + batch] for i in range(0, n_seq, batch)]


def train_or_load(corpus: Corpus, cfg: LMConfig, steps: int, progress: bool = True) -> tuple[ByteLM, str]:
    """The LM trained for ``steps`` AdamW steps of 32 x ctx bytes (cached); returns (model, how)."""
    name = f"bytelm_d{cfg.d_model}_l{cfg.n_layers}_c{cfg.ctx}_b{cfg.corpus_bytes}_s{steps}_v1.pt"
    model = ByteLM(cfg)
    state = load_state(name)
    if state is not None:
        try:
            model.load_state_dict(state)
            return model.eval(), "cached"
        except (RuntimeError, KeyError, TypeError, ValueError, AttributeError):  # stale or damaged: retrain
            pass
    from tqdm import tqdm

    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=2e-3, total_steps=steps, pct_start=0.1)
    t0 = time.perf_counter()
    model.train()
    for _ in tqdm(range(steps), desc="byte LM: training", disable=not progress, leave=False):
        starts = torch.randint(0, len(corpus.train) - cfg.ctx - 1, (32,), generator=gen).tolist()
        batch = torch.stack([corpus.train[s:s + cfg.ctx + 1] for s in starts])
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, 256), batch[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
    model.eval()
    save_state(name, model.state_dict())
    return model, f"trained in {time.perf_counter() - t0:.0f} s"


@torch.no_grad()
def perplexity(model: nn.Module, batches: list[torch.Tensor]) -> float:
    """Per-byte perplexity exp(mean cross-entropy in nats) on held-out windows."""
    total, count = 0.0, 0
    for b in batches:
        logits = model(b[:, :-1])
        total += float(F.cross_entropy(logits.reshape(-1, 256), b[:, 1:].reshape(-1), reduction="sum"))
        count += b[:, 1:].numel()
    return math.exp(total / count)
