"""Calibrating a privacy filter and the tripartite evaluation of its decisions.

Calibration (Dombrowski et al. 4.2, after Dar et al.): tau is the ``percentile``-th
percentile of the best score between held-out real scans and the training scans; a
synthetic volume is flagged when its best score against any training scan is above tau,
and attributed to that scan's patient. The original implementations differ in the
direction of the best score (per held-out scan over the training set, or per training
scan over the held-out set), so both are offered.

The tripartite evaluation (Koeken et al.) asks three questions of those decisions:

* **sensitivity** - half of each multi-scan patient's scans join the reference pool, the
  other half is presented as synthetic; the flag rate under three pools: ``overall``
  (best over the whole pool), ``same_patient_max`` and ``same_patient_mean`` (only the
  patient's own reference scans, by their maximum and mean score). When the overall rate
  is far above the same-patient ones, the filter flags by spurious matches to other
  patients, not by recognising the patient.
* **specificity** - the flag rate of held-out patients' scans, who cannot be in the
  training set. Each held-out patient is judged with a tau calibrated without that
  patient (leave one patient out), since with the calibration scans themselves the rate
  is (100 - percentile)% by construction.
* **consistency** - see :func:`.metrics.agreement` (N filters, one synthetic set).

All functions take score matrices whose entries are similarities (higher = more alike).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

import numpy as np

from .data import half_split

DIRECTIONS = ("heldout_to_training", "training_to_heldout")


def calibrate(heldout_vs_training: np.ndarray, direction: str, percentile: float) -> float:
    """tau from an (H, T) score matrix, held-out rows x training columns."""
    s = np.asarray(heldout_vs_training, np.float64)
    if s.ndim != 2 or 0 in s.shape:
        raise ValueError(f"calibration needs held-out and training scans, got a score matrix of shape {s.shape}")
    if direction not in DIRECTIONS:
        raise ValueError(f"calibration direction {direction!r}: choose one of {list(DIRECTIONS)}")
    best = s.max(axis=1) if direction == "heldout_to_training" else s.max(axis=0)
    return float(np.percentile(best, percentile))


def leave_one_patient_out(heldout_vs_training: np.ndarray, heldout_patients: Sequence[str], direction: str,
                          percentile: float) -> dict[str, float]:
    """tau for each held-out patient, calibrated on the other held-out patients only.

    Raises:
        ValueError: Fewer than two held-out patients (nothing left to calibrate on).
    """
    patients = np.asarray(heldout_patients)
    unique = sorted(set(patients.tolist()))
    if len(unique) < 2:
        raise ValueError("leave-one-patient-out calibration needs at least two held-out patients")
    return {p: calibrate(heldout_vs_training[patients != p], direction, percentile) for p in unique}


def decide(syn_vs_training: np.ndarray, tau: float, training_ids: Sequence[str],
           training_patients: Sequence[str]) -> dict[str, np.ndarray]:
    """Flag each synthetic row whose best training score is above tau.

    Returns arrays: ``best`` score, ``match`` (training scan id), ``patient`` (its
    patient) and ``flagged`` (bool).
    """
    s = np.asarray(syn_vs_training, np.float64)
    arg = s.argmax(axis=1)
    best = s[np.arange(len(s)), arg]
    return {"best": best, "match": np.asarray(training_ids)[arg], "patient": np.asarray(training_patients)[arg],
            "flagged": best > tau}


def sensitivity(real_scores: np.ndarray, ids: Sequence[str], patients: Sequence[str], roles: Sequence[str],
                group: str, tau: float | Mapping[str, float]) -> dict | None:
    """Koeken et al.'s same-patient sensitivity on the multi-scan patients of one role.

    Args:
        real_scores: (N, N) scores among all real scans (rows presented, columns pool).
        group: ``"heldout"`` - patients the filter never saw; the pool is the training
            set plus their reference halves (Koeken's combined pool). ``"train"`` - the
            training patients (the case a filter exists for: a copy of a training
            patient); the pool is the training set without the presented halves.
        tau: One threshold, or one per patient (leave-one-patient-out).

    Returns:
        Flag rates for the three pools, how often the overall best match is the right
        patient, and counts; None when the group has no patient with two scans.
    """
    ids, patients, roles = list(ids), list(patients), list(roles)
    scans = defaultdict(list)
    for i, (p, r) in enumerate(zip(patients, roles)):
        if r == group:
            scans[p].append(i)
    multi = {p: idx for p, idx in scans.items() if len(idx) >= 2}
    if not multi:
        return None
    reference, presented = {}, {}
    for p, idx in multi.items():
        ref_ids, pres_ids = half_split([ids[i] for i in idx])
        reference[p] = [ids.index(s) for s in ref_ids]
        presented[p] = [ids.index(s) for s in pres_ids]
    train = [i for i, r in enumerate(roles) if r == "train"]
    shown = {i for idx in presented.values() for i in idx}
    if group == "train":
        pool = [i for i in train if i not in shown]
    else:
        pool = train + [i for idx in reference.values() for i in idx]
    pool = np.asarray(pool)
    pool_patients = np.asarray(patients)[pool]
    flags = {"overall": [], "same_patient_max": [], "same_patient_mean": []}
    correct = []
    for p, idx in sorted(multi.items()):
        t = tau[p] if isinstance(tau, Mapping) else tau
        for i in presented[p]:
            row = real_scores[i]
            flags["overall"].append(row[pool].max() > t)
            correct.append(pool_patients[int(np.argmax(row[pool]))] == p)
            own = row[reference[p]]
            flags["same_patient_max"].append(own.max() > t)
            flags["same_patient_mean"].append(own.mean() > t)
    out = {f"flag_rate_{k}": float(np.mean(v)) for k, v in flags.items()}
    out.update({"attribution_correct": float(np.mean(correct)), "n_patients": len(multi),
                "n_presented": len(correct), "n_pool": int(len(pool))})
    return out


def specificity(heldout_vs_training: np.ndarray, heldout_patients: Sequence[str], tau: float,
                lopo: Mapping[str, float] | None) -> dict:
    """Flag rates of held-out real scans against the training set: with each patient's
    leave-one-patient-out tau (the honest estimate) and with the calibrated tau (what
    the calibration fixes by construction: about 100 - percentile %)."""
    best = np.asarray(heldout_vs_training, np.float64).max(axis=1)
    out = {"n_heldout": int(len(best)), "flag_rate_calibration_tau": float(np.mean(best > tau))}
    if lopo is not None:
        flagged = np.array([b > lopo[p] for b, p in zip(best, heldout_patients)])
        out["flag_rate"] = float(flagged.mean())
        out["specificity"] = 1.0 - out["flag_rate"]
    else:
        out["flag_rate"] = out["specificity"] = None
    return out


def truth_flags(best: Sequence[float], truth: Sequence[Mapping], tau: float,
                lopo: Mapping[str, float] | None) -> np.ndarray:
    """Flags for judging a spiked set against its truth: replicas with the calibrated tau;
    a non-replica made from a held-out patient's scan with that patient's leave-one-patient-out
    tau, so that no scan calibrates the decision on itself (its flag rate would otherwise be
    about 100 - percentile % by construction). Without a leave-one-out tau: the calibrated one."""
    best = np.asarray(best, np.float64)
    lopo = lopo or {}
    taus = [tau if t["kind"] == "replica" else lopo.get(t.get("source_patient"), tau) for t in truth]
    return best > np.asarray(taus, np.float64)


def near_duplicates(flagged: Sequence[bool], attributed: Sequence[str], truth: Sequence[Mapping]) -> dict:
    """Sensitivity on synthetic volumes with a known source (the spiked set): the flag
    rate of replicas, how often the flagged replica is attributed to its source patient,
    and the flag rate of non-replicas (held-out scans: false positives). The caller judges
    each non-replica with a tau calibrated without its source patient, so that its flag
    rate is measured rather than fixed at 100 - percentile % by the calibration.

    Args:
        truth: Per synthetic volume ``{"kind": "replica" | "nonreplica", "source_patient": ...}``.
    """
    flagged = np.asarray(flagged, bool)
    kinds = np.array([t["kind"] for t in truth])
    replica = kinds == "replica"
    right = np.array([a == t.get("source_patient") for a, t in zip(attributed, truth)])
    return {
        "n_replicas": int(replica.sum()), "n_nonreplicas": int((~replica).sum()),
        "replica_flag_rate": float(flagged[replica].mean()) if replica.any() else None,
        "replica_attribution_correct": float(right[replica].mean()) if replica.any() else None,
        "replica_flagged_and_attributed": float((flagged & right)[replica].mean()) if replica.any() else None,
        "nonreplica_flag_rate": float(flagged[~replica].mean()) if (~replica).any() else None,
    }


def balanced_pairs(same: Sequence[bool], seed: int) -> np.ndarray:
    """Indices of a balanced pair set: every positive pair and a seeded equal-size sample of negatives.

    Packhäuser et al. report accuracy, precision, recall and F1 on balanced test pairs; on
    all pairs of held-out scans (about one positive to eight negatives on the demo) the same
    network's precision and F1 would be much lower and not comparable with the paper's.
    With fewer negatives than positives, every pair is kept.
    """
    same = np.asarray(same, bool)
    positives, negatives = np.flatnonzero(same), np.flatnonzero(~same)
    if len(negatives) > len(positives):
        negatives = np.sort(np.random.default_rng(seed).choice(negatives, len(positives), replace=False))
    return np.sort(np.concatenate([positives, negatives]))


def verification_pairs(ids: Sequence[str], patients: Sequence[str], rows: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Every unordered pair among ``rows`` (indices of real scans) and whether it is one patient."""
    rows = list(rows)
    pairs = np.array([(a, b) for k, a in enumerate(rows) for b in rows[k + 1 :]], np.int64).reshape(-1, 2)
    same = np.array([patients[a] == patients[b] for a, b in pairs], bool)
    return pairs, same
