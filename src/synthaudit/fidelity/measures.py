"""Fidelity measures on embeddings: Fréchet distance, PRDC, α-precision / β-recall / authenticity, C_T.

Why on the feature level's embeddings: the audit already holds one embedding per training,
held-out and synthetic volume (relict.features, hashed weights); fidelity reuses them, so the
answer to "are the samples any good?" costs no second extraction and uses the same encoder as the
answer to "do they copy patients?".

Every function takes ``(n, d)`` arrays (rows = volumes) and is deterministic (no threads, no
random state but the seeds given), so that its numbers are the same bits on every CPU the
workflow's portable numerics allow.

- :func:`frechet_distance`: ``|mu_a - mu_b|^2 + tr S_a + tr S_b - 2 tr sqrt(S_a S_b)`` (Heusel et al.
  2017; MONAI's FIDMetric, pytorch-fid). With n << d the covariances have rank < n, and
  ``tr sqrt(S_a S_b)`` equals the nuclear norm of ``A B^T / sqrt((n_a - 1)(n_b - 1))`` for the
  centred data A, B (the non-zero eigenvalues of ``A^T A B^T B`` are the squared singular values of
  ``A B^T``): exact, and an (n_a x n_b) SVD instead of a (d x d) matrix square root.
- :func:`prdc`: precision, recall, density, coverage (Naeem et al., ICML 2020), as their ``prdc``
  package computes them (k-th nearest-neighbour balls, ``<`` comparisons).
- :func:`alpha_beta_authenticity`: α-precision, β-coverage (Alaa et al., ICML 2022) as their
  reference code computes the curves and their integrated Δ scores, on the embeddings centred on
  the real mean (no one-class network: docs/deviations.md), and authenticity per synthetic sample
  as the paper defines it.
- :func:`c_t`: Meehan et al.'s data-copying statistic (AISTATS 2020): per cell of a k-means
  partition of the training embeddings, the Z-scored Mann-Whitney U of generated-to-training
  against held-out-to-training nearest distances; C_T is their average weighted by the held-out
  share of each cell, over cells holding more than ``tau`` of the generated samples. Z << 0: copying.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def _matrix(x, name: str) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    if a.ndim != 2 or a.shape[0] < 2 or not np.isfinite(a).all():
        raise ValueError(f"{name}: need a finite (n >= 2, d) array, got shape {a.shape}")
    return a


def squared_distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``(n_a, n_b)`` squared Euclidean distances, computed directly (no |a|^2 + |b|^2 - 2ab
    cancellation: fidelity compares near neighbours, exactly the pairs where it would bite)."""
    out = np.empty((len(a), len(b)))
    for i in range(len(a)):
        d = b - a[i]
        out[i] = np.einsum("ij,ij->i", d, d)
    return out


def frechet_distance(a, b) -> float:
    """Fréchet distance between Gaussians fitted to the rows of ``a`` and ``b`` (sample
    covariances, n - 1), exact for any n and d (module docstring)."""
    a, b = _matrix(a, "first set"), _matrix(b, "second set")
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"embeddings of different lengths: {a.shape[1]} and {b.shape[1]}")
    mu_a, mu_b = a.mean(axis=0), b.mean(axis=0)
    ca, cb = a - mu_a, b - mu_b
    tr_a = float(np.einsum("ij,ij->", ca, ca)) / (len(a) - 1)
    tr_b = float(np.einsum("ij,ij->", cb, cb)) / (len(b) - 1)
    cross = np.linalg.svd(ca @ cb.T, compute_uv=False).sum() / np.sqrt((len(a) - 1) * (len(b) - 1))
    diff = mu_a - mu_b
    return float(max(diff @ diff + tr_a + tr_b - 2.0 * cross, 0.0))


def distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``(n_a, n_b)`` Euclidean distances (:func:`squared_distances`, then the root)."""
    return np.sqrt(squared_distances(np.asarray(a, np.float64), np.asarray(b, np.float64)))


def same_patient(patients) -> np.ndarray | None:
    """``(n, n)``: True where two rows are scans of one patient (the diagonal included); None where
    ``patients`` is None or names every row once (then a row's only own scan is itself)."""
    if patients is None:
        return None
    p = np.asarray([str(x) for x in patients])
    if len(np.unique(p)) == len(p):
        return None
    return p[:, None] == p[None, :]


def _kth_radius(d: np.ndarray, k: int, patients=None) -> np.ndarray:
    """Distance to the k-th nearest point of another patient, from a square distance matrix.

    Leave-patient-out (issue 63): a training set holds a baseline and a follow-up of one patient, and a
    scan's nearest neighbour is then its own patient's other scan; that distance measures a rescan, not
    how the data fills the space, and made every ball as small as a rescan. ``patients``: each row's
    patient; None or all distinct: the k-th nearest other point (column 0 is the point itself, as
    Naeem et al.'s code), the same bits as before."""
    same = same_patient(patients)
    if same is None:
        return np.sort(d, axis=1)[:, k]
    others = (~same).sum(axis=1)
    if (others < k).any():
        raise ValueError(f"prdc: k = {k} needs k scans of other patients for every scan (fewest: {others.min()})")
    return np.sort(np.where(same, np.inf, d), axis=1)[:, k - 1]


def prdc(real, fake, k: int = 5, *, rr: np.ndarray | None = None, ff: np.ndarray | None = None,
         rf: np.ndarray | None = None, real_patients=None, fake_patients=None) -> dict[str, float]:
    """Precision, recall, density and coverage of ``fake`` against ``real`` (Naeem et al. 2020).

    ``rr``, ``ff``, ``rf``: the real-real, fake-fake and real-fake :func:`distances`, where the
    caller holds them already (a bootstrap takes rows and columns of one matrix per replicate).
    ``real_patients``, ``fake_patients``: each row's patient; a k-NN radius then leaves the row's own
    patient out (:func:`_kth_radius`; None: each row is its own patient, Naeem et al.'s radii)."""
    real, fake = _matrix(real, "real set"), _matrix(fake, "synthetic set")
    if not 1 <= k < min(len(real), len(fake)):
        raise ValueError(f"prdc: k = {k} needs more than k real and synthetic embeddings "
                         f"({len(real)} and {len(fake)})")
    r_real = _kth_radius(distances(real, real) if rr is None else rr, k, real_patients)
    r_fake = _kth_radius(distances(fake, fake) if ff is None else ff, k, fake_patients)
    d = distances(real, fake) if rf is None else rf  # (real, fake)
    inside = d < r_real[:, None]
    return {"precision": float(inside.any(axis=0).mean()),
            "recall": float((d < r_fake[None, :]).any(axis=1).mean()),
            "density": float(inside.sum(axis=0).mean() / k),
            "coverage": float((d.min(axis=1) < r_real).mean())}


@dataclass(frozen=True)
class RealSet:
    """The real embeddings (float64, checked) and what :func:`alpha_beta_authenticity` derives from them
    alone: their mean, the α-quantile radii around it, each one's nearest-real distance.

    Why: a bootstrap resamples the other set only, against the whole real set, so these are the same in
    every replicate; computed once (:func:`real_set`) they cost one pass instead of one per replicate (the
    demo's 131,072-long embeddings: most of the fidelity job), with the same operations on the same
    arrays, so the same bits."""

    x: np.ndarray
    alphas: np.ndarray
    centre: np.ndarray
    radii: np.ndarray
    nn: np.ndarray

    def to_centre(self, fake: np.ndarray) -> np.ndarray:
        """Each row's distance to the real mean (rows are reduced one by one: a subset of rows gets the
        same bits as the whole set's rows)."""
        return np.sqrt(((fake - self.centre) ** 2).sum(axis=1))


def real_set(real, n_steps: int = 30, *, rr: np.ndarray | None = None, patients=None) -> RealSet:
    """:class:`RealSet` of ``real`` for curves of ``n_steps`` points (``rr``: its :func:`distances`).

    ``patients``: each row's patient; a row's nearest real neighbour is then the nearest scan of another
    patient (leave-patient-out, issue 63: with a patient's rescan as the neighbour, a blurred copy lies
    farther than it and counts as authentic, and β-coverage finds almost no real scan covered). None or
    all distinct: the nearest other row (Alaa et al.), the same bits as before."""
    real = _matrix(real, "real set")
    alphas = np.linspace(0.0, 1.0, n_steps)
    centre = real.mean(axis=0)
    radii = np.quantile(np.sqrt(((real - centre) ** 2).sum(axis=1)), alphas)
    rr = (distances(real, real) if rr is None else rr).copy()
    same = same_patient(patients)
    if same is None:
        np.fill_diagonal(rr, np.inf)
    else:
        rr[same] = np.inf
    nn = rr.min(axis=1)
    if not np.isfinite(nn).all():
        raise ValueError("the real set holds scans of one patient only: no scan has a neighbour of another patient")
    return RealSet(real, alphas, centre, radii, nn)


def alpha_beta_authenticity(real, fake, n_steps: int = 30, *, rr: np.ndarray | None = None,
                            rf: np.ndarray | None = None, fake_to_centre: np.ndarray | None = None,
                            patients=None) -> dict:
    """α-precision and β-coverage curves with their Δ scores, and authenticity (Alaa et al. 2022).

    Curves as the authors' reference code (``compute_alpha_precision``): α-support = the ball
    around the real mean holding an α share of the real embeddings; β-coverage counts real
    embeddings whose nearest synthetic one is nearer than their nearest real neighbour and lies in
    the β-quantile ball around the synthetic mean. Authenticity per synthetic sample j (the paper's
    definition): its nearest real embedding i is farther from j than from i's own nearest real
    neighbour; ``authentic`` lists it per synthetic row. ``rr``, ``rf``: as :func:`prdc`'s.
    ``real``: an array, or its :class:`RealSet` where the caller computes many sets against one real
    set (``n_steps``, ``rr`` and ``patients`` are then its); ``fake_to_centre``: ``real.to_centre`` of
    ``fake``'s rows, where the caller holds them; ``patients``: each real row's patient (:func:`real_set`:
    the nearest real neighbour is of another patient).

    Δ = 1 - 2 Σ|α - curve| Δα is the reference code's sum over all ``n_steps`` points, both ends included:
    a curve of zeros gives -1 / (n_steps - 1) (-0.0345 at 30), not 0, and that is its floor.
    """
    real = real if isinstance(real, RealSet) else real_set(real, n_steps, rr=rr, patients=patients)
    fake = _matrix(fake, "synthetic set")
    alphas = real.alphas
    fake_to_centre = real.to_centre(fake) if fake_to_centre is None else fake_to_centre
    real_nn = real.nn
    rf = distances(real.x, fake) if rf is None else rf
    real_to_fake, closest_fake = rf.min(axis=1), rf.argmin(axis=1)
    fake_centre = fake.mean(axis=0)
    closest_d = np.sqrt(((fake[closest_fake] - fake_centre) ** 2).sum(axis=1))
    fake_radii = np.quantile(closest_d, alphas)
    precision = (fake_to_centre[None, :] <= real.radii[:, None]).mean(axis=1)
    coverage = (((real_to_fake <= real_nn)[None, :]) & (closest_d[None, :] <= fake_radii[:, None])).mean(axis=1)
    step = alphas[1] - alphas[0]
    nearest_real = rf.argmin(axis=0)  # per synthetic sample
    authentic = rf[nearest_real, np.arange(len(fake))] > real_nn[nearest_real]
    return {"alpha_precision": float(1 - 2 * np.abs(alphas - precision).sum() * step),
            "beta_recall": float(1 - 2 * np.abs(alphas - coverage).sum() * step),
            "authenticity": float(authentic.mean()), "authentic": authentic.tolist(),
            "nearest_real": nearest_real.tolist(), "alphas": alphas.tolist(),
            "alpha_precision_curve": precision.tolist(), "beta_coverage_curve": coverage.tolist()}


def pca_fit(x: np.ndarray, n_components: int) -> tuple[np.ndarray, np.ndarray]:
    """Mean and the leading principal axes of ``x`` (at most rank - 1), signs fixed by the largest
    loading, so that the projection is deterministic."""
    mean = x.mean(axis=0)
    _, _, vt = np.linalg.svd(x - mean, full_matrices=False)
    axes = vt[: max(1, min(n_components, len(x) - 1))]
    signs = np.sign(axes[np.arange(len(axes)), np.abs(axes).argmax(axis=1)])
    return mean, axes * np.where(signs == 0, 1.0, signs)[:, None]


def kmeans(x: np.ndarray, k: int, seed: int, n_init: int = 10, max_iter: int = 300) -> np.ndarray:
    """Cluster centres of ``x`` by Lloyd's algorithm from seeded k-means++ starts (best inertia of
    ``n_init``): single-threaded NumPy, so the partition is the same on every machine."""
    rng = np.random.default_rng(seed)
    best, best_inertia = None, np.inf
    for _ in range(n_init):
        centres = [x[rng.integers(len(x))]]
        for _ in range(1, k):
            d2 = squared_distances(x, np.array(centres)).min(axis=1)
            p = d2 / d2.sum() if d2.sum() > 0 else np.full(len(x), 1.0 / len(x))
            centres.append(x[rng.choice(len(x), p=p)])
        c = np.array(centres)
        for _ in range(max_iter):
            label = squared_distances(x, c).argmin(axis=1)
            new = np.array([x[label == j].mean(axis=0) if (label == j).any() else c[j] for j in range(k)])
            if np.array_equal(new, c):
                break
            c = new
        inertia = squared_distances(x, c).min(axis=1).sum()
        if inertia < best_inertia:
            best, best_inertia = c, inertia
    return best


def mann_whitney_z(generated: np.ndarray, test: np.ndarray) -> float:
    """Meehan et al.'s Z_U: the Mann-Whitney U of ``generated`` (x) against ``test`` (y) distances,
    Z-scored under H0 with their continuity correction; Z << 0 means generated samples lie closer."""
    from scipy.stats import mannwhitneyu

    m, n = len(generated), len(test)
    u = mannwhitneyu(generated, test, alternative="less").statistic
    return float((u - (n * m / 2 - 0.5)) / np.sqrt(n * m * (n + m + 1) / 12))


def c_t_power(n_heldout: int, n_synthetic: int, n_cells: int, copy_share: float, copy_z: float) -> dict:
    """The probability that C_T falls below ``-copy_z`` when ``copy_share`` of the ``n_synthetic`` samples are
    exact copies and the rest are drawn like the ``n_heldout`` held-out scans (docs/fidelity.md, "Where C_T
    stops"): over ``n_cells`` equal cells its expectation is -q sqrt(3 m n / (k (m + n + k))), and a cell's
    Z_U has SD 1 under the null, so their held-out-weighted mean has SD 1 / sqrt(k); normal.

    Why: at tens of held-out scans C_T cannot detect even a fifth of the samples being copies, and a test
    that cannot detect what it tests must not read as "no copying" (issue 63). The measured table in
    docs/fidelity.md (20 replicates per row on real anatomy) follows this form on the safe side (its means
    were 10-22 % stronger from 1,000 volumes on): 300 + 300 volumes at 20 % copies, 90 % of replicates below
    -2 measured, 0.78 here; 6,000 + 6,000 at 5 %, 95 % measured, 0.90 here."""
    from math import erf, sqrt

    m, n, k = int(n_heldout), int(n_synthetic), max(1, int(n_cells))
    expected = -copy_share * sqrt(3.0 * m * n / (k * (m + n + k))) if m and n else 0.0
    z = (-copy_z - expected) * sqrt(k)
    return {"copy_share": float(copy_share), "expected_c_t": float(expected),
            "probability": float(0.5 * (1.0 + erf(z / sqrt(2.0)))), "n_heldout": m, "n_synthetic": n, "n_cells": k}


@dataclass
class CTResult:
    c_t: float | None
    cells: list[dict]
    n_cells: int
    tau: float


def c_t(train, test, generated, n_cells: int = 3, min_generated: int = 3, pca_components: int = 64,
        seed: int = 0) -> CTResult:
    """Meehan et al.'s C_T on embeddings: PCA to ``pca_components`` (fitted on the training set, as
    their reference code), k-means cells of the training set, per cell Z_U of generated against
    held-out ``test`` nearest-training distances, weighted by the test share; cells holding more than
    ``tau = min_generated / m`` of the generated samples count. ``n_cells`` shrinks until every cell
    holds a test and a training sample (their code refuses otherwise)."""
    train, test, generated = (_matrix(x, name) for x, name in ((train, "training set"), (test, "held-out set"),
                                                               (generated, "synthetic set")))
    mean, axes = pca_fit(train, pca_components)
    t, p, q = ((x - mean) @ axes.T for x in (train, test, generated))
    tau = min_generated / len(q)
    for k in range(min(n_cells, len(t)), 0, -1):
        centres = kmeans(t, k, seed)
        lt, lp, lq = (squared_distances(x, centres).argmin(axis=1) for x in (t, p, q))
        if all((lt == j).any() and (lp == j).any() for j in range(k)):
            break
    cells, num, den = [], 0.0, 0.0
    for j in range(k):
        tj, pj, qj = t[lt == j], p[lp == j], q[lq == j]
        share_q, share_p = len(qj) / len(q), len(pj) / len(p)
        z = None
        if len(qj):
            near = lambda x: np.sqrt(squared_distances(x, tj).min(axis=1))  # noqa: E731
            z = mann_whitney_z(near(qj), near(pj))
        counted = share_q > tau and z is not None
        if counted:
            num, den = num + share_p * z, den + share_p
        cells.append({"cell": j, "n_training": int(len(tj)), "n_heldout": int(len(pj)), "n_synthetic": int(len(qj)),
                      "z_u": z, "counted": bool(counted)})
    return CTResult(num / den if den > 0 else None, cells, k, tau)
