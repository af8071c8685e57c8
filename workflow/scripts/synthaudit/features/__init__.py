"""Feature extractors for feature-level replica detection (RELICT 2.3.2), by name.

RELICT encodes every volume with a pretrained 3D network and compares the
embeddings instead of the voxels. Which network is a scientific choice that users
must be able to change without editing synthaudit, so extractors live in a
registry:

* ``get_extractor("medicalnet_resnet50", weights=..., seed=0)`` builds a built-in;
* ``@register_extractor("mine")`` on a subclass of :class:`Extractor` adds one;
* ``get_extractor("my_package.my_module:make_extractor", **options)`` imports a
  user's module and calls the factory there, so a user's own extractor works
  from the configuration alone.

Every extractor describes itself (:meth:`Extractor.describe`): the weights' file
and SHA-256, whether it is trained at all and its seed. That record travels with
the embeddings (:mod:`synthaudit.features.compare`), so a result can always be
traced to the network that made it, and an untrained network is never mistaken
for a pretrained one: its label says "untrained".

This module imports neither torch nor MONAI at import time (the built-ins are
imported on first use), so comparing stored embeddings stays light.
"""

from __future__ import annotations

import abc
import hashlib
import importlib
import logging
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..devices import resolve_device  # noqa: F401  (re-exported for the extractors)

logger = logging.getLogger("synthaudit.features")

# Built-in extractors: name -> module that registers it (imported on first use).
_BUILTIN_MODULES = {
    "medicalnet_resnet50": "synthaudit.features.medicalnet",
    "astra_resnet152": "synthaudit.features.astra",
}
_REGISTRY: dict[str, Callable[..., Extractor]] = {}


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
        dim: Length of the embedding; independent of the volume shape.
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

    def describe(self) -> dict[str, Any]:
        """Provenance of the embeddings: stored next to them and shown in reports."""
        return {
            "name": self.name,
            "label": self.label,
            "weights": self.weights,
            "weights_sha256": self.weights_sha256,
            "trained": self.trained,
            "seed": self.seed,
            "dim": self.dim,
            "options": self.options(),
        }

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
        for index, volume in enumerate(volumes):
            volume = _checked_volume(volume, index)
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
        if embeddings.shape != (len(batch), self.dim):
            raise RuntimeError(f"extractor {self.name!r} returned shape {embeddings.shape} "
                               f"for {len(batch)} volume(s); expected {(len(batch), self.dim)}")
        return embeddings


def register_extractor(name: str) -> Callable[[Callable[..., Extractor]], Callable[..., Extractor]]:
    """Class (or factory) decorator: make ``get_extractor(name, **options)`` build it.

    Raises:
        ValueError: If ``name`` is taken by a different class or factory, or
            contains ``:`` (reserved for the ``module:factory`` form).
    """
    if not name or ":" in name:
        raise ValueError(f"invalid extractor name {name!r} (non-empty, without ':')")

    def decorate(factory: Callable[..., Extractor]) -> Callable[..., Extractor]:
        known = _REGISTRY.get(name)
        if known is not None and _qualname(known) != _qualname(factory):
            raise ValueError(f"extractor {name!r} is already registered ({_qualname(known)})")
        _REGISTRY[name] = factory
        return factory

    return decorate


def available_extractors() -> list[str]:
    """Names accepted by :func:`get_extractor` (besides ``module:factory`` paths)."""
    _import_builtins()
    return sorted(_REGISTRY)


def get_extractor(name: str, **options: Any) -> Extractor:
    """Build the extractor called ``name`` with ``options`` (the class's keyword arguments).

    Args:
        name: A registered name (:func:`available_extractors`) or
            ``"package.module:factory"``: a class or function in an importable
            module, called with ``options``; it must return an :class:`Extractor`.
        **options: Passed to the class or factory (e.g. ``weights``, ``seed``,
            ``device``).

    Returns:
        The extractor; its ``name`` is set to ``name``.

    Raises:
        KeyError: If no extractor has that name, or the module lacks the factory.
        ImportError: If the module of a ``module:factory`` name cannot be imported.
        TypeError: If the factory does not return an :class:`Extractor`.
    """
    if ":" in name:
        factory = _import_factory(name)
    else:
        _import_builtins()
        if name not in _REGISTRY:
            raise KeyError(f"extractor {name!r} does not exist; available: {sorted(_REGISTRY)} "
                           "(or give 'package.module:factory')")
        factory = _REGISTRY[name]
    extractor = factory(**options)
    if not isinstance(extractor, Extractor):
        raise TypeError(f"extractor {name!r}: {_qualname(factory)} returned "
                        f"{type(extractor).__name__}, not a synthaudit.features.Extractor")
    extractor.name = name
    return extractor


def _import_builtins() -> None:
    for module in _BUILTIN_MODULES.values():
        importlib.import_module(module)


