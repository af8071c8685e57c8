"""All-pairs feature-level measures (RELICT 2.3.2) and the embeddings' files.

Embeddings are computed once per volume and stored, one ``.npz`` per dataset
split, together with the extractor's description; comparing is then a pair of
matrix products, cheap next to the image-level measures. The description makes a
stale file detectable: embeddings made by another extractor are refused rather
than compared with new ones.

Precision. RMSE uses ``|a - b|^2 = |a|^2 + |b|^2 - 2 a.b`` (one matrix product
for all pairs), in float64. That identity cancels badly when ``|a - b|`` is small
next to ``|a|`` - for replicas, exactly the pairs that matter, and for the
non-negative, similar embeddings of a CNN in general. Two measures keep it exact:
the vectors are first centred on the synthetic set's mean (distances do not
change; the norms shrink to the spread of the data), and the few pairs whose
squared distance is still below 1e-4 of the centred squared norms (where the
identity could lose more than about 1e-9 relative) are recomputed directly.
"""

from __future__ import annotations

import functools
import json
import os
import zipfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from synthaudit import registry
from synthaudit.io import atomic_path

MEASURES = tuple(registry.names("feature"))  # the registry's feature level

# Rows per block of the float64 matrix products (bounds the float64 copies in memory).
_BLOCK_BYTES = 64 << 20
# Pairs with d^2 below this fraction of |a'|^2 + |b'|^2 (centred) are recomputed directly.
_CANCELLATION = 1e-4


