"""The textbook baseline that `resnet bench` measures against.

A CIFAR ResNet written the way most public PyTorch code is: its own small block classes, NCHW,
fp32, eager, fed by torchvision's `DataLoader` with per-image PIL transforms (RandomCrop(32,
padding=4), RandomHorizontalFlip, ToTensor, Normalize) in 2 worker processes. Nothing here is used
for training; it exists so that the speed-up `resnet bench` reports has a fixed, honest reference.

Two blocks cover the bundled CIFAR specs at the same depth as ours:
- `BasicBlock` (6n+2 depths): He 2016a's unit with option-A shortcuts (stride-2 subsampling and
  zero-padded channels), so ResNet-20/56/110 have exactly our parameter count.
- `PreActBottleneck` (9n+2 depths, ResNet-164/1001): He 2016b's full pre-activation bottleneck with
  a 1x1 projection where shapes change, the stride in the 3x3 as most public code has it.

The images are CIFAR-shaped synthetic uint8 arrays (the real CIFAR is not needed to measure speed),
held and served like `torchvision.datasets.CIFAR10`: an (N, 32, 32, 3) uint8 array, one PIL image
per `__getitem__`.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

# The CIFAR-10 channel statistics that public training scripts hard-code in Normalize.
CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2470, 0.2435, 0.2616)
IMAGE_SIZE = 32


# ---------------------------------------------------------------------------------------------
# Data: CIFAR-shaped images served one PIL image at a time


def cifar_like(n: int, num_classes: int = 10, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(n, 32, 32, 3) uint8 images and (n,) int64 labels, fixed by `seed`. Uniform noise: the cost
    of every step measured here does not depend on what the pixels show."""
    g = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (n, IMAGE_SIZE, IMAGE_SIZE, 3), dtype=torch.uint8, generator=g)
    labels = torch.randint(0, num_classes, (n,), generator=g)
    return images.numpy(), labels.numpy()


class CifarLike(torch.utils.data.Dataset):
    """Serves images exactly as torchvision's CIFAR10 does: uint8 HWC array -> PIL -> transform."""

    def __init__(self, images: np.ndarray, labels: np.ndarray, transform=None):
        self.data = images
        self.targets = labels.tolist()
        self.transform = transform

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int):
        from PIL import Image

        img, target = Image.fromarray(self.data[index]), self.targets[index]
        if self.transform is not None:
            img = self.transform(img)
        return img, target


def train_transform(crop: bool = True, flip: bool = True, pad: int = 4):
    """He 2016a sec. 4.2 as public code writes it: one image at a time, in PIL."""
    import torchvision.transforms as T

    view = [T.RandomCrop(IMAGE_SIZE, padding=pad)] if crop and pad else []
    view += [T.RandomHorizontalFlip()] if flip else []
    return T.Compose([*view, T.ToTensor(), T.Normalize(CIFAR_MEAN, CIFAR_STD)])


def loader(images: np.ndarray, labels: np.ndarray, batch_size: int, workers: int = 2, pin_memory: bool = False,
           crop: bool = True, flip: bool = True, pad: int = 4, seed: int = 0) -> torch.utils.data.DataLoader:
    return torch.utils.data.DataLoader(
        CifarLike(images, labels, train_transform(crop, flip, pad)), batch_size=batch_size, shuffle=True,
        num_workers=workers, pin_memory=pin_memory, generator=torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------------------------------------
# Model


class PadShortcut(nn.Module):
    """Option A (He 2016a sec. 3.3): subsample by the stride, zero-pad the new channels."""

    def __init__(self, planes: int, stride: int):
        super().__init__()
        self.extra = planes
        self.stride = stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x[:, :, :: self.stride, :: self.stride]
        return F.pad(x, (0, 0, 0, 0, self.extra // 2, self.extra - self.extra // 2))  # (N, C + extra, H/s, W/s)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, in_planes: int, planes: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut = nn.Identity()
        if stride != 1 or in_planes != planes:
            self.shortcut = PadShortcut(planes - in_planes, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out = out + self.shortcut(x)
        return F.relu(out)


class PreActBottleneck(nn.Module):
    expansion = 4

    def __init__(self, in_planes: int, planes: int, stride: int = 1):
        super().__init__()
        self.bn1 = nn.BatchNorm2d(in_planes)
        self.conv1 = nn.Conv2d(in_planes, planes, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, self.expansion * planes, 1, bias=False)
        self.shortcut = None
        if stride != 1 or in_planes != self.expansion * planes:
            self.shortcut = nn.Conv2d(in_planes, self.expansion * planes, 1, stride=stride, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(x))
        shortcut = self.shortcut(out) if self.shortcut is not None else x
        out = self.conv1(out)
        out = self.conv2(F.relu(self.bn2(out)))
        out = self.conv3(F.relu(self.bn3(out)))
        return out + shortcut


class CifarResNet(nn.Module):
    def __init__(self, block: type[nn.Module], num_blocks: int, widths: tuple[int, ...] = (16, 32, 64),
                 num_classes: int = 10):
        super().__init__()
        self.preact = block is PreActBottleneck
        self.in_planes = widths[0]
        self.conv1 = nn.Conv2d(3, widths[0], 3, stride=1, padding=1, bias=False)
        # A pre-activation net normalises after its last unit instead of after its first conv.
        self.bn1 = nn.Identity() if self.preact else nn.BatchNorm2d(widths[0])
        self.layer1 = self._make_layer(block, widths[0], num_blocks, stride=1)
        self.layer2 = self._make_layer(block, widths[1], num_blocks, stride=2)
        self.layer3 = self._make_layer(block, widths[2], num_blocks, stride=2)
        self.bn_final = nn.BatchNorm2d(self.in_planes) if self.preact else nn.Identity()
        self.linear = nn.Linear(self.in_planes, num_classes)
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.kaiming_normal_(m.weight)

    def _make_layer(self, block, planes: int, num_blocks: int, stride: int) -> nn.Sequential:
        layers = []
        for s in [stride] + [1] * (num_blocks - 1):
            layers.append(block(self.in_planes, planes, s))
            self.in_planes = planes * block.expansion
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.conv1(x)
        if not self.preact:
            out = F.relu(self.bn1(out))
        out = self.layer3(self.layer2(self.layer1(out)))
        if self.preact:
            out = F.relu(self.bn_final(out))
        out = F.adaptive_avg_pool2d(out, 1).flatten(1)
        return self.linear(out)


def resnet_cifar(depth: int, block: str = "basic", widths: tuple[int, ...] = (16, 32, 64),
                 num_classes: int = 10) -> CifarResNet:
    """6n+2 basic or 9n+2 bottleneck layers, as in He 2016a sec. 4.2 and He 2016b."""
    if block == "basic":
        if (depth - 2) % 6 or depth < 8:
            raise ValueError(f"basic CIFAR ResNets have 6n+2 layers, got {depth}")
        return CifarResNet(BasicBlock, (depth - 2) // 6, tuple(widths), num_classes)
    if block == "bottleneck":
        if (depth - 2) % 9 or depth < 11:
            raise ValueError(f"bottleneck CIFAR ResNets have 9n+2 layers, got {depth}")
        return CifarResNet(PreActBottleneck, (depth - 2) // 9, tuple(widths), num_classes)
    raise ValueError(f"block '{block}' is not one of basic, bottleneck")
