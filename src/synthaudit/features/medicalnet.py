"""RELICT's feature extractor: MedicalNet's 3D ResNet, as MedicalNet defines it.

RELICT 2.3.2: volumes are z-score normalised, encoded with the ResNet-50 of
MedicalNet (Chen et al. 2019, "Med3D"; weights trained on 23 segmentation
datasets), the last convolutional feature map is reduced with an adaptive average
pooling to 2048 x 4 x 4 x 4, and that map is flattened into a 131072-long vector.

The network here is MedicalNet's own (Tencent/MedicalNet ``models/resnet.py``),
not a classification ResNet with MedicalNet's tensor names:

* stem: ``conv1`` 7 x 7 x 7, stride 2, padding 3, no bias; ``bn1``; ReLU; max-pool
  3 x 3 x 3, stride 2, padding 1;
* ``layer1`` stride 1; ``layer2`` stride 2; ``layer3`` stride 1 with dilation 2;
  ``layer4`` stride 1 with dilation 4 (a segmentation backbone: the resolution
  stays at 1/8 of the input per axis from ``layer2`` on). Every block of a stage,
  its first included, uses the stage's dilation, with padding equal to it; the
  stride sits on the 3 x 3 x 3 convolution (``conv2`` of a bottleneck, ``conv1`` of a
  basic block);
* shortcuts where the shape changes: type B (``downsample.0`` a 1 x 1 x 1
  convolution with the stride, no bias, ``downsample.1`` BatchNorm) for depths 10,
  50, 101, 152 and 200; type A (average pooling with kernel 1 and the stride, then
  zero channels appended; no parameters) for 18 and 34 - the shortcut types of
  MedicalNet's published checkpoints (MONAI's ``get_medicalnet_pretrained_resnet_args``
  says the same);
* depths 10, 18, 34 (basic blocks) and 50, 101, 152, 200 (bottlenecks), blocks per
  stage as in MedicalNet's ``resnet10`` ... ``resnet200``;
* MedicalNet's initialisation: convolutions Kaiming-normal (``fan_out``), BatchNorm
  weight 1 and bias 0.
* every convolution a :class:`~synthaudit.features.conv.OneDnnConv3d`: ``nn.Conv3d``'s parameters
  and values, with oneDNN's kernels for CPU inference where torch would take its unvectorised
  im2col path (the dilated ``layer3``/``layer4`` on small grids, and every 1 x 1 x 1 convolution on
  one thread; ``bench/features/encoder_cost.py --encoder medicalnet`` times both paths).

The segmentation head ``conv_seg`` is not built: the embedding is the ``layer4``
map. Parameter names are MedicalNet's, so ``resnet_50_23dataset.pth`` (and the
other depths' files) load by name, with or without the ``state_dict`` wrapper and
the ``module.`` prefix of its DataParallel training; ``conv_seg.*`` is dropped.

At RELICT's NCCT grid (182 x 218 x 182) the ``layer4`` map is 23 x 28 x 23, pooled
to 4 x 4 x 4. On smaller grids the map can be smaller than 4 on an axis; it is then
pooled only down (:func:`synthaudit.features.pooling_grid`), and the grid used is
recorded with the embeddings.

MedicalNet's weights are not on PyPI; without a weight file the network is
randomly initialised from a seed and labelled "untrained". A random network is
still a fixed, continuous function of the input, so near-copies get near
embeddings, but the embeddings carry no learned notion of anatomy.

Intensity: RELICT's z-score over the whole volume. (MedicalNet's own training
normalised over the non-zero voxels and filled the background with unseeded
noise; RELICT does not, and an unseeded step would make embeddings irreproducible.)
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from synthaudit.features import (PooledMapExtractor, as_grid, check_state_dict, conv_out, file_sha256,
                                 read_state_dict, register_extractor, resolve_device, zscore)
from synthaudit.features.conv import OneDnnConv3d

logger = logging.getLogger("synthaudit.features")

GRID = (4, 4, 4)  # RELICT: adaptive average pooling to 2048 x 4 x 4 x 4
# depth -> (block type, blocks per stage, shortcut type of MedicalNet's checkpoints)
DEPTHS = {
    10: ("basic", (1, 1, 1, 1), "B"),
    18: ("basic", (2, 2, 2, 2), "A"),
    34: ("basic", (3, 4, 6, 3), "A"),
    50: ("bottleneck", (3, 4, 6, 3), "B"),
    101: ("bottleneck", (3, 4, 23, 3), "B"),
    152: ("bottleneck", (3, 8, 36, 3), "B"),
    200: ("bottleneck", (3, 24, 36, 3), "B"),
}
# (planes, stride, dilation) of layer1 ... layer4
STAGES = ((64, 1, 1), (128, 2, 1), (256, 1, 2), (512, 1, 4))


def _conv3(in_planes: int, out_planes: int, stride: int = 1, dilation: int = 1) -> nn.Conv3d:
    return OneDnnConv3d(in_planes, out_planes, kernel_size=3, stride=stride, padding=dilation,
                        dilation=dilation, bias=False)


class ShortcutA(nn.Module):
    """MedicalNet's type-A shortcut: subsample by the stride, append zero channels (no parameters)."""

    def __init__(self, planes: int, stride: int):
        super().__init__()
        self.planes, self.stride = planes, stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.avg_pool3d(x, kernel_size=1, stride=self.stride)
        pad = out.new_zeros((out.shape[0], self.planes - out.shape[1], *out.shape[2:]))
        return torch.cat([out, pad], dim=1)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int = 1, dilation: int = 1,
                 downsample: nn.Module | None = None):
        super().__init__()
        self.conv1 = _conv3(inplanes, planes, stride=stride, dilation=dilation)
        self.bn1 = nn.BatchNorm3d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = _conv3(planes, planes, dilation=dilation)
        self.bn2 = nn.BatchNorm3d(planes)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        residual = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + residual)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1, dilation: int = 1,
                 downsample: nn.Module | None = None):
        super().__init__()
        self.conv1 = OneDnnConv3d(inplanes, planes, kernel_size=1, bias=False)
        self.bn1 = nn.BatchNorm3d(planes)
        self.conv2 = _conv3(planes, planes, stride=stride, dilation=dilation)
        self.bn2 = nn.BatchNorm3d(planes)
        self.conv3 = OneDnnConv3d(planes, planes * 4, kernel_size=1, bias=False)
        self.bn3 = nn.BatchNorm3d(planes * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        residual = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + residual)


