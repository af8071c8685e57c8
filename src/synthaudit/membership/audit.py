"""One synthetic set's membership audit: who the members and non-members are, every attack's patient
scores, and what they show (:mod:`.evaluate`), as ``membership.json``, the per-patient table and the
verdict's lines.

Members and non-members: the training set's patients are the members (for a generator trained here on a
subset, only the patients with a scan in that subset); the held-out patients are the non-members. A
held-out patient whose scan was itself put into the synthetic set (the spiked sets' non-replicas: a
held-out scan standing for a new patient) is in the release and would be "found" by any attack: it is
left out of the non-members and counted in ``excluded``. A generator's real samples never do that.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from . import attacks, evaluate

LABELS = {"closest_mae": "distance to the closest sample (MAE)",
          "closest_rmse": "distance to the closest sample (RMSE)",
          "closest_emb_rmse": "distance to the closest sample in the encoder's embedding",
          "density_ratio": "DOMIAS density ratio on the embedding",
          **{f"filter_{s}": f"the re-identification filter's best score ({s} space)" for s in ("image", "latent",
                                                                                                "pretrained")}}
FPR_GRID = np.linspace(0.0, 1.0, 51)


@dataclass
class Candidates:
    """The scans the attacker tries, each with its patient and whether that patient is a member."""

    ids: list[str]
    patients: list[str]
    member: list[bool]
    excluded: dict[str, list[str]]  # reason -> patients left out

    @property
    def member_patients(self) -> list[str]:
        return list(dict.fromkeys(p for p, m in zip(self.patients, self.member) if m))

    @property
    def nonmember_patients(self) -> list[str]:
        return list(dict.fromkeys(p for p, m in zip(self.patients, self.member) if not m))


def candidates(train: Sequence[tuple[str, str]], heldout: Sequence[tuple[str, str]],
               trained_ids: Sequence[str] | None = None, released_patients: Sequence[str] = ()) -> Candidates:
    """Members: the patients of ``trained_ids`` (default: every training scan), each with all its training
    scans; non-members: the held-out patients but those in ``released_patients`` (a held-out scan of theirs
    is in the synthetic set). Training patients the generator never saw are left out (neither)."""
    trained = {i for i, _ in train} if trained_ids is None else set(trained_ids)
    member_patients = {p for i, p in train if i in trained}
    released = set(released_patients)
    ids, patients, member = [], [], []
    for i, p in train:
        if p in member_patients:
            ids.append(i), patients.append(p), member.append(True)
    for i, p in heldout:
        if p not in released and p not in member_patients:
            ids.append(i), patients.append(p), member.append(False)
    excluded = {}
    unseen = sorted({p for _, p in train} - member_patients)
    if unseen:
        excluded["training patients the generator was not trained on"] = unseen
    shown = sorted({p for _, p in heldout} & released)
    if shown:
        excluded["held-out patients whose scan is in the synthetic set (spiked non-replicas)"] = shown
    return Candidates(ids, patients, member, excluded)


def run_attacks(c: Candidates, distances: Mapping[str, np.ndarray], embedded: dict | None,
                settings: dict, precomputed: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Every attack's score per candidate scan: the closest sample by each image measure in ``distances``
    (candidates x samples) and, with ``embedded`` (``candidates``, ``samples``, ``reference`` rows and the
    reference's ``reference_patients``), by the embedding and DOMIAS's density ratio; ``precomputed`` scores
    (per candidate, in ``c.ids``' order: the re-identification filters') join as they are."""
    wanted = set(settings["attacks"])
    scores = {f"closest_{m}": attacks.closest_distance_scores(d) for m, d in distances.items()
              if f"closest_{m}" in wanted}
    if embedded is not None:
        from ..features.compare import all_pairs_feature_measures

        if "closest_emb_rmse" in wanted:
            d = all_pairs_feature_measures(embedded["candidates"], embedded["samples"], ["emb_rmse"])["emb_rmse"]
            scores["closest_emb_rmse"] = attacks.closest_distance_scores(d)
        if "density_ratio" in wanted:
            scores["density_ratio"] = attacks.density_ratio_scores(
                embedded["candidates"], embedded["samples"], embedded["reference"], c.patients,
                embedded["reference_patients"], settings["density_ratio"]["dimension"])
    for name, s in (precomputed or {}).items():
        if len(s) != len(c.ids):
            raise ValueError(f"attack {name}: {len(s)} scores for {len(c.ids)} candidate scans")
        scores[name] = np.asarray(s, dtype=np.float64)
    return scores


