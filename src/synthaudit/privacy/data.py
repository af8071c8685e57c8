"""What a privacy filter learns from: real scans with patient ids, in one input space.

Re-identification is learned from *pairs*: two scans of one patient (positive) and two
scans of different patients (negative). That needs patient ids and patients with at
least two scans, so the checks here refuse data without them, with a message that says
what is missing. Splits are patient-wise (Packhäuser et al.): no patient's scans sit on
both sides of a split, or verification would measure memory instead of re-identification.

An input space is the array a network sees: ``image`` (the preprocessed volume,
block-averaged by an integer factor to keep CPU training affordable) or ``latent`` (the
generator's autoencoder latent means). Each space carries a ``key`` naming exactly how it
was made (factor, or the autoencoder's file hash), so a filter is never applied to a
representation it was not trained on.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence

import numpy as np


class PrivacyDataError(ValueError):
    """Data a privacy filter cannot be trained or evaluated on (message says why)."""


def block_downsample(volume: np.ndarray, factor: int) -> np.ndarray:
    """Mean over ``factor``-sized blocks along every axis (edge-padded to a multiple)."""
    if factor < 1:
        raise ValueError(f"downsample factor must be >= 1, got {factor}")
    volume = np.asarray(volume, np.float32)
    if factor == 1:
        return volume
    pad = [(0, (-s) % factor) for s in volume.shape]
    v = np.pad(volume, pad, mode="edge")
    shape = []
    for s in v.shape:
        shape += [s // factor, factor]
    return v.reshape(shape).mean(axis=tuple(range(1, 2 * v.ndim, 2)))


def image_input(volume: np.ndarray, factor: int) -> np.ndarray:
    """One scan as the image-space network sees it: (1, *spatial), block-averaged by
    ``factor``; singleton axes dropped, so a 2D image stored as NIfTI gets a 2D backbone."""
    volume = np.asarray(volume, np.float32)
    spatial = [s for s in volume.shape if s != 1]
    if len(spatial) not in (2, 3):
        raise PrivacyDataError(f"an image of shape {list(volume.shape)} is neither 2D nor 3D")
    return block_downsample(volume.reshape(spatial), factor)[None]


def check_patients(ids: Sequence[str], patients: Sequence[str], roles: Sequence[str], where: str) -> None:
    """Refuse patient ids that cannot support re-identification.

    Raises:
        PrivacyDataError: lengths differ; an empty patient id; a scan id twice; a patient
            whose scans are in both the training and the held-out role (the split would
            not be patient-wise); no training patient with two scans (no positive pair).
    """
    if not (len(ids) == len(patients) == len(roles)):
        raise PrivacyDataError(f"{where}: {len(ids)} scan ids, {len(patients)} patient ids and {len(roles)} roles")
    missing = [i for i, p in zip(ids, patients) if not str(p).strip()]
    if missing:
        raise PrivacyDataError(f"{where}: scans without a patient id: {missing[:5]}; give the manifest's "
                               "patient_id column (scans of one patient share it)")
    twice = [i for i, n in Counter(ids).items() if n > 1]
    if twice:
        raise PrivacyDataError(f"{where}: scan ids listed more than once: {twice[:5]}")
    role_of = defaultdict(set)
    for p, r in zip(patients, roles):
        role_of[p].add(r)
    straddling = sorted(p for p, r in role_of.items() if len(r) > 1)
    if straddling:
        raise PrivacyDataError(f"{where}: patients with scans in both the training and the held-out set: "
                               f"{straddling[:5]}; a patient-wise split needs all of a patient's scans on one side")
    counts = Counter(p for p, r in zip(patients, roles) if r == "train")
    if not any(n >= 2 for n in counts.values()):
        raise PrivacyDataError(
            f"{where}: no training patient has two scans, so there is no positive pair to learn "
            "re-identification from; the filter needs patients with several scans (e.g. baseline and "
            "follow-up) sharing a patient_id in the manifest (a missing patient_id means one patient per scan)")


def patient_split(patients: Sequence[str], candidates: Sequence[int], fraction: float,
                  seed: int) -> tuple[list[int], list[int]]:
    """Split scan indices patient-wise: (training, validation).

    Validation patients are drawn among patients with at least two scans (they must give
    positive pairs): ``max(1, round(fraction * n))`` of them; single-scan patients stay in
    training, where they serve as negatives.

    Raises:
        PrivacyDataError: Fewer than two patients with two scans (nothing left to train on
            after taking one for validation).
    """
    by_patient = defaultdict(list)
    for i in candidates:
        by_patient[patients[i]].append(i)
    multi = sorted(p for p, idx in by_patient.items() if len(idx) >= 2)
    if len(multi) < 2:
        raise PrivacyDataError(
            f"{len(multi)} training patient(s) with two or more scans: a filter needs at least two "
            "(one to train on, one to validate on for early stopping)")
    n_val = min(len(multi) - 1, max(1, round(fraction * len(multi))))
    rng = np.random.default_rng(seed)
    val_patients = set(rng.choice(multi, size=n_val, replace=False).tolist())
    train = [i for i in candidates if patients[i] not in val_patients]
    val = [i for i in candidates if patients[i] in val_patients]
    return train, val


def positive_pairs(patients: Sequence[str], indices: Sequence[int]) -> np.ndarray:
    """Every pair of two scans of one patient among ``indices``: (P, 2) int array."""
    by_patient = defaultdict(list)
    for i in indices:
        by_patient[patients[i]].append(i)
    pairs = [(a, b) for idx in by_patient.values() for k, a in enumerate(idx) for b in idx[k + 1 :]]
    return np.array(pairs, dtype=np.int64).reshape(-1, 2)


def negative_pairs(patients: Sequence[str], indices: Sequence[int], n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` random pairs of scans of two different patients ("randomized negative pairs":
    drawn anew each epoch by the caller's generator)."""
    idx = np.asarray(indices, np.int64)
    pid = np.array([patients[i] for i in idx])
    if len(set(pid.tolist())) < 2:
        raise PrivacyDataError("negative pairs need scans of at least two patients")
    out = np.empty((n, 2), np.int64)
    filled = 0
    while filled < n:
        a = rng.integers(0, len(idx), size=2 * (n - filled) + 8)
        b = rng.integers(0, len(idx), size=len(a))
        keep = pid[a] != pid[b]
        take = np.stack([idx[a[keep]], idx[b[keep]]], axis=1)[: n - filled]
        out[filled : filled + len(take)] = take
        filled += len(take)
    return out


