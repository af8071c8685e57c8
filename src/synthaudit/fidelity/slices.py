"""A 2.5D slice-wise Fréchet distance, as NV-Generate-CTMR (MAISI's successor) computes its FID
(``scripts/compute_fid_2-5d_ct.py``), so that a lab can set synthaudit's number beside the ones those
models report.

Why beside the 3D measures: published CT generators (MAISI, NV-Generate-CTMR) report this number; a
lab comparing its model with theirs needs it computed the same way on its own samples. It is opt-in:
its 2D encoder, RadImageNet's ResNet-50, has weights in no package these machines reach; give the file
(``RadImageNet-ResNet50_notop.pth``, the one ``torch.hub.load("Warvito/radimagenet-models",
"radimagenet_resnet50")`` downloads) as ``fidelity.fd_2p5d.weights``.

The steps, each as the reference script takes it:

1. The volume in RAS orientation (their ``Orientationd(axcodes="RAS")``), on the audit's common grid
   (their resampling, padding with -1000 and centre crop make one grid; the audit's preprocessing
   already did), intensities clipped to ``window`` (their ``ScaleIntensityRanged(-1000, 1000, -1000,
   1000, clip=True)`` for CT in HU; ``None`` for other images).
2. Slices along each axis: XY (axial, along z), YZ (along x), ZX (along y); all of them, or the
   central ``center_ratio`` of each axis (their ``enable_center_slices_ratio``).
3. Each plane's stack of slices scaled to [0, 1] by its own minimum and maximum (+1e-10), repeated
   to three channels, the ImageNet means [0.406, 0.456, 0.485] subtracted per channel (their
   ``radimagenet_intensity_normalisation`` after the BGR swap, a no-op on a grey image).
4. RadImageNet's ResNet-50 trunk (Keras' layout: biased convolutions, the stride on each block's
   first 1x1 convolution, batch-norm eps 1.001e-5), its 2048-channel map averaged over space: one row
   per slice.
5. Per plane, the Fréchet distance between the slices' rows of the two sets (their ``FIDMetric``;
   here :func:`.measures.frechet_distance`, equal to it); the reported number is the mean of the three.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

PLANES = ("xy", "yz", "zx")
IMAGENET_MEANS = (0.406, 0.456, 0.485)  # per channel after their BGR swap (subtract_mean)
LABEL = ("2.5D FD as NV-Generate-CTMR's compute_fid_2-5d_ct.py: RadImageNet ResNet-50 (Keras layout) on "
         "every XY, YZ and ZX slice of the RAS volume, each plane's stack min-max scaled, ImageNet means "
         "subtracted, features averaged over space; the Fréchet distance per plane, the mean of the three")


def _trunk():
    """RadImageNet's ResNet-50 without its head, in the layout of the converted Keras weights."""
    from torch import nn

    class Bottleneck(nn.Module):
        def __init__(self, inplanes: int, planes: int, stride: int = 1):
            super().__init__()
            self.conv1 = nn.Conv2d(inplanes, planes, 1, stride=stride, bias=True)
            self.bn1 = nn.BatchNorm2d(planes, eps=1.001e-5)
            self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=True)
            self.bn2 = nn.BatchNorm2d(planes, eps=1.001e-5)
            self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=True)
            self.bn3 = nn.BatchNorm2d(planes * 4, eps=1.001e-5)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = (nn.Sequential(nn.Conv2d(inplanes, planes * 4, 1, stride=stride, bias=True),
                                             nn.BatchNorm2d(planes * 4, eps=1.001e-5))
                               if stride != 1 or inplanes != planes * 4 else None)

        def forward(self, x):
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.relu(self.bn2(self.conv2(out)))
            out = self.bn3(self.conv3(out))
            return self.relu(out + (x if self.downsample is None else self.downsample(x)))

    class ResNet50(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=True)
            self.bn1 = nn.BatchNorm2d(64, eps=1.001e-5)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
            inplanes, layers = 64, []
            for planes, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
                layers.append(nn.Sequential(*[Bottleneck(inplanes if b == 0 else planes * 4, planes,
                                                         stride if b == 0 else 1) for b in range(blocks)]))
                inplanes = planes * 4
            self.layer1, self.layer2, self.layer3, self.layer4 = layers

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            return self.layer4(self.layer3(self.layer2(self.layer1(x))))

    return ResNet50()


def load_encoder(weights: str | Path, device="cpu"):
    """The trunk with the weights of ``weights`` (a state dict), in eval mode on ``device``; a missing
    file or one of another network is refused naming the file."""
    import torch

    path = Path(weights)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file (fidelity.fd_2p5d.weights: RadImageNet's ResNet-50, "
                                "RadImageNet-ResNet50_notop.pth, as torch.hub.load('Warvito/radimagenet-models', "
                                "'radimagenet_resnet50') downloads it; docs/fidelity.md)")
    net = _trunk()
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
        net.load_state_dict(state.get("state_dict", state) if isinstance(state, dict) else state)
    except (RuntimeError, TypeError, AttributeError, ValueError, EOFError) as e:
        first = str(e).strip().splitlines()[0][:300]
        raise ValueError(f"{path}: not RadImageNet's ResNet-50 weights ({first})") from None
    return net.eval().to(device)


