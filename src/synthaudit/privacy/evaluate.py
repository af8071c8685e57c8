"""Everything a user needs to decide whether a privacy filter deserves trust, in one pass.

Given the real scans (training and held-out, with patient ids), the synthetic sets and
the trained networks of one input space, :func:`evaluate_space` computes:

* verification (Packhäuser et al.) of filter 0 on every pair of held-out scans - patients
  none of the filters saw - with the AUC of each score head; the threshold metrics
  (accuracy, specificity, recall, precision, F1) also on balanced pairs, as the paper
  reports them (every positive pair and a seeded equal-size sample of negatives); and
  retrieval metrics of the contrastive variant on the same scans;
* calibration: tau of every filter, from held-out vs training scores;
* the filter decisions for every synthetic volume (filter 0's best match, attributed
  patient and flag, and how many of the N filters flag it / agree on the patient);
* the tripartite evaluation (Koeken et al.): sensitivity under three pools, on held-out
  and on training patients, and on the spiked near-duplicates; specificity with
  leave-one-patient-out calibration; consistency across the N filters;
* recall with the filter's features (Dombrowski et al. 4.3).

Features are computed once per network and scan; every score is a matrix product away.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch

from ..relict.recall import generative_recall
from . import filtering, metrics
from .model import HEADS, SiameseNetwork, embed_all, score_matrix


def evaluate_space(real: Mapping, synthetic: Mapping, filters: Sequence[SiameseNetwork],
                   retrieval: SiameseNetwork | None, cfg: Mapping, truth: Mapping[str, Mapping] | None = None,
                   device: torch.device | str = "cpu") -> dict:
    """Evaluate the filters of one space (see the module docstring).

    Args:
        real: ``x`` (N, C, ...), ``ids``, ``patients``, ``roles`` (train / heldout).
        synthetic: ``x`` (S, C, ...), ``ids``, ``datasets`` (which synthetic set each is from).
        filters: The N filter networks (filter 0 first): verification networks, or
            contrastive (retrieval-objective) ones scored by ``cfg["calibration"]["head"]``.
        cfg: ``params.yaml``'s ``privacy`` block.
        truth: Per synthetic dataset, per volume id ``{"kind", "source_patient"}`` where known.

    Returns:
        A dict: ``summary`` (JSON-ready), ``decisions`` (rows), and arrays for figures
        (``roc``, ``features``, ``scores``).
    """
    ids = [str(i) for i in real["ids"]]
    patients = [str(p) for p in real["patients"]]
    roles = [str(r) for r in real["roles"]]
    train = [i for i, r in enumerate(roles) if r == "train"]
    held = [i for i, r in enumerate(roles) if r == "heldout"]
    if len(held) < 2:
        raise ValueError(f"calibration needs at least two held-out real scans, got {len(held)}")
    train_ids = [ids[i] for i in train]
    train_patients = [patients[i] for i in train]
    held_patients = [patients[i] for i in held]
    syn_ids = [str(i) for i in synthetic["ids"]]
    syn_sets = [str(d) for d in synthetic["datasets"]]
    cal = cfg["calibration"]
    head = cal["head"]

    # verification pairs: every pair of held-out scans (patients no filter saw), once
    pairs, same = filtering.verification_pairs(ids, patients, held)
    can_verify = bool(same.any() and (~same).any())
    flags, attributed, taus, per_filter = [], [], [], []
    first = None
    for k, model in enumerate(filters):
        f_real = embed_all(model, real["x"], torch.device(device))
        f_syn = embed_all(model, synthetic["x"], torch.device(device)) if len(syn_ids) else f_real[:0]
        r = score_matrix(model, f_real, f_real, head).numpy()
        s = score_matrix(model, f_syn, f_real[train], head).numpy() if len(syn_ids) else np.empty((0, len(train)))
        tau = filtering.calibrate(r[np.ix_(held, train)], cal["direction"], cal["percentile"])
        dec = filtering.decide(s, tau, train_ids, train_patients)
        flags.append(dec["flagged"])
        attributed.append(dec["patient"])
        taus.append(tau)
        if k == 0:
            first = {"f_real": f_real, "f_syn": f_syn, "r": r, "s": s, "tau": tau, "dec": dec, "model": model}
        per_filter.append({"filter": k, "tau": tau, **_filter_numbers(
            model, f_real, r, tau, dec, pairs, same if can_verify else None, cal, ids, patients, roles, held,
            train, syn_sets, syn_ids, truth)})

    summary: dict = {"head": head, "percentile": cal["percentile"], "direction": cal["direction"],
                     "n_filters": len(filters), "n_training_scans": len(train), "n_heldout_scans": len(held),
                     "tau": first["tau"], "tau_per_filter": taus, "per_filter": per_filter}

    # verification and retrieval on held-out patients (never seen in training)
    roc = {}
    if can_verify:
        model, f_real = first["model"], first["f_real"]
        vhead = _verification_head(model, head)
        vscore = _pair_scores(model, f_real, pairs, vhead)
        ver = dict(cfg["verification"])
        if vhead != "pred":  # a contrastive filter has no probability: its decision threshold is its tau
            ver["threshold"] = first["tau"]
        boot = ver["bootstrap"]
        unit = boot["unit"]
        pair_patients = (np.asarray(patients, dtype=object)[pairs[:, 0]], np.asarray(patients, dtype=object)[pairs[:, 1]])
        summary["verification"] = metrics.verification_metrics(
            vscore, same, threshold=ver["threshold"], n_bootstrap=boot["n"], seed=boot["seed"], level=boot["level"],
            unit=unit, pair_patients=pair_patients)
        summary["verification"]["auc_by_head"] = {
            h: metrics.roc_auc(_pair_scores(model, f_real, pairs, h), same)
            for h in HEADS if h != "pred" or model.head is not None}
        summary["verification"]["score_head"] = vhead
        summary["verification"]["pairs"] = "every pair of held-out scans"
        # Packhäuser et al.'s threshold metrics: balanced pairs (every positive, as many negatives)
        keep = filtering.balanced_pairs(same, ver["balanced_seed"])
        summary["verification_balanced"] = metrics.verification_metrics(
            vscore[keep], same[keep], threshold=ver["threshold"], n_bootstrap=boot["n"], seed=boot["seed"],
            level=boot["level"], unit=unit, pair_patients=(pair_patients[0][keep], pair_patients[1][keep]))
        summary["verification_balanced"]["pairs"] = "every positive pair and an equal-size seeded sample of negatives"
        fpr, tpr, _ = metrics.roc_curve(vscore, same)
        roc = {"fpr": fpr.tolist(), "tpr": tpr.tolist(), "auc": summary["verification"]["auc"]}
    else:
        summary["verification"] = None
        summary["verification_note"] = "no held-out patient with two scans (no positive pair) or only one patient"
    if retrieval is not None:
        f_ret = embed_all(retrieval, real["x"][held], torch.device(device))
        dist = torch.cdist(f_ret, f_ret, compute_mode="donot_use_mm_for_euclid_dist").numpy()  # IEEE sqrt
        try:
            summary["retrieval"] = metrics.retrieval_metrics(dist, held_patients, held_patients,
                                                             exclude=np.eye(len(held), dtype=bool))
        except ValueError as e:
            summary["retrieval"], summary["retrieval_note"] = None, str(e)

    # tripartite: specificity (leave one patient out), sensitivity (pools), near-duplicates
    r = first["r"]
    ht = r[np.ix_(held, train)]
    lopo = (filtering.leave_one_patient_out(ht, held_patients, cal["direction"], cal["percentile"])
            if len(set(held_patients)) >= 2 else None)
    summary["specificity"] = filtering.specificity(ht, held_patients, first["tau"], lopo)
    summary["sensitivity"] = {
        "heldout_patients": filtering.sensitivity(r, ids, patients, roles, "heldout", lopo or first["tau"]),
        "training_patients": filtering.sensitivity(r, ids, patients, roles, "train", first["tau"]),
    }

    flags_arr, attr_arr = np.array(flags), np.array(attributed)
    dec = first["dec"]
    per_set, decisions = {}, []
    for name in dict.fromkeys(syn_sets):
        rows = np.array([i for i, d in enumerate(syn_sets) if d == name])
        entry: dict = {"n": int(len(rows)), "n_flagged": int(dec["flagged"][rows].sum()),
                       "flag_rate": float(dec["flagged"][rows].mean())}
        agree = metrics.agreement(flags_arr[:, rows], attr_arr[:, rows])
        entry["consistency"] = agree
        known = (truth or {}).get(name)
        if known:
            # a non-replica made from a held-out scan is judged with a tau calibrated without its
            # patient (Koeken et al.'s specificity): with the overall tau its own scan would set it
            kinds = [known[syn_ids[i]] for i in rows]
            honest = filtering.truth_flags(dec["best"][rows], kinds, first["tau"], lopo)
            entry["near_duplicates"] = filtering.near_duplicates(honest, dec["patient"][rows], kinds)
        rec = generative_recall(-first["s"][rows], dec["flagged"][rows], reference=-ht)
        entry["recall"] = {"learned_fraction": rec.learned_fraction, "memorised_fraction": rec.memorised_fraction,
                           "learned_but_memorised": rec.learned_but_memorised,
                           # Dombrowski et al.'s "learned but memorized" (their Tables 4 and 5: learned minus it
                           # is the recall after filtering): learned through flagged volumes only
                           "learned_only_by_memorised": rec.learned_only_by_memorised,
                           "learned_not_memorised": rec.learned_not_memorised, "recall": rec.recall,
                           "reference_learned_fraction": rec.reference_learned_fraction,
                           "matched_learned_fraction": rec.matched_learned_fraction}
        entry["learned_training_ids"] = [train_ids[j] for j in np.flatnonzero(rec.learned)]
        per_set[name] = entry
        for j, i in enumerate(rows):
            decisions.append({
                "dataset": name, "id": syn_ids[i], "decision": "flagged" if dec["flagged"][i] else "accepted",
                "best_score": float(dec["best"][i]), "tau": first["tau"], "match": str(dec["match"][i]),
                "attributed_patient": str(dec["patient"][i]),
                "filters_flagging": int(flags_arr[:, i].sum()), "n_filters": len(filters),
                "attribution_agreement": int(agree["attribution_agreement"][j]),
                "kind": (known or {}).get(syn_ids[i], {}).get("kind", ""),
                "source_patient": (known or {}).get(syn_ids[i], {}).get("source_patient", ""),
            })
    summary["synthetic"] = per_set
    return {
        "summary": summary, "decisions": decisions, "roc": roc,
        "features": {"training": first["f_real"][train].numpy(), "synthetic": first["f_syn"].numpy(),
                     "synthetic_datasets": syn_sets},
        "scores": {"heldout": ht.max(axis=1), "synthetic": {n: first["dec"]["best"][np.array(
            [i for i, d in enumerate(syn_sets) if d == n])] for n in per_set}},
        "learned": {n: np.isin(train_ids, per_set[n]["learned_training_ids"]) for n in per_set},
        "membership": membership_rows(first, ids, syn_sets, head),
    }


def membership_rows(first: Mapping, ids: Sequence[str], syn_sets: Sequence[str], head: str) -> list[dict]:
    """The filter as a membership attacker (synthaudit.membership, issue 64): per synthetic set and real scan
    (training and held-out alike), filter 0's best score between the scan and the set's samples."""
    if not len(syn_sets):
        return []
    best = score_matrix(first["model"], first["f_syn"], first["f_real"], head).numpy()
    rows = []
    for name in dict.fromkeys(syn_sets):
        mine = np.array([d == name for d in syn_sets])
        rows += [{"dataset": name, "id": i, "best_score": float(v)} for i, v in zip(ids, best[mine].max(axis=0))]
    return rows


def _filter_numbers(model, f_real, r, tau, dec, pairs, same, cal, ids, patients, roles, held, train, syn_sets,
                    syn_ids, truth) -> dict:
    """One filter's headline numbers, so that the N filters (seeds seed .. seed + N - 1) give
    each number's spread over seeds: the verification AUC of every head, specificity, the
    held-out sensitivity, and per synthetic set the flag rate (and the spiked replicas' rate).
    Filter 0's full evaluation is the rest of :func:`evaluate_space`."""
    held_patients = [patients[i] for i in held]
    out: dict = {"verification_auc": None, "auc_by_head": {}}
    if same is not None:
        out["verification_auc"] = metrics.roc_auc(_pair_scores(model, f_real, pairs,
                                                                _verification_head(model, cal["head"])), same)
        out["auc_by_head"] = {h: metrics.roc_auc(_pair_scores(model, f_real, pairs, h), same)
                              for h in HEADS if h != "pred" or model.head is not None}
    ht = r[np.ix_(held, train)]
    lopo = (filtering.leave_one_patient_out(ht, held_patients, cal["direction"], cal["percentile"])
            if len(set(held_patients)) >= 2 else None)
    out["specificity"] = filtering.specificity(ht, held_patients, tau, lopo)["specificity"]
    out["sensitivity_heldout"] = (filtering.sensitivity(r, ids, patients, roles, "heldout", lopo or tau)
                                  or {}).get("flag_rate_overall")
    out["synthetic"] = {}
    for name in dict.fromkeys(syn_sets):
        rows = np.array([i for i, d in enumerate(syn_sets) if d == name])
        entry = {"flag_rate": float(dec["flagged"][rows].mean())}
        known = (truth or {}).get(name)
        if known:
            kinds = [known[syn_ids[i]] for i in rows]
            honest = filtering.truth_flags(dec["best"][rows], kinds, tau, lopo)
            entry["replica_flag_rate"] = filtering.near_duplicates(honest, dec["patient"][rows],
                                                                   kinds)["replica_flag_rate"]
        out["synthetic"][name] = entry
    return out


def _verification_head(model: SiameseNetwork, head: str) -> str:
    """Packhäuser et al.'s verification score (the head's probability), or the filter's own
    score for a network trained without a pair head (the contrastive filter)."""
    return "pred" if model.head is not None else head


def _pair_scores(model, features, pairs: np.ndarray, head: str) -> np.ndarray:
    """Scores of the given pairs of rows of ``features`` (only those pairs, not all)."""
    return score_matrix(model, features[pairs[:, 0]], features[pairs[:, 1]], head).diagonal().numpy().copy()
