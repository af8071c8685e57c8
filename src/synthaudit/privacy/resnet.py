"""The filters' backbone: MONAI's basic-block ``ResNet`` (monai.networks.nets.resnet, 1.6), built here
module for module, with the same parameter names, the same random draws in the same order and the same
forward pass, and with its ``norm`` in every block (MONAI hands it to the stem alone: Project-MONAI/MONAI
pull request 9028).

Why not MONAI's own: importing ``monai`` loads every MONAI subpackage (apps, data, transforms, and with
them matplotlib and scipy), 3-5 s above torch in each filter job on 2 cores, for a network of 30 lines.
``tests/test_privacy.py`` builds both from one seed and checks every weight and every output bit for bit,
so a filter saved by either loads in the other.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

GROUPS = 8  # GroupNorm's groups (privacy.network.norm: group)

_CONV = {2: nn.Conv2d, 3: nn.Conv3d}
_MAX_POOL = {2: nn.MaxPool2d, 3: nn.MaxPool3d}
_AVG_POOL = {2: nn.AdaptiveAvgPool2d, 3: nn.AdaptiveAvgPool3d}
_BATCH_NORM = {2: nn.BatchNorm2d, 3: nn.BatchNorm3d}


def _norm(kind: str, dims: int, channels: int) -> nn.Module:
    if kind == "group":
        return nn.GroupNorm(GROUPS, channels)
    if kind == "batch":
        return _BATCH_NORM[dims](channels)
    raise ValueError(f"norm {kind!r}: choose group or batch")


class Block(nn.Module):
    """MONAI's ``ResNetBlock``: two 3-wide convolutions, a shortcut, one shared in-place ReLU."""

    def __init__(self, in_planes: int, planes: int, dims: int, norm: str, stride: int = 1,
                 downsample: nn.Module | None = None):
        super().__init__()
        conv = _CONV[dims]
        self.conv1 = conv(in_planes, planes, kernel_size=3, padding=1, stride=stride, bias=False)
        self.bn1 = _norm(norm, dims, planes)
        self.act = nn.ReLU(inplace=True)
        self.conv2 = conv(planes, planes, kernel_size=3, padding=1, bias=False)
        self.bn2 = _norm(norm, dims, planes)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.act(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += x if self.downsample is None else self.downsample(x)
        return self.act(out)


class ResNet(nn.Module):
    """MONAI's ``ResNet(ResNetBlock, layers, [64, 128, 256, 512], widen_factor=width,
    conv1_t_stride=stem_stride, norm=...)`` with shortcut B and a 7-wide stem; ``norm`` (group or
    batch) in the stem and in every block and shortcut."""

    def __init__(self, layers: Sequence[int], dims: int, in_channels: int, num_classes: int, width: float,
                 stem_stride: int, norm: str):
        super().__init__()
        if dims not in _CONV:
            raise ValueError(f"a ResNet backbone is 2D or 3D, not {dims}D")
        planes = [int(p * width) for p in (64, 128, 256, 512)]
        self.in_planes = planes[0]
        self.conv1 = _CONV[dims](in_channels, self.in_planes, kernel_size=7, stride=stem_stride, padding=3,
                                 bias=False)
        self.bn1 = _norm(norm, dims, self.in_planes)
        self.act = nn.ReLU(inplace=True)
        self.maxpool = _MAX_POOL[dims](kernel_size=3, stride=2, padding=1)
        self.layer1 = self._layer(planes[0], layers[0], dims, norm)
        self.layer2 = self._layer(planes[1], layers[1], dims, norm, stride=2)
        self.layer3 = self._layer(planes[2], layers[2], dims, norm, stride=2)
        self.layer4 = self._layer(planes[3], layers[3], dims, norm, stride=2)
        self.avgpool = _AVG_POOL[dims]((1,) * dims)
        self.fc = nn.Linear(planes[3], num_classes)
        stem_norm = type(self.bn1)
        for m in self.modules():  # MONAI's initialisation, in its order
            if isinstance(m, _CONV[dims]):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, stem_norm):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)
            elif isinstance(m, nn.Linear):
                nn.init.constant_(m.bias, 0)

    def _layer(self, planes: int, blocks: int, dims: int, norm: str, stride: int = 1) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.in_planes != planes:  # shortcut B: a strided 1-wide convolution with a bias
            downsample = nn.Sequential(_CONV[dims](self.in_planes, planes, kernel_size=1, stride=stride),
                                       _norm(norm, dims, planes))
        layers = [Block(self.in_planes, planes, dims, norm, stride, downsample)]
        self.in_planes = planes
        layers += [Block(planes, planes, dims, norm) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.act(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(self.avgpool(x).view(x.size(0), -1))