def read_volume(path: str | Path, window: Sequence[float] | None) -> np.ndarray:
    """The volume in RAS voxel order (x, y, z), float32, clipped to ``window`` where given."""
    import nibabel as nib

    try:
        img = nib.as_closest_canonical(nib.load(str(path)))
    except Exception as e:  # nibabel raises several kinds for a broken or foreign file
        raise ValueError(f"{path}: cannot be read as NIfTI ({e})") from None
    v = np.asarray(img.dataobj, np.float32)
    if v.ndim != 3:
        raise ValueError(f"{path}: the 2.5D FD takes 3D volumes, this one has {v.ndim} dimensions")
    return np.clip(v, window[0], window[1]) if window is not None else v


def _plane_stack(v: np.ndarray, plane: str, center_ratio: float | None) -> np.ndarray:
    """The plane's slices (n, a, b), centred selection as the reference takes it."""
    axis = {"xy": 2, "yz": 0, "zx": 1}[plane]
    n = v.shape[axis]
    start, end = (int((1.0 - center_ratio) / 2.0 * n), int((1.0 + center_ratio) / 2.0 * n)) if center_ratio else (0, n)
    return np.moveaxis(v, axis, 0)[start:end]


def slice_features(net, v: np.ndarray, center_ratio: float | None = None, batch: int = 32,
                   device="cpu") -> dict[str, np.ndarray]:
    """``{plane: (slices, 2048)}`` of one volume (steps 2-4 of the module docstring)."""
    import torch

    out = {}
    for plane in PLANES:
        stack = _plane_stack(v, plane, center_ratio).astype(np.float32)
        lo, hi = float(stack.min()), float(stack.max())
        stack = (stack - lo) / (hi - lo + 1e-10)
        rows = []
        with torch.no_grad():
            for start in range(0, len(stack), batch):
                x = torch.from_numpy(np.ascontiguousarray(stack[start:start + batch]))[:, None].repeat(1, 3, 1, 1)
                x = x - torch.tensor(IMAGENET_MEANS).view(1, 3, 1, 1)
                rows.append(net(x.to(device)).mean(dim=(2, 3)).double().cpu().numpy())
        out[plane] = np.concatenate(rows) if rows else np.zeros((0, 2048))
    return out


def extract(paths: Sequence[str | Path], net, window: Sequence[float] | None, center_ratio: float | None,
            device="cpu", progress: Callable[[int], None] | None = None) -> dict[str, list[np.ndarray]]:
    """``{plane: [each volume's (slices, 2048)]}`` of every volume, in order."""
    out: dict[str, list[np.ndarray]] = {p: [] for p in PLANES}
    for k, path in enumerate(paths):
        feats = slice_features(net, read_volume(path, window), center_ratio, device=device)
        for p in PLANES:
            out[p].append(feats[p])
        if progress:
            progress(k + 1)
    return out


def save(path: str | Path, ids: Sequence[str], per_plane: dict[str, list[np.ndarray]]) -> None:
    """One split's slice features, atomically: ids, and per plane the rows and each volume's count."""
    from ..io import atomic_path

    arrays = {"ids": np.array([str(i) for i in ids])}
    for p in PLANES:
        arrays[p] = np.concatenate(per_plane[p]) if per_plane[p] else np.zeros((0, 2048))
        arrays[f"{p}_counts"] = np.array([len(r) for r in per_plane[p]], np.int64)
    with atomic_path(path, ".npz") as tmp:
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)


def load(path: str | Path, ids: Sequence[str]) -> dict[str, list[np.ndarray]]:
    """``{plane: [each volume's rows]}`` of a :func:`save` file, volumes in the order of ``ids``."""
    with np.load(path, allow_pickle=False) as z:
        stored = [str(i) for i in z["ids"]]
        planes = {p: np.split(np.asarray(z[p]), np.cumsum(z[f"{p}_counts"])[:-1]) for p in PLANES}
    row = {i: k for k, i in enumerate(stored)}
    missing = [i for i in ids if i not in row]
    if missing:
        raise ValueError(f"{path}: no slice features for {len(missing)} volume(s), e.g. {missing[0]}: the file is "
                         "stale; rerun rule slice_features")
    return {p: [planes[p][row[i]] for i in ids] for p in PLANES}


def fd_2p5d(real: dict[str, list[np.ndarray]], other: dict[str, list[np.ndarray]], t=None, o=None) -> dict:
    """The Fréchet distance per plane between the slices of volumes ``t`` of ``real`` and ``o`` of
    ``other`` (all where None; repeats count, for a bootstrap replicate), and their mean."""
    from .measures import frechet_distance

    out = {}
    for p in PLANES:
        a = real[p] if t is None else [real[p][i] for i in t]
        b = other[p] if o is None else [other[p][i] for i in o]
        out[p] = frechet_distance(np.concatenate(a), np.concatenate(b))
    return {"fd_2p5d": float(np.mean([out[p] for p in PLANES])), **{f"fd_2p5d_{p}": out[p] for p in PLANES}}
