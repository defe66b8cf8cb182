"""Image metrics for CacheEdit: PSNR (dB), SSIM, edit correctness and patch-mask IoU.

Images are float tensors in [-1, 1] of shape (B, 3, S, S) (converted to [0, 1] for PSNR/SSIM).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

TEXTURE_SMOOTH = 5  # low-pass (box) width in pixels for textured edits: compares mean colour / shape, not texture


def mse(a: torch.Tensor, b: torch.Tensor, where: torch.Tensor | None = None) -> torch.Tensor:
    """Per-image mean squared error of images in [-1, 1], on the [0, 1] scale.

    ``where`` (B, S, S) bool: only these pixels count (an image with none gets 0).
    """
    err = (((a - b) / 2) ** 2).mean(1)  # (B, S, S)
    if where is None:
        return err.flatten(1).mean(1)
    w = where.float()
    return (err * w).flatten(1).sum(1) / w.flatten(1).sum(1).clamp_min(1)


def psnr_db(a: torch.Tensor, b: torch.Tensor, where: torch.Tensor | None = None) -> torch.Tensor:
    """Per-image PSNR in dB of images in [-1, 1] (peak 1 on the [0, 1] scale); capped at 100 dB.

    ``where`` (B, S, S) bool: only these pixels count (an image with none gets 100 dB).
    """
    return torch.clamp(10 * torch.log10(1.0 / mse(a, b, where).clamp_min(1e-10)), max=100.0)


def ssim(a: torch.Tensor, b: torch.Tensor, window: int = 7) -> torch.Tensor:
    """Per-image mean SSIM (uniform ``window`` x ``window`` window, C1/C2 of Wang et al. 2004, on [0, 1])."""
    x, y = (a + 1) / 2, (b + 1) / 2
    c1, c2 = 0.01**2, 0.03**2
    pad = window // 2

    def avg(z: torch.Tensor) -> torch.Tensor:
        return F.avg_pool2d(F.pad(z, (pad,) * 4, mode="replicate"), window, 1)

    mx, my = avg(x), avg(y)
    vx, vy, cxy = avg(x * x) - mx * mx, avg(y * y) - my * my, avg(x * y) - mx * my
    s = ((2 * mx * my + c1) * (2 * cxy + c2)) / ((mx * mx + my * my + c1) * (vx + vy + c2))
    return s.flatten(1).mean(1)


def chromaticity(img: torch.Tensor) -> torch.Tensor:
    """[-1, 1] images (B, 3, S, S) -> chromaticity ``3 c / (r + g + b)`` on the [0, 1] scale, clipped to [0, 3].

    A brightness factor (the shaded mode's unspecified ``shade``) leaves it unchanged; a grey pixel is (1, 1, 1).
    """
    x = ((img + 1) / 2).clamp(0, 1)
    return (3 * x / x.sum(1, keepdim=True).clamp_min(0.05)).clamp(0, 3)


def edit_correct(out: torch.Tensor, src: torch.Tensor, tgt: torch.Tensor, mask: torch.Tensor,
                 tol_in: float = 0.1, tol_out: float = 0.03, smooth: int = 1, chroma: bool = False) -> torch.Tensor:
    """Per-image bool: the edit was carried out and nothing else changed.

    ``chroma``: compare chromaticity (:func:`chromaticity`, scaled by 1/3 to the colour scale) instead of
    colour, so an object's brightness (the shaded mode's unspecified shade) does not count; hue, shape
    and place do.

    ``smooth`` > 1: the three images are first low-passed by a ``smooth`` x ``smooth`` box (replicate
    padding) before the output's error is taken, so that for textured edits (whose texture the instruction
    does not specify) only what it does specify (mean colour, shape and place) is compared; the source's
    error (the scale of the edit) stays on the raw images.

    Inside the ground-truth edit ``mask`` (B, S, S) the output's mean absolute error to the target
    (on the [0, 1] scale) is below ``tol_in`` and below half the source's error there; outside the
    mask it is below ``tol_out``. A ``keep`` (empty mask) only needs the latter.
    """
    if chroma:
        out, src, tgt = (chromaticity(z) * (2 / 3) - 1 for z in (out, src, tgt))
    err_s = ((src - tgt).abs() / 2).mean(1)  # the edit's size, on the raw images
    if smooth > 1:
        def box(z: torch.Tensor) -> torch.Tensor:
            lo, hi = (smooth - 1) // 2, smooth // 2
            return F.avg_pool2d(F.pad(z, (lo, hi, lo, hi), mode="replicate"), smooth, 1)

        out, tgt = box(out), box(tgt)
    err_o = ((out - tgt).abs() / 2).mean(1)  # (B, S, S)
    m = mask.float()
    n_in = m.flatten(1).sum(1)
    n_out = (1 - m).flatten(1).sum(1)
    in_o = (err_o * m).flatten(1).sum(1) / n_in.clamp_min(1)
    in_s = (err_s * m).flatten(1).sum(1) / n_in.clamp_min(1)
    out_o = (err_o * (1 - m)).flatten(1).sum(1) / n_out.clamp_min(1)
    inside_ok = (in_o < tol_in) & (in_o < 0.5 * in_s)
    return torch.where(n_in > 0, inside_ok, torch.ones_like(inside_ok)) & (out_o < tol_out)


def patch_mask(mask: torch.Tensor, patch: int) -> torch.Tensor:
    """(B, S, S) pixel mask -> (B, (S/patch)^2) bool: a patch is set if any of its pixels is."""
    b, s, _ = mask.shape
    m = mask.reshape(b, s // patch, patch, s // patch, patch).any(dim=(2, 4))
    return m.reshape(b, -1)


def iou(a: torch.Tensor, b: torch.Tensor) -> float:
    """Intersection over union of two bool sets (1.0 when both are empty)."""
    inter = (a & b).sum().item()
    union = (a | b).sum().item()
    return 1.0 if union == 0 else inter / union
