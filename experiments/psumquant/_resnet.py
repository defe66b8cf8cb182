"""The full-width ResNet-18 (the paper's architecture: 64-512 channels, im2col depth K up to 3*3*512 =
4,608, so 36 K-tiles on a 128-row array and 144 on a 32-row one) trained here on scikit-learn's digits
upsampled (bilinear) to 32x32, one input channel, 10 classes.

:func:`npukit.models.resnet18.resnet18` (torchvision layout: 7x7 stride-2 stem and max-pool, so the
stages run at 8x8 .. 1x1), Adam with random 1-pixel shifts, then BatchNorm folded into the convolutions
(as an NPU runs it). Same 60/40 split as the digits CNN. Weights cached (``_cache.py``).
"""

from __future__ import annotations

import torch
from torch import nn

from ._cache import save_state
from ._digits import DigitsData, _fold, fit, load_cached

SIZE = 32


def fold_batchnorm(model: nn.Module) -> nn.Module:
    """An eval-mode copy with every BatchNorm folded into the convolution before it (weights + bias)."""
    from npukit.models.resnet18 import resnet18

    m = resnet18(num_classes=model.fc.out_features, in_channels=model.conv1.in_channels).eval()
    m.load_state_dict(model.state_dict())
    m.conv1, m.bn1 = _fold(model.conv1, model.bn1), nn.Identity()
    for stage in ("layer1", "layer2", "layer3", "layer4"):
        for src, dst in zip(getattr(model, stage), getattr(m, stage), strict=True):
            dst.conv1, dst.bn1 = _fold(src.conv1, src.bn1), nn.Identity()
            dst.conv2, dst.bn2 = _fold(src.conv2, src.bn2), nn.Identity()
            if src.downsample is not None:
                dst.downsample = _fold(src.downsample[0], src.downsample[1])
    return m.eval()


def train_or_load(data: DigitsData, epochs: int, progress: bool = True,
                  train_images: int | None = None) -> tuple[nn.Module, str]:
    """The BN-folded ResNet-18 trained for ``epochs`` on ``data`` (cached); returns (model, how).
    ``train_images``: train on the first that many training images only (None: all of them)."""
    from npukit.models.resnet18 import resnet18

    n = len(data.y_train) if train_images is None else min(train_images, len(data.y_train))
    tag = "" if n == len(data.y_train) else f"_n{n}"
    data = DigitsData(data.x_train[:n], data.y_train[:n], data.x_test, data.y_test)
    name = f"resnet18_digits{data.x_train.shape[-1]}_e{epochs}{tag}_v1.pt"
    torch.manual_seed(0)
    base = resnet18(num_classes=10, in_channels=1)
    if load_cached(name, base):
        return fold_batchnorm(base.eval()), "cached"
    seconds = fit(base, data, epochs, 1e-3,
                  lambda opt, steps: torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 - s / max(1, steps)),
                  "ResNet-18: training", progress)
    save_state(name, base.state_dict())
    return fold_batchnorm(base), f"trained in {seconds:.0f} s"
