"""What every feature extractor is: the Extractor interface (embed, describe), the input checks and
z-scoring, pooling a feature map onto a grid, and the wrappers (smoothing, flip-averaged pooling)."""

from __future__ import annotations

import abc
import logging
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np


logger = logging.getLogger("synthaudit.features")


class Extractor(abc.ABC):
    """A function from a 3D volume to a fixed-length embedding, with its provenance.

    Subclasses implement :meth:`embed_batch` and set the attributes below; the base
    class provides input checks, batching (:meth:`embed_many`) and :meth:`describe`.

    Attributes:
        name: Registry name (set by :func:`get_extractor` to the name it was
            requested by, so that stored embeddings can be checked against the
            configuration).
        label: Human-readable name shown in outputs and figures; must contain
            "untrained" for a randomly initialised network.
        dim: Length of the embedding for extractors whose length does not depend
            on the volume shape; pooled feature maps give it per shape
            (:meth:`embedding_dim`).
        trained: Whether the weights come from training (False: random init).
        seed: Seed of the random initialisation, or None for loaded weights.
        weights: Path of the weight file, or None.
        weights_sha256: SHA-256 of the weight file, or None.
    """

    name: str = ""
    label: str = ""
    dim: int = 0
    trained: bool = False
    seed: int | None = None
    weights: str | None = None
    weights_sha256: str | None = None

    @abc.abstractmethod
    def embed_batch(self, volumes: np.ndarray) -> np.ndarray:
        """Embed a batch of volumes of one shape.

        Args:
            volumes: ``(B, X, Y, Z)`` float32, finite (checked by the caller).

        Returns:
            ``(B, dim)`` float32 embeddings.
        """

    def options(self) -> dict[str, Any]:
        """Settings besides the weights that change the embedding (for :meth:`describe`)."""
        return {}

    def grid_for(self, shape: tuple[int, ...]) -> tuple[int, int, int] | None:
        """Pooling grid actually used for volumes of ``shape`` (None: no feature-map pooling)."""
        return None

    def embedding_dim(self, shape: tuple[int, ...]) -> int:
        """Length of the embedding of a volume of ``shape`` (default: :attr:`dim`)."""
        return self.dim

    def describe(self, shape: tuple[int, ...] | None = None) -> dict[str, Any]:
        """Provenance of the embeddings: stored next to them and shown in reports.

        Args:
            shape: The volumes' shape; when given, ``dim`` and ``grid_used`` are those
                of that shape (a pooled feature map's length depends on it).
        """
        info = {
            "name": self.name,
            "label": self.label,
            "weights": self.weights,
            "weights_sha256": self.weights_sha256,
            "trained": self.trained,
            "seed": self.seed,
            "dim": self.dim if shape is None else self.embedding_dim(tuple(shape)),
            "options": self.options(),
        }
        if shape is not None:
            grid = self.grid_for(tuple(shape))
            info["input_shape"] = [int(n) for n in shape]
            info["grid_used"] = None if grid is None else list(grid)
        return info

    def __call__(self, volume: np.ndarray) -> np.ndarray:
        """Embed one ``(X, Y, Z)`` volume; returns a ``(dim,)`` float32 vector."""
        return self.embed_many([volume])[0]

    def embed_many(self, volumes: Iterable[np.ndarray], batch_size: int = 1) -> np.ndarray:
        """Embed volumes, ``batch_size`` at a time; returns ``(N, dim)`` float32.

        Volumes are consumed one by one (any iterable, e.g. a generator reading
        files), so only one batch is in memory. Consecutive volumes of the same
        shape share a batch; a change of shape starts a new one.

        Raises:
            ValueError: If a volume is not 3D, is empty or has NaN/inf values
                (the message gives its position), or if ``batch_size < 1``.
        """
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        out: list[np.ndarray] = []
        batch: list[np.ndarray] = []
        first_shape = None
        for index, volume in enumerate(volumes):
            volume = _checked_volume(volume, index)
            if first_shape is None:
                first_shape = volume.shape
            elif self.embedding_dim(volume.shape) != self.embedding_dim(first_shape):
                raise ValueError(
                    f"volume {index}: shape {volume.shape} gives embeddings of length "
                    f"{self.embedding_dim(volume.shape)} (pooling grid {self.grid_for(volume.shape)}), "
                    f"volume 0 of shape {first_shape} gives {self.embedding_dim(first_shape)} "
                    f"(grid {self.grid_for(first_shape)}): embeddings of different lengths cannot be "
                    "compared; put the volumes on one grid")
            if batch and (len(batch) == batch_size or volume.shape != batch[0].shape):
                out.append(self._embed_checked(batch))
                batch = []
            batch.append(volume)
        if batch:
            out.append(self._embed_checked(batch))
        if not out:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.concatenate(out, axis=0)

    def _embed_checked(self, batch: list[np.ndarray]) -> np.ndarray:
        embeddings = np.asarray(self.embed_batch(np.stack(batch)), dtype=np.float32)
        expected = (len(batch), self.embedding_dim(batch[0].shape))
        if embeddings.shape != expected:
            raise RuntimeError(f"extractor {self.name!r} returned shape {embeddings.shape} "
                               f"for {len(batch)} volume(s); expected {expected}")
        return embeddings


