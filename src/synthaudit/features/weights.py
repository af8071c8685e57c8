"""Weights files: their SHA-256 (the record that travels with the embeddings) and a state dict read
and checked against the shapes the network expects."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..io import file_sha256  # noqa: F401 - the identity of a weight file in every output's provenance


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
