"""Multi-round editing through an unmodified diffusers editing pipeline (``FluxKontextPipeline``,
``QwenImageEditPipeline``): each round's output image is the next round's input.

With :func:`apply_cacheedit` on ``pipe.transformer`` every pipeline call is one CacheEdit round (the pipeline's
``maybe_free_model_hooks()`` resets the stateful hooks at the end of the call, which starts the next round
and keeps the last call-0 activation as the reference).

``QwenImageEditPipeline`` resizes each round's input (its context image) to about 1 megapixel whatever ``height``
and ``width`` say; those set only the output size.
"""

from __future__ import annotations

from typing import Any


def pipeline_rounds(pipe: Any, image: Any, prompts: list[str], **call_kwargs: Any) -> list[Any]:
    """Run ``pipe(image=..., prompt=p, **call_kwargs)`` once per prompt, feeding each output image (the first
    of ``.images``) back as the next input; returns the output of every round (PIL images by default)."""
    outs = []
    for p in prompts:
        image = pipe(image=image, prompt=p, **call_kwargs).images[0]
        outs.append(image)
    return outs