def _checked_volume(volume: np.ndarray, index: int) -> np.ndarray:
    array = np.asarray(volume, dtype=np.float32)
    if array.ndim != 3 or array.size == 0:
        raise ValueError(f"volume {index}: expected a non-empty 3D array, got shape {array.shape}")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"volume {index}: contains NaN or infinite values")
    return array


def zscore(volume: np.ndarray) -> np.ndarray:
    """``(v - mean) / std`` over all voxels, in float64 statistics; a constant volume gives zeros.

    RELICT z-scores every volume before encoding, so that embeddings do not depend
    on a global intensity offset or scale.
    """
    values = np.asarray(volume, dtype=np.float64)
    std = values.std()
    if std == 0:
        return np.zeros(values.shape, dtype=np.float32)
    return ((values - values.mean()) / std).astype(np.float32)


def as_grid(grid: int | Sequence[int]) -> tuple[int, int, int]:
    """A pooling grid from ``4`` or ``[4, 4, 4]`` (cells per axis X, Y, Z), each >= 1."""
    cells = (int(grid),) * 3 if np.ndim(grid) == 0 else tuple(int(g) for g in grid)
    if len(cells) != 3 or min(cells) < 1:
        raise ValueError(f"pooling grid must be a positive integer or three of them, got {grid!r}")
    return cells  # type: ignore[return-value]


def pooling_grid(map_shape: Sequence[int], grid: int | Sequence[int]) -> tuple[int, int, int]:
    """Cells per axis that average pooling of a ``map_shape`` map onto ``grid`` actually uses.

    The rule: pool only down. An axis whose feature map is already smaller than the
    requested number of cells keeps its map size, because adaptive pooling *up* would
    copy values into several cells (a 2-voxel axis pooled "to 4" is each value twice),
    which adds nothing but repeats those features in every distance. The grid used is
    recorded with the embeddings (``grid_used``) and in the metrics.
    """
    cells = as_grid(grid)
    if len(map_shape) != 3 or min(map_shape) < 1:
        raise ValueError(f"feature map must have three non-empty spatial axes, got {tuple(map_shape)}")
    return tuple(min(int(c), int(n)) for c, n in zip(cells, map_shape))  # type: ignore[return-value]