def evaluate_attacks(c: Candidates, scores: Mapping[str, np.ndarray], settings: dict) -> dict:
    """Each attack's AUC, advantage and TPR at the policy's FPRs on the patients' scores, with patient-bootstrap
    intervals, the ROC curve and its band, and the most exposed member patients."""
    b = settings["bootstrap"]
    members, nonmembers = c.member_patients, c.nonmember_patients
    out = {}
    for name, s in scores.items():
        order, per_patient = attacks.patient_scores(s, c.patients)
        at = dict(zip(order, per_patient))
        pos = np.array([at[p] for p in members])
        neg = np.array([at[p] for p in nonmembers])
        boot = evaluate.bootstrap(pos, neg, b["n"], b["seed"], b["level"], FPR_GRID)
        fpr, tpr = evaluate.roc_curve(pos, neg)
        ranked = sorted(zip(members, pos.tolist()), key=lambda x: (-x[1], x[0]))[:settings["exposed"]]
        out[name] = {
            "label": LABELS.get(name, name), "auc": evaluate.auc(pos, neg), "auc_ci": boot["auc_ci"],
            "advantage": evaluate.advantage(pos, neg), "advantage_ci": boot["advantage_ci"],
            "tpr_at_fpr": [evaluate.tpr_at_fpr(pos, neg, f) for f in settings["fpr"]],
            "roc": {"fpr": fpr, "tpr": tpr}, "band": boot["band"],
            "exposed": [{"patient": p, "score": v, "nonmembers_at_or_above": int(np.sum(neg >= v))}
                        for p, v in ranked],
        }
    return out


def audit(c: Candidates, distances: Mapping[str, np.ndarray], embedded: dict | None, settings: dict,
          n_synthetic: int, precomputed: Mapping[str, np.ndarray] | None = None) -> tuple[dict, dict[str, np.ndarray]]:
    """The set's ``membership.json`` content and the attacks' scores per candidate scan."""
    result = {"n_synthetic": int(n_synthetic), "members": len(c.member_patients),
              "nonmembers": len(c.nonmember_patients), "member_scans": int(sum(c.member)),
              "nonmember_scans": int(len(c.member) - sum(c.member)), "excluded": c.excluded,
              "level": settings["bootstrap"]["level"]}
    if not c.member_patients or not c.nonmember_patients:
        result["attacks"] = {}
        result["why_not"] = ("no member patients" if not c.member_patients else
                             "no non-member patients: every held-out patient is excluded or there are none")
        return result, {}
    scores = run_attacks(c, distances, embedded, settings, precomputed)
    result["attacks"] = evaluate_attacks(c, scores, settings)
    level = settings["bootstrap"]["level"]
    result["power"] = {f"{a:g}": evaluate.auc_power(a, result["members"], result["nonmembers"], level)
                       for a in settings["power_auc"]}
    result["strongest"] = max(result["attacks"], key=lambda k: (result["attacks"][k]["auc"], k)) \
        if result["attacks"] else None
    return result, scores


