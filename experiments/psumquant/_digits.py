"""The digits CNN: a small ResNet trained here on scikit-learn's bundled handwritten digits.

Data: ``sklearn.datasets.load_digits`` (1,797 real 8x8 scans, 10 classes), pixels scaled to [0, 1]
at their native 8x8 (no upsampling is needed: the CNN reaches ~99% there, and 8x8 keeps the
psum-quantized evaluation cheap); a stratified 60/40 train/test split with a fixed seed. The net
(stem conv, two BasicBlocks at 32 and 64 channels, global pool, fc) is trained with Adam and random
1-pixel shifts, then BatchNorm is folded into the convolutions (as an NPU would run it), so the
im2col depths K are 9, 288 and 576: 1-5 K-tiles on a 128-row array, 1-18 on a 32-row one.
Weights are cached (see ``_cache.py``) under a name that encodes the training budget.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ._cache import load_state, save_state


@dataclass(frozen=True)
class DigitsData:
    x_train: torch.Tensor  # [n, 1, 8, 8] float
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor


def load_data(size: int = 8) -> DigitsData:
    """The digits split (60/40, stratified, seed 0), images resized (bilinear) to ``size`` x ``size``."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    x = torch.tensor(d.images, dtype=torch.float32).unsqueeze(1) / 16.0
    if size != 8:
        x = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False)
    y = torch.tensor(d.target, dtype=torch.long)
    itr, ite = train_test_split(range(len(y)), test_size=0.4, random_state=0, stratify=d.target)
    return DigitsData(x[itr], y[itr], x[ite], y[ite])


class _Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.down is None else self.down(x)))


class DigitsResNet(nn.Module):
    """Input [B, 1, 8, 8] -> logits [B, 10]."""

    def __init__(self, width: int = 32) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        self.block1 = _Block(width, width, 1)
        self.block2 = _Block(width, 2 * width, 2)
        self.fc = nn.Linear(2 * width, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.block2(self.block1(self.stem(x)))
        return self.fc(x.mean(dim=(2, 3)))


def _fold(conv: nn.Conv2d, bn: nn.BatchNorm2d) -> nn.Conv2d:
    w = conv.weight * (bn.weight / torch.sqrt(bn.running_var + bn.eps)).view(-1, 1, 1, 1)
    b = bn.bias - bn.running_mean * bn.weight / torch.sqrt(bn.running_var + bn.eps)
    out = nn.Conv2d(conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride, conv.padding, bias=True)
    out.weight.data.copy_(w.detach())
    out.bias.data.copy_(b.detach())
    return out


def fold_batchnorm(model: DigitsResNet) -> nn.Module:
    """An eval-mode copy with every BatchNorm folded into the preceding convolution (weights + bias)."""
    model = model.eval()
    m = DigitsResNet(model.fc.in_features // 2).eval()
    m.load_state_dict(model.state_dict())
    m.stem = nn.Sequential(_fold(model.stem[0], model.stem[1]), nn.ReLU())
    for name in ("block1", "block2"):
        src, dst = getattr(model, name), getattr(m, name)
        dst.conv1, dst.bn1 = _fold(src.conv1, src.bn1), nn.Identity()
        dst.conv2, dst.bn2 = _fold(src.conv2, src.bn2), nn.Identity()
        if src.down is not None:
            dst.down = _fold(src.down[0], src.down[1])
    return m.eval()


def _shift(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    dx, dy = (int(v) for v in torch.randint(-1, 2, (2,), generator=gen))
    return torch.roll(x, shifts=(dy, dx), dims=(2, 3))


def load_cached(name: str, base: nn.Module) -> bool:
    """Load the cached state ``name`` into ``base``; False when absent, stale or damaged (then retrain)."""
    state = load_state(name)
    if state is None:
        return False
    try:
        base.load_state_dict(state)
        return True
    except (RuntimeError, KeyError, TypeError, ValueError, AttributeError):
        return False


def fit(base: nn.Module, data: DigitsData, epochs: int, lr: float,
        schedule: Callable[[torch.optim.Optimizer, int], Any], desc: str, progress: bool) -> float:
    """Train ``base`` in place for ``epochs`` over ``data`` (batches of 64, random 1-pixel shifts, Adam with
    weight decay 1e-4 and ``schedule(opt, total_steps)`` stepped per batch); returns the seconds it took."""
    from tqdm import tqdm

    gen = torch.Generator().manual_seed(0)
    opt = torch.optim.Adam(base.parameters(), lr=lr, weight_decay=1e-4)
    n = len(data.y_train)
    steps = epochs * ((n + 63) // 64)
    sched = schedule(opt, steps)
    t0 = time.perf_counter()
    base.train()
    bar = tqdm(total=steps, desc=desc, disable=not progress, leave=False)
    for _ in range(epochs):
        perm = torch.randperm(n, generator=gen)
        for i in range(0, n, 64):
            idx = perm[i:i + 64]
            loss = F.cross_entropy(base(_shift(data.x_train[idx], gen)), data.y_train[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            bar.update(1)
    bar.close()
    base.eval()
    return time.perf_counter() - t0


def train_or_load(data: DigitsData, epochs: int, progress: bool = True) -> tuple[nn.Module, str]:
    """The BN-folded digits CNN trained for ``epochs`` (cached); returns (model, 'cached'|'trained in N s')."""
    name = f"digits_resnet_w32_s{data.x_train.shape[-1]}_e{epochs}_v1.pt"
    base = DigitsResNet()
    if load_cached(name, base):
        return fold_batchnorm(base), "cached"
    torch.manual_seed(0)
    seconds = fit(base, data, epochs, 3e-3,
                  lambda opt, steps: torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=steps),
                  "digits CNN: training", progress)
    save_state(name, base.state_dict())
    return fold_batchnorm(base), f"trained in {seconds:.0f} s"


@torch.no_grad()
def logits(model: nn.Module, x: torch.Tensor, batch: int = 256) -> torch.Tensor:
    """The model's logits [n, classes] for images x, ``batch`` images per forward call."""
    return torch.cat([model(x[i:i + batch]) for i in range(0, len(x), batch)])


def top1(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch: int = 256) -> float:
    """Top-1 accuracy in [0, 1]."""
    return accuracy(logits(model, x, batch), y)


def accuracy(z: torch.Tensor, y: torch.Tensor) -> float:
    """Top-1 accuracy in [0, 1] of logits z [n, classes] against labels y."""
    return int((z.argmax(dim=1) == y).sum()) / len(y)


def calib_batches(data: DigitsData, n: int = 256, batch: int = 64) -> list[torch.Tensor]:
    """The first ``n`` training images in batches (calibration never sees the test split)."""
    return [data.x_train[i:i + batch] for i in range(0, n, batch)]