class MedicalNetResNet(nn.Module):
    """MedicalNet's 3D ResNet trunk (no segmentation head); ``forward`` returns the ``layer4`` map.

    Args:
        depth: 10, 18, 34, 50, 101, 152 or 200.
        shortcut_type: ``"A"`` or ``"B"``; default: that of MedicalNet's checkpoint of
            this depth (:data:`DEPTHS`).
    """

    def __init__(self, depth: int = 50, shortcut_type: str | None = None):
        super().__init__()
        if depth not in DEPTHS:
            raise ValueError(f"MedicalNet ResNet depth must be one of {sorted(DEPTHS)}, got {depth}")
        kind, blocks, default_shortcut = DEPTHS[depth]
        self.shortcut_type = shortcut_type or default_shortcut
        if self.shortcut_type not in ("A", "B"):
            raise ValueError(f"shortcut_type must be 'A' or 'B', got {shortcut_type!r}")
        block = Bottleneck if kind == "bottleneck" else BasicBlock
        self.depth, self.channels = depth, 512 * block.expansion
        self.inplanes = 64
        self.conv1 = OneDnnConv3d(1, 64, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm3d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool3d(kernel_size=3, stride=2, padding=1)
        for index, ((planes, stride, dilation), n) in enumerate(zip(STAGES, blocks), start=1):
            setattr(self, f"layer{index}", self._make_layer(block, planes, n, stride, dilation))
        for m in self.modules():
            if isinstance(m, nn.Conv3d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
            elif isinstance(m, nn.BatchNorm3d):
                m.weight.data.fill_(1)
                m.bias.data.zero_()

    def _make_layer(self, block: type, planes: int, blocks: int, stride: int, dilation: int) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            if self.shortcut_type == "A":
                downsample = ShortcutA(planes * block.expansion, stride)
            else:
                downsample = nn.Sequential(
                    OneDnnConv3d(self.inplanes, planes * block.expansion, kernel_size=1, stride=stride, bias=False),
                    nn.BatchNorm3d(planes * block.expansion))
        layers = [block(self.inplanes, planes, stride=stride, dilation=dilation, downsample=downsample)]
        self.inplanes = planes * block.expansion
        layers += [block(self.inplanes, planes, dilation=dilation) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        return self.layer4(self.layer3(self.layer2(self.layer1(x))))


def medicalnet_map_shape(shape: Sequence[int]) -> tuple[int, int, int]:
    """Size of the ``layer4`` map for an input of ``shape``: stem, max-pool and ``layer2`` halve it."""
    out = []
    for n in shape:
        n = conv_out(int(n), 7, 2, 3)        # conv1
        n = conv_out(n, 3, 2, 1)             # maxpool
        out.append(conv_out(n, 3, 2, 1))     # layer2's strided 3 x 3 x 3 convolution
    return tuple(out)  # type: ignore[return-value]


def build_medicalnet_resnet(depth: int = 50) -> MedicalNetResNet:
    """MedicalNet's ResNet of ``depth`` with the shortcut type of its published checkpoint."""
    return MedicalNetResNet(depth)


def load_medicalnet_weights(model: nn.Module, path: str | Path) -> list[str]:
    """Load MedicalNet weights (e.g. ``resnet_50_23dataset.pth``) into ``model`` by name.

    Accepts a bare state dict or ``{"state_dict": ...}``, keys with or without the
    ``module.`` prefix of MedicalNet's DataParallel training. Tensors the model
    does not have (MedicalNet's segmentation head ``conv_seg.*``) are dropped and
    logged. BatchNorm's ``num_batches_tracked`` counters may be missing: they only
    matter in training.

    Args:
        model: A network from :func:`build_medicalnet_resnet` (every one of its
            tensors must be in the file, with its shape).
        path: The checkpoint.

    Returns:
        The names of the dropped tensors.

    Raises:
        FileNotFoundError: If ``path`` does not exist.
        ValueError: If a tensor of the model is missing from the file or has a
            different shape (e.g. the checkpoint of another depth), or the file is
            not a checkpoint; the message names the file.
    """
    state = read_state_dict(path)
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    dropped = check_state_dict(path, expected, state, optional=_is_batch_counter)
    if dropped:
        logger.warning("%s: ignoring %d tensor(s) that are not part of the ResNet backbone: %s",
                       path, len(dropped), ", ".join(dropped))
    # Not strict: only the counters that check_state_dict allowed to be missing can be.
    model.load_state_dict({k: state[k] for k in expected if k in state}, strict=False)
    return dropped


def _is_batch_counter(key: str) -> bool:
    return key.endswith("num_batches_tracked")


class MedicalNetExtractor(PooledMapExtractor):
    """RELICT's embedding: z-score -> MedicalNet ResNet ``layer4`` map -> grid average pool -> flatten.

    Args:
        weights: Path of a MedicalNet checkpoint of this depth; ``None`` builds a
            randomly initialised ("untrained") network.
        seed: Seed of the random initialisation (ignored with ``weights``). The
            same seed gives the same network, hence the same embeddings; the
            global torch random state is left as it was.
        grid: Pooling cells per axis (RELICT: 4), pooled only down.
        device: ``"cpu"``, ``"cuda"`` or ``"auto"`` (CUDA when available).
    """

    depth = 50

    def __init__(self, weights: str | Path | None = None, seed: int = 0, grid: int | Sequence[int] = GRID,
                 device: str = "auto"):
        self.device = resolve_device(device)
        self.grid = as_grid(grid)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = build_medicalnet_resnet(self.depth)
        self.channels = model.channels
        self.dim = self.channels * int(np.prod(self.grid))
        name = f"MedicalNet ResNet-{self.depth}"
        if weights is None:
            self.trained, self.seed = False, int(seed)
            self.label = f"{name} (untrained, seed {seed})"
        else:
            load_medicalnet_weights(model, weights)
            self.trained, self.seed = True, None
            self.weights = str(Path(weights).resolve())
            self.weights_sha256 = file_sha256(weights)
            self.label = f"{name} ({Path(weights).name})"
        # channels-last 3D layout: oneDNN's convolutions run 21 % faster on one CPU thread (0.96 ->
        # 0.76 s per 61 x 73 x 61 volume, ResNet-50), feature maps equal to 1e-6 relative
        self.model = model.eval().to(self.device, memory_format=torch.channels_last_3d)

    def options(self) -> dict:
        return {"normalisation": "zscore", "grid": list(self.grid), "depth": self.depth,
                "shortcut": self.model.shortcut_type}

    def map_shape(self, shape: Sequence[int]) -> tuple[int, int, int]:
        return medicalnet_map_shape(shape)

    def to_input(self, volumes: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.stack([zscore(v) for v in volumes])[:, None]).to(self.device)

    def feature_map(self, x: torch.Tensor) -> torch.Tensor:
        """Last convolutional feature map ``(N, C, x, y, z)``: MedicalNet's ``layer4`` output."""
        return self.model(x.contiguous(memory_format=torch.channels_last_3d)).contiguous()


def _medicalnet_class(depth: int) -> type[MedicalNetExtractor]:
    cls = type(f"MedicalNetResNet{depth}", (MedicalNetExtractor,), {"depth": depth, "__doc__": (
        f"MedicalNet's ResNet-{depth} (see :class:`MedicalNetExtractor`).")})
    cls.__module__ = __name__
    return register_extractor(f"medicalnet_resnet{depth}")(cls)


MedicalNetResNet10 = _medicalnet_class(10)
MedicalNetResNet18 = _medicalnet_class(18)
MedicalNetResNet34 = _medicalnet_class(34)
MedicalNetResNet50 = _medicalnet_class(50)
MedicalNetResNet101 = _medicalnet_class(101)
MedicalNetResNet152 = _medicalnet_class(152)
MedicalNetResNet200 = _medicalnet_class(200)
