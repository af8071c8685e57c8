"""Black-box membership attacks: each scores a candidate scan from the released samples (and, for the
density ratio, a reference set of real non-members), higher meaning "more likely a training member".

The threat model (docs/membership.md): the attacker holds the released synthetic volumes and a candidate
patient's scan, never the generator, its weights or its loss (SecMI, PIA and FCRE need those). What the
attacker may fit is fitted on the samples or the reference set only, never on the training scans.

* :func:`closest_distance_scores`: the distance to the closest sample (DCR; "GAN-leaks" in Chen et al.,
  the AWS Clean Rooms and SDMetrics score): members sit closer to the samples a generator emits.
* :func:`density_ratio_scores`: DOMIAS (van Breugel et al., AISTATS 2023), p_synthetic(x) / p_reference(x)
  with Gaussian kernel densities (scipy's ``gaussian_kde``, Scott's bandwidth: the ``domias`` package's
  ``kde`` estimator) on embeddings reduced by a PCA of the samples. Computed as a log ratio (DOMIAS adds
  1e-10 to the denominator, which then decides the ranking wherever both densities are tiny, as they are
  in more than a few dimensions); the reference density leaves the candidate's own patient out.
* :func:`patient_scores`: patients, not scans, are members: a patient's score is its most member-like scan's.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def closest_distance_scores(distances: np.ndarray) -> np.ndarray:
    """Candidates x samples distances -> each candidate's score, minus its distance to the closest sample.

    Pairs that were not computed (non-finite: a shortlist search skipped them, being far) are ignored; a
    candidate with no computed pair scores -inf (nothing released lies near it)."""
    d = np.asarray(distances, dtype=np.float64)
    if d.ndim != 2 or d.shape[1] == 0:
        raise ValueError(f"distances must be candidates x samples with at least one sample, got shape {d.shape}")
    d = np.where(np.isfinite(d), d, np.inf)
    return -d.min(axis=1)


def kde_dimension(wanted: int, n_samples: int, n_reference: int) -> int:
    """The PCA dimension the densities are fitted in: ``wanted``, lowered to two below the smaller of the
    samples and the reference scans (a kernel density with Scott's bandwidth uses the data's covariance,
    singular unless the points outnumber the dimensions; the margin keeps it well conditioned)."""
    return max(1, min(int(wanted), int(n_samples) - 2, int(n_reference) - 2))


def log_kde(points: np.ndarray, at: np.ndarray) -> np.ndarray:
    """The log density at ``at`` (rows) of the Gaussian kernel density of ``points`` (rows) as scipy's
    ``gaussian_kde(points.T).logpdf(at.T)`` computes it (Scott's factor n^(-1/(d+4)) on the points' unbiased
    covariance; the same values to ~1e-12, tests/test_membership.py), in NumPy: scipy.stats costs a second to
    import in every job."""
    p, x = np.asarray(points, np.float64), np.asarray(at, np.float64)
    n, d = p.shape
    chol = np.linalg.cholesky(np.atleast_2d(np.cov(p, rowvar=False)) * n ** (-2.0 / (d + 4)))
    wp, wx = np.linalg.solve(chol, p.T).T, np.linalg.solve(chol, x.T).T  # whitened: the kernel is N(0, I)
    e = -0.5 * ((wx[:, None, :] - wp[None, :, :]) ** 2).sum(axis=2)
    top = e.max(axis=1)
    log_sum = top + np.log(np.exp(e - top[:, None]).sum(axis=1))
    return log_sum - np.log(n) - 0.5 * d * np.log(2 * np.pi) - np.log(np.diag(chol)).sum()


def principal_axes(x: np.ndarray, n_components: int) -> tuple[np.ndarray, np.ndarray]:
    """Mean and the leading principal axes of the rows of ``x`` (at most rank - 1), signs fixed by the largest
    loading: :func:`synthaudit.fidelity.measures.pca_fit`'s axes (to ~1e-12 at the few axes the density ratio
    keeps, tests/test_membership.py), from the rows' Gram matrix. An embedding has 10^5 features and a
    release tens of samples: the SVD of the samples x features matrix took 0.2-1 s per set, the Gram matrix
    and its eigenvectors a few milliseconds."""
    x = np.asarray(x, dtype=np.float64)
    mean = x.mean(axis=0)
    centred = x - mean
    values, vectors = np.linalg.eigh(centred @ centred.T)  # ascending: the singular values squared
    k = max(1, min(int(n_components), len(x) - 1))
    top = slice(len(values) - 1, len(values) - 1 - k, -1)
    axes = vectors[:, top].T @ centred  # each the singular value times its axis: scaled to unit length
    length = np.linalg.norm(axes, axis=1, keepdims=True)
    axes = np.divide(axes, length, out=np.zeros_like(axes), where=length > 0)
    signs = np.sign(axes[np.arange(len(axes)), np.abs(axes).argmax(axis=1)])
    return mean, axes * np.where(signs == 0, 1.0, signs)[:, None]


def density_ratio_scores(candidates: np.ndarray, samples: np.ndarray, reference: np.ndarray,
                         candidate_groups: Sequence[str] | None = None,
                         reference_groups: Sequence[str] | None = None, dimension: int = 5) -> np.ndarray:
    """DOMIAS's score per candidate: log p_samples(x) - log p_reference(x), both Gaussian KDEs (Scott's
    rule) in the samples' leading ``dimension`` principal axes (:func:`kde_dimension` may lower it).

    Leave-patient-out: with ``candidate_groups`` and ``reference_groups`` (patient ids), a candidate's
    reference density is fitted without the reference scans of its own patient, so a held-out candidate is
    not judged against itself. Without groups every candidate shares one reference density (the ``domias``
    package's setting; tests/test_membership.py compares the two)."""
    cand = np.asarray(candidates, dtype=np.float64)
    syn = np.asarray(samples, dtype=np.float64)
    ref = np.asarray(reference, dtype=np.float64)
    groups_c = list(candidate_groups) if candidate_groups is not None else [None] * len(cand)
    groups_r = np.asarray(list(reference_groups) if reference_groups is not None else [None] * len(ref), dtype=object)
    if len(groups_c) != len(cand) or len(groups_r) != len(ref):
        raise ValueError("candidate_groups and reference_groups must have one entry per row")
    def own(g):  # the reference scans of a candidate's patient, left out of its reference density
        return np.zeros(len(ref), bool) if g is None else groups_r == g

    smallest = min((len(ref) - int(own(g).sum()) for g in set(groups_c)), default=len(ref))
    dim = kde_dimension(dimension, len(syn), smallest)
    mean, axes = principal_axes(syn, dim)  # fitted on the release alone
    project = lambda x: (x - mean) @ axes.T  # noqa: E731
    c, s, r = project(cand), project(syn), project(ref)
    log_syn = log_kde(s, c)
    out = np.empty(len(cand))
    for g in dict.fromkeys(groups_c):
        rows = [i for i, x in enumerate(groups_c) if x == g]
        keep = ~own(g)
        if keep.sum() <= dim:
            raise ValueError(f"the reference set without patient {g!r} has {int(keep.sum())} scans, too few for a "
                             f"density in {dim} dimensions")
        out[rows] = log_syn[rows] - log_kde(r[keep], c[rows])
    return out


def patient_scores(scores: np.ndarray, patients: Sequence[str]) -> tuple[list[str], np.ndarray]:
    """Per patient (in order of first appearance) the highest score over its scans: a patient is a member
    when any of its scans trained the generator, and the attacker tries each scan it holds."""
    order = list(dict.fromkeys(patients))
    s = np.asarray(scores, dtype=np.float64)
    at = {p: i for i, p in enumerate(order)}
    out = np.full(len(order), -np.inf)
    for value, p in zip(s, patients):
        out[at[p]] = max(out[at[p]], value)
    return order, out