def _import_factory(spec: str) -> Callable[..., Extractor]:
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ImportError(f"extractor {spec!r}: cannot import module {module_name!r} ({e})") from e
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise KeyError(f"extractor {spec!r} does not exist: module {module_name!r} "
                           f"has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"extractor {spec!r}: {attr!r} is not a class or function")
    return obj


def _qualname(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"


def _checked_volume(volume: np.ndarray, index: int) -> np.ndarray:
    array = np.asarray(volume, dtype=np.float32)
    if array.ndim != 3 or array.size == 0:
        raise ValueError(f"volume {index}: expected a non-empty 3D array, got shape {array.shape}")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"volume {index}: contains NaN or infinite values")
    return array


# ---------------------------------------------------------------------------
# Helpers shared by the torch-based extractors
# ---------------------------------------------------------------------------

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


def file_sha256(path: str | Path) -> str:
    """SHA-256 of a file: the identity of a weight file in every output's provenance."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def read_state_dict(path: str | Path) -> dict[str, Any]:
    """Read a PyTorch checkpoint's tensors, refusing anything but plain tensors.

    ``weights_only=True`` means a checkpoint cannot run code when loaded. Accepts
    a bare state dict or a dict with a ``state_dict`` entry (other entries, such
    as an optimiser state or metadata, are ignored), and strips the ``module.``
    prefix that ``nn.DataParallel`` adds to every key.

    Raises:
        FileNotFoundError: If ``path`` is not a file.
        ValueError: If the file is not a readable checkpoint of tensors; the
            message names the file.
    """
    import torch

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: weight file not found")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises pickle, zip and runtime errors for bad files
        raise ValueError(f"{path}: not a readable PyTorch checkpoint ({type(e).__name__}: {e})") from e
    if isinstance(checkpoint, Mapping) and isinstance(checkpoint.get("state_dict"), Mapping):
        checkpoint = checkpoint["state_dict"]
    if not isinstance(checkpoint, Mapping) or not checkpoint or not all(
            isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in checkpoint.items()):
        raise ValueError(f"{path}: expected a state dict (names -> tensors), "
                         f"optionally under a 'state_dict' key")
    return {k.removeprefix("module."): v for k, v in checkpoint.items()}


def check_state_dict(path: str | Path, expected: Mapping[str, tuple[int, ...]],
                     state: Mapping[str, Any], optional: Callable[[str], bool] = lambda key: False
                     ) -> list[str]:
    """Compare a checkpoint with the tensors a model needs; refuse gaps and shape errors.

    A network with some random layers still produces embeddings, silently
    meaningless ones; so every expected tensor must be present with its shape.

    Args:
        path: The checkpoint's file, for messages.
        expected: The model's tensor names and shapes.
        state: The checkpoint's tensors.
        optional: Returns True for expected names that may be missing.

    Returns:
        Sorted names in ``state`` that the model does not have (the caller decides
        whether extra tensors are acceptable).

    Raises:
        ValueError: Naming the file, the number of missing and mismatched tensors
            and the first few of each.
    """
    missing = [k for k in expected if k not in state and not optional(k)]
    mismatched = [f"{k} (file {tuple(state[k].shape)}, model {tuple(shape)})"
                  for k, shape in expected.items()
                  if k in state and tuple(state[k].shape) != tuple(shape)]
    if missing or mismatched:
        problems = []
        if missing:
            problems.append(f"{len(missing)} tensor(s) missing: {_first(missing)}")
        if mismatched:
            problems.append(f"{len(mismatched)} tensor(s) with a wrong shape: {_first(mismatched)}")
        raise ValueError(f"{path}: weights do not fit the network; " + "; ".join(problems))
    return sorted(k for k in state if k not in expected)


def _first(items: list[str], n: int = 5) -> str:
    shown = ", ".join(items[:n])
    return shown + (f", ... ({len(items) - n} more)" if len(items) > n else "")


class FlipPooled(Extractor):
    """Test-time augmentation: the mean embedding over every flip of the given axes.

    Why: a generator trained with flips can emit a mirrored patient; a CNN embedding of the
    mirror differs from the original's, so the feature level misses it. The mean over the
    flip group's orbit is exactly invariant to those flips (replicas under augmentation,
    relict.features.tta_flip_axes). Costs one forward pass per group element.
    """

    def __init__(self, inner: Extractor, axes: Iterable[int]):
        import itertools

        self.inner = inner
        self.axes = tuple(sorted(set(int(a) for a in axes)))
        if not self.axes or any(a not in (0, 1, 2) for a in self.axes):
            raise ValueError(f"flip axes must be a non-empty subset of 0, 1, 2; got {list(axes)}")
        self.group = [c for r in range(len(self.axes) + 1) for c in itertools.combinations(self.axes, r)]
        self.name, self.dim, self.trained = inner.name, inner.dim, inner.trained
        self.seed, self.weights, self.weights_sha256 = inner.seed, inner.weights, inner.weights_sha256
        self.label = f"{inner.label}, mean over flips of axes {''.join(map(str, self.axes))}"

    def options(self) -> dict[str, Any]:
        return {**self.inner.options(), "tta_flip_axes": list(self.axes)}

    def embed_batch(self, volumes: np.ndarray) -> np.ndarray:
        total = np.zeros((len(volumes), self.dim), np.float64)
        for flips in self.group:
            batch = np.ascontiguousarray(np.flip(volumes, axis=tuple(a + 1 for a in flips))) if flips else volumes
            total += np.asarray(self.inner.embed_batch(batch), np.float64)
        return (total / len(self.group)).astype(np.float32)