def conv_out(n: int, kernel: int, stride: int = 1, padding: int = 0, dilation: int = 1) -> int:
    """Output length of a convolution or pooling along one axis (PyTorch's floor rule)."""
    return (n + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


class PooledMapExtractor(Extractor):
    """A CNN embedding: normalise -> last feature map -> average-pool onto a grid -> flatten.

    Subclasses give the network (:meth:`feature_map`, returning ``(N, C, X, Y, Z)`` in
    the volume's axis order), its map size for an input shape (:meth:`map_shape`), the
    input conversion (:meth:`to_input`) and :attr:`channels`. Pooling never goes up
    (:func:`pooling_grid`); :meth:`embed_grids` pools one forward pass onto several
    grids (the feature-level study compares grids at the cost of one).
    """

    channels: int = 0
    grid: tuple[int, int, int] = (1, 1, 1)
    device: Any = None

    @abc.abstractmethod
    def map_shape(self, shape: Sequence[int]) -> tuple[int, int, int]:
        """Spatial size ``(x, y, z)`` of the last feature map for a volume of ``shape``."""

    @abc.abstractmethod
    def to_input(self, volumes: np.ndarray) -> Any:
        """``(B, X, Y, Z)`` volumes -> the network's input tensor (normalised, on the device)."""

    @abc.abstractmethod
    def feature_map(self, x: Any) -> Any:
        """The last convolutional map ``(N, C, x, y, z)`` of an input from :meth:`to_input`."""

    def grid_for(self, shape: Sequence[int]) -> tuple[int, int, int]:
        return pooling_grid(self.map_shape(tuple(shape)[-3:]), self.grid)

    def embedding_dim(self, shape: Sequence[int]) -> int:
        return self.channels * int(np.prod(self.grid_for(shape)))

    def embed_batch(self, volumes: np.ndarray) -> np.ndarray:
        return self.embed_grids(volumes, [self.grid])[0]

    def embed_grids(self, volumes: np.ndarray, grids: Sequence[int | Sequence[int]]) -> list[np.ndarray]:
        """One forward pass, pooled onto each of ``grids`` (only down): ``[(B, C * cells)]``."""
        import torch
        import torch.nn.functional as F

        with torch.inference_mode():
            fmap = self.feature_map(self.to_input(np.asarray(volumes, dtype=np.float32)))
            expected = self.map_shape(volumes.shape[1:])
            if tuple(fmap.shape[2:]) != expected:
                raise RuntimeError(f"{self.label}: feature map {tuple(fmap.shape[2:])} for input "
                                   f"{volumes.shape[1:]}, expected {expected}")
            out = []
            for grid in grids:
                cells = pooling_grid(expected, grid)
                pooled = fmap if cells == expected else F.adaptive_avg_pool3d(fmap, cells)
                out.append(pooled.flatten(1).float().cpu().numpy())
        return out


class _Wrapper(Extractor):
    """An extractor around another one: same provenance, same pooling geometry."""

    def __init__(self, inner: Extractor):
        self.inner = inner
        self.name, self.dim, self.trained = inner.name, inner.dim, inner.trained
        self.seed, self.weights, self.weights_sha256 = inner.seed, inner.weights, inner.weights_sha256

    def grid_for(self, shape: tuple[int, ...]) -> tuple[int, int, int] | None:
        return self.inner.grid_for(shape)

    def embedding_dim(self, shape: tuple[int, ...]) -> int:
        return self.inner.embedding_dim(shape)

    def __getattr__(self, attribute: str) -> Any:  # map_shape, channels, device, ... of the inner one
        if attribute == "inner":
            raise AttributeError(attribute)
        return getattr(self.inner, attribute)


class SmoothedInput(_Wrapper):
    """Gaussian smoothing of every volume (sigma in voxels of its grid) before it is encoded.

    Why: a CNN's embedding responds to voxel-level texture. On the demo's NCCT cohort
    (2 mm grid), white noise of 9 HU added to a training scan (no other change) moved
    its untrained ResNet-50 embedding as far, relative to its other neighbours, as a new
    patient's: embedding-RMSE ratio 0.95, the held-out patients' median 0.94.
    Generators change noise texture all the time (smoother samples, other noise), so a
    replica must not be judged on it. A Gaussian of about one voxel removes voxel noise
    and keeps the structures the preprocessing grid was chosen to resolve: the same
    noisy copies then had ratio 0.67 (held-out minimum 0.84). The sigma is in voxels
    because noise lives at the voxel scale whatever the spacing. RELICT encodes the raw
    volume (``relict.features.smoothing_voxels: 0``); the feature-level study measures both.
    """

    def __init__(self, inner: Extractor, sigma_voxels: float):
        super().__init__(inner)
        if not float(sigma_voxels) > 0:
            raise ValueError(f"smoothing needs sigma_voxels > 0, got {sigma_voxels}")
        self.sigma_voxels = float(sigma_voxels)
        self.label = f"{inner.label}, input smoothed (sigma {self.sigma_voxels:g} voxel)"

    def options(self) -> dict[str, Any]:
        return {**self.inner.options(), "smoothing_voxels": self.sigma_voxels}

    def smooth(self, volumes: np.ndarray) -> np.ndarray:
        from scipy import ndimage

        return np.stack([ndimage.gaussian_filter(np.asarray(v, np.float32), self.sigma_voxels, mode="nearest")
                         for v in volumes])

    def embed_batch(self, volumes: np.ndarray) -> np.ndarray:
        return self.inner.embed_batch(self.smooth(volumes))

    def embed_grids(self, volumes: np.ndarray, grids: Sequence[Any]) -> list[np.ndarray]:
        return self.inner.embed_grids(self.smooth(volumes), grids)


class FlipPooled(_Wrapper):
    """Test-time augmentation: the mean embedding over every flip of the given axes.

    Why: a generator trained with flips can emit a mirrored patient; a CNN embedding of the
    mirror differs from the original's, so the feature level misses it. The mean over the
    flip group's orbit is exactly invariant to those flips (replicas under augmentation,
    relict.features.tta_flip_axes). Costs one forward pass per group element.
    """

    def __init__(self, inner: Extractor, axes: Iterable[int]):
        import itertools

        super().__init__(inner)
        self.axes = tuple(sorted(set(int(a) for a in axes)))
        if not self.axes or any(a not in (0, 1, 2) for a in self.axes):
            raise ValueError(f"flip axes must be a non-empty subset of 0, 1, 2; got {list(axes)}")
        self.group = [c for r in range(len(self.axes) + 1) for c in itertools.combinations(self.axes, r)]
        self.label = f"{inner.label}, mean over flips of axes {''.join(map(str, self.axes))}"

    def options(self) -> dict[str, Any]:
        return {**self.inner.options(), "tta_flip_axes": list(self.axes)}

    def embed_batch(self, volumes: np.ndarray) -> np.ndarray:
        total = 0.0
        for flips in self.group:
            batch = np.ascontiguousarray(np.flip(volumes, axis=tuple(a + 1 for a in flips))) if flips else volumes
            total = total + np.asarray(self.inner.embed_batch(batch), np.float64)
        return (total / len(self.group)).astype(np.float32)
