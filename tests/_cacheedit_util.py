"""Shared fixtures of the CacheEdit tests: a tiny perturbed Flux editor, a batch of procedural edits, and an
unmodified QwenImageEditPipeline on tiny components built offline."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from npukit.models import cacheedit as ce
from npukit.models.cacheedit._data import make_batch

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


# ---------------------------------------------------------------------------------------------- tiny Qwen-Image-Edit
QWEN_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
                "<|video_pad|>"]  # what the pipeline's prompt template and the Qwen2-VL processor use
QWEN_Z = 4  # latent channels of the tiny VAE
QWEN_VAE_STAGES = 5  # spatial 2x downsamplings: the VAE scale factor is 2 ** 5 = 32


def _byte_chars() -> list[str]:
    """The 256 printable characters byte-level BPE (GPT-2, Qwen2) maps bytes 0..255 to, in byte order."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    extra = iter(range(256, 512))
    return [chr(b if b in keep else next(extra)) for b in range(256)]


def tiny_qwen_edit_pipeline(zero_cond_t: bool = False, seed: int = 0) -> Any:
    """An unmodified diffusers ``QwenImageEditPipeline`` on tiny random components built offline:

    * tokenizer: transformers' ``Qwen2Tokenizer`` (byte-level BPE) with the 256 byte symbols and no merges, plus
      the Qwen special tokens (``QWEN_SPECIAL``) -- the prompt template is ~330 tokens, so the 64 the pipeline
      drops from the front are all template;
    * processor: ``Qwen2VLProcessor`` with the PIL ``Qwen2VLImageProcessorPil`` at ``max_pixels = 56 * 56`` (the
      prompt image becomes 4 x 4 patches of 14 px, 4 ``<|image_pad|>`` tokens) and no video processor;
    * text encoder: ``Qwen2_5_VLForConditionalGeneration`` with 1 text layer (hidden 32, 2 heads of 16, mrope
      sections (2, 3, 3)) and a 1-block vision tower (hidden 16) projecting to 32;
    * VAE: ``AutoencoderKLQwenImage`` with base width 2, no residual blocks per stage and 5 downsamplings (scale
      factor 32). The pipeline resizes the context image to about 1 megapixel whatever ``height``/``width`` say
      (``calculate_dimensions(1024 * 1024, ratio)``, no option), so a square input gives 16 x 16 = 256 context
      tokens; ``height = width = 256`` gives 4 x 4 = 16 target tokens;
    * transformer: ``QwenImageTransformer2DModel`` with 2 blocks, 2 heads of 16, ``joint_attention_dim`` 32 (the
      text encoder's hidden size), ``in_channels = 4 * QWEN_Z``; ``zero_cond_t`` as given (Qwen-Image-Edit-2511's
      per-token modulation);
    * scheduler: ``FlowMatchEulerDiscreteScheduler()``.
    """
    from diffusers import (
        AutoencoderKLQwenImage,
        FlowMatchEulerDiscreteScheduler,
        QwenImageEditPipeline,
        QwenImageTransformer2DModel,
    )
    from tokenizers import AddedToken
    from transformers import (
        Qwen2_5_VLConfig,
        Qwen2_5_VLForConditionalGeneration,
        Qwen2Tokenizer,
        Qwen2VLImageProcessorPil,
        Qwen2VLProcessor,
    )

    class NoVideoQwen2VLProcessor(Qwen2VLProcessor):
        """``Qwen2VLProcessor`` that accepts ``video_processor=None`` without torchvision: its constructor checks
        each sub-processor's class, and the video processors' base class needs torchvision (not installed)."""

        def check_argument_for_proper_class(self, argument_name: str, argument: Any) -> Any:
            if argument_name == "video_processor" and argument is None:
                return None
            return super().check_argument_for_proper_class(argument_name, argument)

    vocab = {c: i for i, c in enumerate(_byte_chars())}
    vocab.update({s: 256 + i for i, s in enumerate(QWEN_SPECIAL)})
    tok = Qwen2Tokenizer(vocab=vocab, merges=[])
    tok.add_tokens([AddedToken(s, special=True) for s in QWEN_SPECIAL])
    proc = NoVideoQwen2VLProcessor(image_processor=Qwen2VLImageProcessorPil(min_pixels=56 * 56, max_pixels=56 * 56),
                                   tokenizer=tok)
    torch.manual_seed(seed)
    cfg = Qwen2_5_VLConfig(
        text_config=dict(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=1024,
                         rope_parameters={"rope_type": "default", "rope_theta": 1e6, "mrope_section": [2, 3, 3]},
                         bos_token_id=vocab["<|endoftext|>"], eos_token_id=vocab["<|im_end|>"],
                         pad_token_id=vocab["<|endoftext|>"]),
        vision_config=dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=32,
                           patch_size=14, spatial_merge_size=2, temporal_patch_size=2, window_size=112,
                           fullatt_block_indexes=[0]),
        image_token_id=vocab["<|image_pad|>"], video_token_id=vocab["<|video_pad|>"],
        vision_start_token_id=vocab["<|vision_start|>"], vision_end_token_id=vocab["<|vision_end|>"])
    text_encoder = Qwen2_5_VLForConditionalGeneration(cfg).eval()
    vae = AutoencoderKLQwenImage(base_dim=2, z_dim=QWEN_Z, dim_mult=[1] * (QWEN_VAE_STAGES + 1), num_res_blocks=0,
                                 temperal_downsample=[False] * QWEN_VAE_STAGES, latents_mean=[0.0] * QWEN_Z,
                                 latents_std=[1.0] * QWEN_Z).eval()
    tr = QwenImageTransformer2DModel(patch_size=2, in_channels=4 * QWEN_Z, out_channels=QWEN_Z, num_layers=2,
                                     attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32,
                                     axes_dims_rope=(4, 6, 6), zero_cond_t=zero_cond_t).eval()
    pipe = QwenImageEditPipeline(scheduler=FlowMatchEulerDiscreteScheduler(), vae=vae, text_encoder=text_encoder,
                                 tokenizer=tok, processor=proc, transformer=tr)
    pipe.set_progress_bar_config(disable=True)
    return pipe