def patient_rows(c: Candidates, scores: Mapping[str, np.ndarray]) -> list[dict]:
    """One row per candidate patient: its role, its scans and each attack's patient score."""
    per = {name: dict(zip(*attacks.patient_scores(s, c.patients))) for name, s in scores.items()}
    rows = []
    for p in c.member_patients + c.nonmember_patients:
        scans = [i for i, q in zip(c.ids, c.patients) if q == p]
        rows.append({"patient_id": p, "role": "member" if p in set(c.member_patients) else "nonmember",
                     "scans": " ".join(scans), **{name: float(v[p]) for name, v in per.items()}})
    return rows


def _pct(x: float) -> str:
    return f"{100 * x:.0f} %"


def summary_lines(m: dict) -> list[str]:
    """The verdict's membership lines: the strongest attack and what it shows, each attack's numbers, and
    what this size can show."""
    head = "  membership inference (an attacker with a patient's scan and the samples only"
    if not m.get("attacks"):
        return [f"{head}): not run: {m.get('why_not', 'no attack ran')}"]
    a = m["attacks"][m["strongest"]]
    lo, hi = a["auc_ci"]
    sizes = f"{m['members']} member and {m['nonmembers']} non-member patients"
    if lo > 0.5:
        call = "members are told from non-members better than chance: the samples leak who trained the generator"
    elif hi < 0.5:
        call = "below chance (the non-members sit nearer the samples)"
    else:
        call = f"not distinguishable from chance with {m['nonmembers']} non-member patients"
    lines = [f"{head}; {sizes}): the strongest of {len(m['attacks'])} attacks, {a['label']}, AUC {a['auc']:.2f} "
             f"[{lo:.2f}, {hi:.2f}]: {call}"]
    for name, e in m["attacks"].items():
        t = e["tpr_at_fpr"][-1]
        at = _pct(t["fpr_used"]) + ("" if t["measurable"] else f" ({_pct(t['fpr'])} is not measurable)")
        lines.append(f"    {name}: AUC {e['auc']:.2f} [{e['auc_ci'][0]:.2f}, {e['auc_ci'][1]:.2f}], advantage "
                     f"{e['advantage']:.2f} [{e['advantage_ci'][0]:.2f}, {e['advantage_ci'][1]:.2f}], TPR at FPR {at}: "
                     f"{t['tpr']:.2f} ({t['true_positives']} of {t['members']} members, {t['false_positives']} of "
                     f"{t['nonmembers']} non-members)")
    if lo > 0.5 and a["exposed"]:
        lines.append("    most exposed members: " + ", ".join(
            f"{x['patient']} ({x['nonmembers_at_or_above']} non-members as high)" for x in a["exposed"][:5]))
    power = m.get("power") or {}
    if power:
        lines.append("    what this size can see: an interval above 0.5 with probability " + ", ".join(
            f"{v:.2f} for an attack of AUC {k}" for k, v in power.items()) + " (docs/membership.md: how many "
            "held-out patients a decision needs)")
    for why, patients in (m.get("excluded") or {}).items():
        lines.append(f"    left out: {len(patients)} {why}")
    return lines


def _r(x):
    return None if x is None else float(f"{x:.6g}")


def metrics_entry(m: dict) -> dict:
    """The tracked metrics of one set (results/metrics/membership.json), rounded to 6 significant digits."""
    out = {"members": m["members"], "nonmembers": m["nonmembers"]}
    for name, e in (m.get("attacks") or {}).items():
        t = e["tpr_at_fpr"]
        out[name] = {"auc": _r(e["auc"]), "auc_ci_low": _r(e["auc_ci"][0]), "auc_ci_high": _r(e["auc_ci"][1]),
                     "advantage": _r(e["advantage"]), "advantage_ci_low": _r(e["advantage_ci"][0]),
                     "advantage_ci_high": _r(e["advantage_ci"][1]),
                     **{f"tpr_at_fpr_{x['fpr']:g}": _r(x["tpr"]) for x in t},
                     **{f"fpr_used_{x['fpr']:g}": _r(x["fpr_used"]) for x in t}}
    return out