def all_pairs_feature_measures(synthetic: np.ndarray, training: np.ndarray,
                               measures: Sequence[str] = MEASURES) -> dict[str, np.ndarray]:
    """Compare every synthetic embedding with every training embedding.

    Args:
        synthetic: ``(S, D)`` embeddings of the synthetic volumes.
        training: ``(T, D)`` embeddings of the training volumes.
        measures: Any of :data:`MEASURES`:

            * ``emb_rmse``: ``sqrt(mean((a - b)**2))`` over the D features;
            * ``emb_cosine``: cosine similarity ``a.b / (|a| |b|)`` in [-1, 1]. A
              zero vector has no direction; its similarity to anything is
              defined as 0 (neither alike nor opposite).

    Returns:
        ``{measure: (S, T) float64}``, rows in the order of ``synthetic``.

    Raises:
        ValueError: On an unknown measure, arrays that are not 2D, different D,
            or NaN/inf values.
    """
    measures = _check_measures(measures)
    functions = {m: _registered_function(m) for m in measures}
    a = _as_matrix(synthetic, "synthetic")
    b = _as_matrix(training, "training")
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"embedding lengths differ: synthetic {a.shape[1]}, training {b.shape[1]}")
    n_features = a.shape[1]
    block = max(1, _BLOCK_BYTES // (8 * max(n_features, 1)))
    out = {m: np.zeros((a.shape[0], b.shape[0]), dtype=np.float64) for m in measures}
    if out[measures[0]].size == 0:
        return out
    # Any common centre leaves distances unchanged; the synthetic mean is cheap (S rows)
    # and as typical of the data as the training mean, which would cost a pass over T rows.
    centre = _mean_rows(a, block)
    for i in range(0, a.shape[0], block):
        rows = _Rows(a[i:i + block], centre)
        for j in range(0, b.shape[0], block):
            pair = BlockPair(rows, b[j:j + block], centre, n_features)
            cols = slice(j, j + pair.n_training)
            for m, function in functions.items():
                out[m][i:i + rows.n, cols] = function(pair)
    return out


class _Rows:
    """A block of synthetic embeddings: float64, centred, squared norms of both (computed once)."""

    def __init__(self, a: np.ndarray, centre: np.ndarray):
        self.a64 = a.astype(np.float64)
        self.n = len(self.a64)
        self.ac = self.a64 - centre
        self.a_sq = np.einsum("ij,ij->i", self.ac, self.ac)
        self.a_norm = np.sqrt(np.einsum("ij,ij->i", self.a64, self.a64))


class BlockPair:
    """A block of synthetic rows against a block of training rows: what the registered feature
    measures read, each quantity computed on first use and shared (float64 and centred copies of
    the training block, its norms)."""

    def __init__(self, rows: _Rows, b: np.ndarray, centre: np.ndarray, n_features: int):
        self.rows, self._b, self._centre, self.n_features = rows, b, centre, n_features
        self.n_training = len(b)

    @functools.cached_property
    def bc(self) -> np.ndarray:  # converted and centred in one pass
        return np.subtract(self._b, self._centre, dtype=np.float64)

    @functools.cached_property
    def b64(self) -> np.ndarray:
        return self._b.astype(np.float64)

    @functools.cached_property
    def b_norm(self) -> np.ndarray:
        return np.sqrt(np.einsum("ij,ij->i", self.b64, self.b64))


def embedding_rmse(pair: BlockPair) -> np.ndarray:
    """``emb_rmse``: ``sqrt(mean((a - b)**2))`` over the D features (RELICT 2.3.2), from the
    centred vectors (see the module docstring on precision)."""
    return np.sqrt(_squared_distances(pair.rows.ac, pair.bc, pair.rows.a_sq) / pair.n_features)


def embedding_cosine(pair: BlockPair) -> np.ndarray:
    """``emb_cosine``: ``a.b / (|a| |b|)`` in [-1, 1]; 0 for a zero vector (no direction)."""
    return _cosine(pair.rows.a64 @ pair.b64.T, pair.rows.a_norm, pair.b_norm)


def _registered_function(measure: str):
    """The function of this module that the registry names for an feature-level measure."""
    return registry.implementation(measure, globals(), __name__)


def _squared_distances(ac: np.ndarray, bc: np.ndarray, a_sq: np.ndarray) -> np.ndarray:
    b_sq = np.einsum("ij,ij->i", bc, bc)
    scale = a_sq[:, None] + b_sq[None, :]
    d2 = np.maximum(scale - 2.0 * (ac @ bc.T), 0.0)
    for r, c in zip(*np.nonzero(d2 < _CANCELLATION * scale)):
        diff = ac[r] - bc[c]
        d2[r, c] = diff @ diff
    return d2


SCALINGS = ("none", "feature", "length")


def standardise(synthetic: np.ndarray, training: np.ndarray, scaling: str = "none"
                ) -> tuple[np.ndarray, np.ndarray]:
    """Scale the embeddings' features before comparing them.

    ``"none"`` is RELICT (raw embeddings). ``"feature"`` divides every feature by its
    standard deviation over the *training* embeddings (a diagonal Mahalanobis
    distance): after a ReLU network and average pooling, features differ in spread by
    orders of magnitude, and the raw RMSE is then the distance in the few
    highest-variance features. Only training statistics are used, so a synthetic
    volume cannot change the scale it is measured on; a feature constant over the
    training set (SD 0) carries no information there and is left out.

    ``"length"`` divides every embedding by its length (L2 norm): what is compared is the
    embedding's direction. On real anatomy the length follows image statistics (contrast,
    blur, noise of the generator) more than the patient: on the real-anatomy T1 benchmark
    raw embedding RMSE scored AUC 0.44 without augmented copies, and 1.00 after this
    (docs/feature_study.md). Cosine similarity is unchanged by it; embedding RMSE becomes
    sqrt(2 (1 - cos) / D). A zero embedding (a constant volume) stays zero.
    """
    if scaling not in SCALINGS:
        raise ValueError(f"unknown feature scaling {scaling!r}; known: {', '.join(SCALINGS)}")
    if scaling == "none":
        return synthetic, training
    if scaling == "length":
        return _unit_length(synthetic), _unit_length(training)
    train = np.asarray(training, dtype=np.float64)
    sd = train.std(axis=0)
    keep = sd > 0
    return ((np.asarray(synthetic, dtype=np.float64)[:, keep] / sd[keep]).astype(np.float32),
            (train[:, keep] / sd[keep]).astype(np.float32))


def _unit_length(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    norm = np.linalg.norm(x, axis=1, keepdims=True)
    return np.divide(x, norm, out=np.zeros_like(x), where=norm > 0).astype(np.float32)


def _cosine(dots: np.ndarray, a_norm: np.ndarray, b_norm: np.ndarray) -> np.ndarray:
    norms = a_norm[:, None] * b_norm[None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        cos = np.where(norms > 0, dots / norms, 0.0)
    return np.clip(cos, -1.0, 1.0)


def _mean_rows(x: np.ndarray, block: int) -> np.ndarray:
    total = np.zeros(x.shape[1], dtype=np.float64)
    for j in range(0, x.shape[0], block):
        total += x[j:j + block].astype(np.float64).sum(axis=0)
    return total / max(x.shape[0], 1)


def _check_measures(measures: Sequence[str]) -> list[str]:
    return registry.check(measures, "feature")


def _as_matrix(x: np.ndarray, what: str) -> np.ndarray:
    x = np.asarray(x)
    if x.ndim != 2:
        raise ValueError(f"{what} embeddings must be 2D (volumes, features), got shape {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{what} embeddings contain NaN or infinite values")
    return x


# ---------------------------------------------------------------------------
# Embedding files
# ---------------------------------------------------------------------------

def save_embeddings(path: str | os.PathLike, ids: Iterable[str], embeddings: np.ndarray,
                    meta: dict[str, Any]) -> None:
    """Write one split's embeddings atomically as ``.npz``: ids, float32 embeddings, meta.

    Args:
        path: Output file (``.npz``).
        ids: One unique id per row of ``embeddings``.
        embeddings: ``(N, D)`` array.
        meta: The extractor's :meth:`~synthaudit.features.Extractor.describe`
            (stored as a JSON string, so the file loads without pickle).

    Raises:
        ValueError: If ids and rows differ in number, ids repeat, or the
            embeddings are not a finite 2D array.
    """
    ids = [str(i) for i in ids]
    embeddings = _as_matrix(embeddings, "stored").astype(np.float32)
    if len(ids) != embeddings.shape[0]:
        raise ValueError(f"{path}: {len(ids)} id(s) for {embeddings.shape[0]} embedding(s)")
    if len(set(ids)) != len(ids):
        raise ValueError(f"{path}: ids are not unique")
    with atomic_path(path, suffix=".npz") as tmp:
        np.savez(tmp, ids=np.array(ids, dtype=np.str_), embeddings=embeddings,
                 meta=np.array(json.dumps(meta, sort_keys=True)))


def load_embeddings(path: str | os.PathLike, expect_extractor: str | None = None
                    ) -> tuple[list[str], np.ndarray, dict[str, Any]]:
    """Read a file written by :func:`save_embeddings`.

    Args:
        path: The ``.npz`` file.
        expect_extractor: The configured extractor name; when given, a file
            made by another extractor is refused (it would be stale).

    Returns:
        ``(ids, embeddings (N, D) float32, meta)``.

    Raises:
        FileNotFoundError: If the file does not exist.
        ValueError: If it is not an embeddings file or was made by another
            extractor; the message names the file.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: embeddings file not found")
    try:
        with np.load(path, allow_pickle=False) as data:
            ids = [str(i) for i in data["ids"]]
            embeddings = np.asarray(data["embeddings"], dtype=np.float32)
            meta = json.loads(str(data["meta"]))
    except (OSError, EOFError, KeyError, ValueError, zipfile.BadZipFile) as e:
        raise ValueError(f"{path}: not an embeddings file ({type(e).__name__}: {e})") from e
    if embeddings.ndim != 2 or len(ids) != embeddings.shape[0]:
        raise ValueError(f"{path}: {len(ids)} id(s) for embeddings of shape {embeddings.shape}")
    if expect_extractor is not None and meta.get("name") != expect_extractor:
        raise ValueError(f"{path}: made by extractor {meta.get('name')!r}, but {expect_extractor!r} "
                         "is configured; recompute the embeddings")
    return ids, embeddings, meta


def undegraded_embeddings(texture_json: str, heldout_embeddings: str, heldout_scans: list[str],
                          matched_scans: list[str], ids: list[str]):
    """The matched null's embeddings read from the held-out scans' own, where the set's matched null
    left every scan as it is; ``None`` where it did not (then they are computed).

    Why: the matched null embeds a synthetic set's held-out scans again, once per set. When the samples
    look like scans (inside their range) or are a mixture, nothing is degraded, and each of those jobs
    recomputed the held-out embeddings: in the demo, every set (5 jobs, about 100 of its encoder's
    270 job-seconds). Reused only when the fit is none, every matched volume equals its held-out scan
    (voxels and affine) and the ids are the held-out file's, in its order (so the encoder's batches were
    the same); the caller writes them with the held-out file's meta, as the encoder would have.

    Returns:
        ``(embeddings, meta)`` or ``None``.
    """
    import json

    from ..io import load_volume
    from ..relict.texture import leaves_unchanged

    with open(texture_json) as f:
        if not leaves_unchanged(json.load(f)["degradation"]):
            return None
    held_ids, emb, meta = load_embeddings(heldout_embeddings)
    if held_ids != list(ids) or not len(ids) == len(heldout_scans) == len(matched_scans):
        return None
    for held, matched in zip(heldout_scans, matched_scans):
        (a, a_affine), (b, b_affine) = load_volume(held), load_volume(matched)  # float32, as the encoder reads them
        if not (np.array_equal(a, b) and np.array_equal(a_affine, b_affine)):
            return None
    return emb, meta
