"""The project's one language model: a small byte-level ``LlamaForCausalLM`` (transformers) and its
one training loop, trained here on the python3-doc prose (:mod:`npukit.models.corpus`).

The Llama architecture of the papers' Llama-3.1 at toy size: byte vocabulary (256), RMSNorm,
rotary position embeddings, grouped-query attention (``kv_heads`` < ``heads``), SwiGLU MLP, untied
output head. It serves the PsumQuant perplexity result (stand-in for Llama-3.1) and the OmniMoE
quality comparison (its MLPs swapped by :func:`npukit.models.replace_mlp.replace_mlp`). Corpus
split: the first 95% of the bytes train, the last 5% evaluate. Losses in nats per byte.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F

__all__ = ["ByteCorpus", "ByteLlamaSpec", "batch_loss", "byte_llama", "calib_windows", "eval_windows", "load_corpus",
           "perplexity", "train_lm"]

VOCAB = 256


@dataclass(frozen=True)
class ByteLlamaSpec:
    """Sizes: ``hidden`` (d_model), ``layers`` decoder layers, ``heads`` query heads sharing
    ``kv_heads`` key/value heads (GQA), SwiGLU ``intermediate`` width, context ``ctx`` bytes."""

    hidden: int = 192
    layers: int = 3
    heads: int = 6
    kv_heads: int = 2
    intermediate: int = 512
    ctx: int = 64

    def tag(self) -> str:
        """A short name encoding the sizes (for cache files and CSV rows)."""
        return f"bytellama-d{self.hidden}-l{self.layers}-h{self.heads}kv{self.kv_heads}-i{self.intermediate}-c{self.ctx}"


def byte_llama(spec: ByteLlamaSpec = ByteLlamaSpec(), seed: int = 0) -> Any:
    """A randomly initialised ``LlamaForCausalLM`` of ``spec`` (seeded), eager attention, fp32."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=spec.hidden, intermediate_size=spec.intermediate,
                      num_hidden_layers=spec.layers, num_attention_heads=spec.heads, num_key_value_heads=spec.kv_heads,
                      max_position_embeddings=spec.ctx, rms_norm_eps=1e-5, hidden_act="silu", tie_word_embeddings=False,
                      bos_token_id=None, eos_token_id=None, pad_token_id=None)
    cfg.npukit_byte_llama = asdict(spec)
    torch.manual_seed(seed)
    return LlamaForCausalLM(cfg)


@dataclass(frozen=True)
class ByteCorpus:
    train: torch.Tensor  # byte ids (long)
    valid: torch.Tensor


def load_corpus(max_bytes: int) -> ByteCorpus:
    """Up to ``max_bytes`` of python3-doc prose as byte ids, split 95/5 (train / held-out)."""
    from .corpus import text

    data = torch.tensor(list(text(max_bytes).encode("ascii")), dtype=torch.long)
    cut = int(len(data) * 0.95)
    return ByteCorpus(data[:cut], data[cut:])


def _logits(model: Any, ids: torch.Tensor) -> torch.Tensor:
    out = model(ids)
    return out.logits if hasattr(out, "logits") else out


def batch_loss(model: Any, windows: torch.Tensor) -> torch.Tensor:
    """Mean next-byte cross-entropy (nats/byte) of windows [B, ctx+1]."""
    logits = _logits(model, windows[:, :-1])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), windows[:, 1:].reshape(-1))


def eval_windows(corpus: ByteCorpus, ctx: int, n_seq: int, batch: int = 32) -> list[torch.Tensor]:
    """``n_seq`` non-overlapping held-out windows of ctx+1 bytes, in batches."""
    w = ctx + 1
    n = min(n_seq, len(corpus.valid) // w)
    seqs = corpus.valid[: n * w].view(n, w)
    return [seqs[i:i + batch] for i in range(0, n, batch)]


def calib_windows(corpus: ByteCorpus, ctx: int, n_seq: int = 64, batch: int = 32) -> list[torch.Tensor]:
    """Calibration inputs ([B, ctx] byte ids) from the training split (never the held-out part)."""
    gen = torch.Generator().manual_seed(1)
    starts = torch.randint(0, len(corpus.train) - ctx, (n_seq,), generator=gen)
    x = torch.stack([corpus.train[s:s + ctx] for s in starts.tolist()])
    return [x[i:i + batch] for i in range(0, n_seq, batch)]


@torch.no_grad()
def perplexity(model: Any, batches: list[torch.Tensor]) -> float:
    """Per-byte perplexity exp(mean cross-entropy in nats) on held-out windows [B, ctx+1]."""
    total, count = 0.0, 0
    for b in batches:
        total += float(batch_loss(model, b)) * b[:, 1:].numel()
        count += b[:, 1:].numel()
    return math.exp(total / count)


def train_lm(model: Any, corpus: ByteCorpus, steps: int, ctx: int, batch: int = 32, lr: float = 2e-3, seed: int = 0,
             eval_every: int = 0, eval_seqs: int = 64, progress: bool = False,
             on_step: Callable[[int, float], None] | None = None,
             param_groups: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Train ``model`` in place: AdamW (weight decay 0.01) at peak rate ``lr``, gradient clipping
    1.0, linear warm-up over the first tenth then cosine decay to lr/10; ``steps`` steps of ``batch``
    random windows of ctx+1 training bytes (seeded). ``param_groups``: AdamW parameter groups
    (``params`` plus e.g. their own ``lr`` / ``weight_decay``; together every trainable parameter)
    instead of one group; the schedule scales every group's rate alike.

    Returns ``{"curve": [(step, train_loss, val_loss or nan, seconds)], "seconds": wall seconds,
    "final_val": held-out loss (nats/byte) on ``eval_seqs`` windows}``; the validation loss is taken
    every ``eval_every`` steps (0: five times) and at the end."""
    from tqdm import tqdm

    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(param_groups if param_groups is not None else model.parameters(), lr=lr, weight_decay=0.01)
    warm = max(1, steps // 10)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * (0.1 + 0.45 * (1 + math.cos(math.pi * min(s, steps) / steps))))
    val = eval_windows(corpus, ctx, eval_seqs)
    eval_every = eval_every or max(1, steps // 5)

    def evaluate() -> float:
        model.eval()
        loss = math.log(perplexity(model, val))
        model.train()
        return loss

    curve: list[tuple[int, float, float, float]] = []
    t0 = time.perf_counter()
    model.train()
    for step in tqdm(range(1, steps + 1), desc="byte Llama: training", disable=not progress, leave=False):
        starts = torch.randint(0, len(corpus.train) - ctx - 1, (batch,), generator=gen).tolist()
        loss = batch_loss(model, torch.stack([corpus.train[s:s + ctx + 1] for s in starts]))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        v = evaluate() if step % eval_every == 0 or step == steps else float("nan")
        curve.append((step, loss.item(), v, time.perf_counter() - t0))
        if on_step is not None:
            on_step(step, loss.item())
    model.eval()
    return {"curve": curve, "seconds": time.perf_counter() - t0, "final_val": curve[-1][2]}