def half_split(scan_ids: Sequence[str]) -> tuple[list[str], list[str]]:
    """Koeken et al.'s sensitivity split of one patient's scans: the first half (by id,
    i.e. session order) goes to the reference pool, the rest is presented as synthetic."""
    ordered = sorted(scan_ids)
    k = math.floor(len(ordered) / 2)
    return ordered[:k], ordered[k:]


def standardise(x: np.ndarray, reference: np.ndarray, per_feature: bool = False):
    """Z-score ``x`` with the mean and standard deviation of ``reference`` (the training
    scans), so every set a filter sees (training, held-out, synthetic) is on one scale.

    Images and latents share one scale over all voxels (floats); ``per_feature`` z-scores
    each column of (N, F) feature vectors on its own (arrays), since a pretrained encoder's
    channels differ in scale by orders of magnitude. Constant columns are left centred."""
    if per_feature:
        mean = reference.mean(axis=0, dtype=np.float64)
        std = reference.std(axis=0, dtype=np.float64)
        if not (std > 0).any():
            raise PrivacyDataError("the training inputs are constant; nothing to learn from")
        std = np.where(std > 0, std, 1.0)
        return ((x - mean) / std).astype(np.float32), mean, std
    mean = float(reference.mean(dtype=np.float64))
    std = float(reference.std(dtype=np.float64))
    if not std > 0:
        raise PrivacyDataError("the training inputs are constant; nothing to learn from")
    return ((x - mean) / std).astype(np.float32), mean, std
