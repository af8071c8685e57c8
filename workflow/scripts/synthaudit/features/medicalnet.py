"""RELICT's feature extractor: MedicalNet's 3D ResNet-50, pooled to 2048 x 4 x 4 x 4.

RELICT 2.3.2: volumes are z-score normalised, encoded with the ResNet-50 of
MedicalNet (Chen et al. 2019; weights trained on 23 segmentation datasets), the
last convolutional feature map is reduced with an adaptive average pooling to
2048 x 4 x 4 x 4, and that map is flattened into a 131072-long vector.

The network is MONAI's ``resnet50`` in MedicalNet's configuration (one input
channel, stride-2 stem on every axis, type-B shortcuts without bias), the form in
which MONAI itself loads MedicalNet's weights; its parameter names are
MedicalNet's (``conv1``, ``bn1``, ``layer1.0.conv1``, ``layer1.0.downsample.0``,
...), so a MedicalNet checkpoint loads by name. MONAI's ``forward`` ends with a
global average pooling (a 2048-vector), so the feature map is taken from the
layers directly.

MedicalNet's weights are not on PyPI; without a weight file the network is
randomly initialised from a seed and labelled "untrained". A random network is
still a fixed, continuous function of the input, so near-copies get near
embeddings, but the embeddings carry no learned notion of anatomy.

Caveat: MedicalNet's own ResNet runs ``layer3`` and ``layer4`` with stride 1 and
dilations 2 and 4 (a segmentation backbone); MONAI's network, as specified for
RELICT here, downsamples there with stride 2 instead. The tensors have the same
names and shapes, so the weights load, but the trained filters then see a
coarser grid than during training, and the final map is 8x smaller per axis.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from monai.networks.nets import ResNet, resnet50

from synthaudit.features import (Extractor, check_state_dict, file_sha256, read_state_dict,
                                 register_extractor, resolve_device, zscore)

logger = logging.getLogger("synthaudit.features")

GRID = (4, 4, 4)
CHANNELS = 2048


def build_medicalnet_resnet50() -> ResNet:
    """MONAI's ResNet-50 in MedicalNet's configuration, without a classifier head."""
    return resnet50(spatial_dims=3, n_input_channels=1, conv1_t_stride=2, shortcut_type="B",
                    bias_downsample=False, feed_forward=False)


def load_medicalnet_weights(model: ResNet, path: str | Path) -> list[str]:
    """Load MedicalNet weights (e.g. ``resnet_50_23dataset.pth``) into ``model``.

    Accepts a bare state dict or ``{"state_dict": ...}``, keys with or without the
    ``module.`` prefix of MedicalNet's DataParallel training. Tensors the model
    does not have (MedicalNet's segmentation head ``conv_seg.*``) are dropped and
    logged. BatchNorm's ``num_batches_tracked`` counters may be missing: they only
    matter in training.

    Args:
        model: A network from :func:`build_medicalnet_resnet50` (or any MONAI
            ResNet; every one of its tensors must be in the file).
        path: The checkpoint.

    Returns:
        The names of the dropped tensors.

    Raises:
        FileNotFoundError: If ``path`` does not exist.
        ValueError: If a tensor of the model is missing from the file or has a
            different shape, or the file is not a checkpoint; the message names
            the file.
    """
    state = read_state_dict(path)
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    dropped = check_state_dict(path, expected, state, optional=_is_batch_counter)
    if dropped:
        logger.warning("%s: ignoring %d tensor(s) that are not part of the ResNet-50 backbone: %s",
                       path, len(dropped), ", ".join(dropped))
    # Not strict: only the counters that check_state_dict allowed to be missing can be.
    model.load_state_dict({k: state[k] for k in expected if k in state}, strict=False)
    return dropped


def _is_batch_counter(key: str) -> bool:
    return key.endswith("num_batches_tracked")


@register_extractor("medicalnet_resnet50")
class MedicalNetResNet50(Extractor):
    """RELICT's embedding: z-score -> ResNet-50 layer4 map -> 4x4x4 average pool -> 131072 floats.

    Args:
        weights: Path of a MedicalNet ResNet-50 checkpoint; ``None`` builds a
            randomly initialised ("untrained") network.
        seed: Seed of the random initialisation (ignored with ``weights``). The
            same seed gives the same network, hence the same embeddings; the
            global torch random state is left as it was.
        device: ``"cpu"``, ``"cuda"`` or ``"auto"`` (CUDA when available).
    """

    dim = CHANNELS * GRID[0] * GRID[1] * GRID[2]

    def __init__(self, weights: str | Path | None = None, seed: int = 0, device: str = "auto"):
        self.device = resolve_device(device)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = build_medicalnet_resnet50()
        if weights is None:
            self.trained, self.seed = False, int(seed)
            self.label = f"MedicalNet ResNet-50 (untrained, seed {seed})"
        else:
            load_medicalnet_weights(model, weights)
            self.trained, self.seed = True, None
            self.weights = str(Path(weights).resolve())
            self.weights_sha256 = file_sha256(weights)
            self.label = f"MedicalNet ResNet-50 ({Path(weights).name})"
        self.model = model.eval().to(self.device)

    def options(self) -> dict:
        return {"normalisation": "zscore", "pool": list(GRID)}

    def embed_batch(self, volumes: np.ndarray) -> np.ndarray:
        x = torch.from_numpy(np.stack([zscore(v) for v in volumes])[:, None]).to(self.device)
        with torch.inference_mode():
            features = F.adaptive_avg_pool3d(self.feature_map(x), GRID)
        return features.flatten(1).float().cpu().numpy()

    def feature_map(self, x: torch.Tensor) -> torch.Tensor:
        """Last convolutional feature map ``(N, 2048, x, y, z)``, before MONAI's global pooling."""
        m = self.model
        x = m.maxpool(m.act(m.bn1(m.conv1(x))))
        return m.layer4(m.layer3(m.layer2(m.layer1(x))))
