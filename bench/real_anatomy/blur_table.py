"""The real-anatomy cohort at several generator blurs: calibrated calls against the matched null
(the held-out scans degraded like each set's samples) and against the held-out scans as they are.

Why (issue 43): a generator's samples are smoother than scans; calls calibrated on sharp scans
took 11 of 28 new patients at blur 0.6 voxel. One workspace holds the cohort's training and
held-out scans once and one synthetic set per blur level (``training_from``), so the training
side is computed once. The "matched" columns are the workflow's own calls (copies.json,
calibrated_calls.tsv); the "as they are" columns recompute the same calls (same library
functions, same rate) against the unmatched held-out matrices, which the workflow also writes.

Usage:
  blur_table.py setup --workspace W --set NAME=COHORT ...     adds the sets to W/params.yaml
  blur_table.py targets --workspace W                         the unmatched held-out matrices (stdout)
  blur_table.py score --workspace W --set NAME=COHORT ... --out results/bench/real_anatomy_blur.json
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import numpy as np
import yaml

from synthaudit.relict import calibration, matrix
from synthaudit.relict.ratio import distance_ratio
from synthaudit.workspace import dump_round_trip, load_round_trip, set_value

AUGMENTED = ("flipped", "shifted", "rotated")
KINDS = ("exact", "deformed") + AUGMENTED


def read_tsv(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def sets(args) -> dict[str, Path]:
    return {s.split("=", 1)[0]: Path(s.split("=", 1)[1]).resolve() for s in args.set}


def setup(ws: Path, named: dict[str, Path]) -> None:
    doc = load_round_trip((ws / "params.yaml").read_text())
    base = next(iter(doc["datasets"]))
    for name, cohort in named.items():
        if name != base:
            doc["datasets"][name] = {"training_from": base,
                                     "synthetic": {"source": "folder", "folder": str(cohort / "synthetic")},
                                     "ratings": str(cohort / "ratings.tsv")}
    aligned = doc["relict"]["alignment"]["datasets"]  # init aligns its own set: align every blur alike
    if base in aligned:
        aligned.extend(n for n in named if n not in aligned)
    # the local level is not calibrated on the matched null (docs/workflow.md 7b): not run here
    text = set_value(dump_round_trip(doc), "relict.local.enabled", False)
    (ws / "params.yaml").write_text(text)


def targets(ws: Path) -> list[str]:
    """The unmatched held-out matrices of the workspace's own training set (what the table compares with)."""
    import os

    from synthaudit.config import load_params
    from synthaudit.workflow_plan import WorkflowPlan

    os.chdir(ws)
    plan = WorkflowPlan(load_params("params.yaml"))
    return [f"results/relict/{b}/heldout/{m}.npz" for b in plan.calibration_bases for m in plan.heldout_measures[b]
            if m not in plan.seg_measures]


def calls_as_they_are(ws: Path, base: str, dataset: str, measures: list[str], rate: float, n: int) -> dict:
    """The combined calls of ``dataset`` against the unmatched held-out matrices."""
    ranks = {m: {r["synthetic_id"]: r for r in read_tsv(ws / f"results/relict/{dataset}/ranking_{m}.tsv")}
             for m in measures}
    ids = sorted(ranks[measures[0]])
    fprs, null_fprs, null = {}, {}, None
    train_patients = {r["id"]: r["patient_id"] for r in read_tsv(ws / "data/manifest.tsv")}
    for m in measures:
        held = matrix.load(ws / f"results/relict/{base}/heldout/{m}.npz")
        patients = {row["heldout_id"]: row["patient_id"]
                    for row in read_tsv(ws / f"results/relict/{dataset}/calibration/{m}.tsv")}
        masked, _ = calibration.leave_patient_out(held.distances, [patients[i] for i in held.synthetic_ids],
                                                  [train_patients[t] for t in held.training_ids])
        r = distance_ratio(masked, n, warn=lambda _: None)
        null = calibration.Null(held.synthetic_ids, [patients[i] for i in held.synthetic_ids], r.ratio,
                                [held.training_ids[j] for j in r.closest])
        fprs[m] = calibration.calibrate(np.array([float(ranks[m][s]["score"]) for s in ids]), null, rate)["fpr"]
        null_fprs[m] = calibration.heldout_check(null, rate)["fpr"]
    both = calibration.combined(fprs, null_fprs, null, rate)
    held_called = calibration.false_positive_rates(
        np.min(np.stack(list(null_fprs.values())), axis=0), np.min(np.stack(list(null_fprs.values())), axis=0),
        calibration.pools_without(null.patients, null))[0] <= rate
    per = {m: dict(zip(ids, fprs[m] <= rate)) for m in measures}
    return {"combined": dict(zip(ids, both["called"])), "per_measure": per, "heldout_called": int(held_called.sum()),
            "n_heldout": len(null.ids)}


def calls_matched(ws: Path, dataset: str, measures: list[str], rate: float) -> dict:
    """The workflow's own combined calls (against the matched null where it is on)."""
    rows = read_tsv(ws / f"results/relict/{dataset}/calibrated_calls.tsv")
    nulls = {m: read_tsv(ws / f"results/relict/{dataset}/calibration/{m}.tsv") for m in measures}
    stat = np.min(np.array([[float(r["fpr"]) for r in nulls[m]] for m in measures]), axis=0)
    patients = [r["patient_id"] for r in nulls[measures[0]]]
    null = calibration.Null([r["heldout_id"] for r in nulls[measures[0]]], patients, np.zeros(len(patients)),
                            patients)
    held_called = calibration.false_positive_rates(stat, stat, calibration.pools_without(patients, null))[0] <= rate
    per = {m: {r["synthetic_id"]: r["calibrated_replica"] in ("1", "True", "true")
               for r in read_tsv(ws / f"results/relict/{dataset}/ranking_{m}.tsv")} for m in measures}
    return {"combined": {r["synthetic_id"]: r["combined_replica"] == "1" for r in rows}, "per_measure": per,
            "heldout_called": int(held_called.sum()), "n_heldout": len(patients)}


def tally(calls: dict[str, bool], truth: dict[str, dict]) -> dict:
    out = {}
    for kind in KINDS + ("new",):
        ids = [s for s in calls if truth[s]["kind"] == kind]
        out[kind] = {"n": len(ids), "called": int(sum(calls[s] for s in ids))}
    aug = [s for s in calls if truth[s]["kind"] in AUGMENTED]
    new = [s for s in calls if truth[s]["kind"] == "new"]
    copies = [s for s in calls if truth[s]["kind"] != "new"]
    out["augmented_sensitivity"] = sum(calls[s] for s in aug) / len(aug) if aug else None
    out["sensitivity"] = sum(calls[s] for s in copies) / len(copies) if copies else None
    out["specificity"] = 1 - sum(calls[s] for s in new) / len(new) if new else None
    return out


def score(ws: Path, named: dict[str, Path]) -> dict:
    params = yaml.safe_load((ws / "params.yaml").read_text())
    base = next(iter(params["datasets"]))
    rate, n = params["relict"]["calibration"]["rate"], params["relict"]["n_closest"]
    out = {"workspace": str(ws), "rate": rate, "n_closest": n, "sets": {}}
    for name, cohort in named.items():
        truth = {r["synthetic_id"]: r for r in read_tsv(cohort / "truth.tsv")}
        blur = json.loads((cohort / "cohort.json").read_text())["config"]["generator_blur_vox"]
        copies = json.loads((ws / f"results/relict/{name}/copies.json").read_text())
        measures = sorted(copies["measures"])
        texture = json.loads((ws / f"results/relict/{name}/texture.json").read_text())
        matched = calls_matched(ws, name, measures, rate)
        plain = calls_as_they_are(ws, base, name, measures, rate, n)
        out["sets"][name] = {
            "generator_blur_vox": blur, "measures": measures, "matched_measures": copies.get("matched_null", []),
            "fitted": {k: texture["degradation"][k] for k in ("blur_vox", "noise_sd")},
            "curve_blur_vox": texture["effective_blur_vox"],
            "noise_sd": {"synthetic": texture["synthetic"]["noise_sd"]["median"],
                         "heldout": texture["heldout"]["noise_sd"]["median"]},
            "matched": {"combined": tally(matched["combined"], truth), "heldout_called": matched["heldout_called"],
                        "per_measure": {m: tally(matched["per_measure"][m], truth) for m in measures}},
            "as_they_are": {"combined": tally(plain["combined"], truth), "heldout_called": plain["heldout_called"],
                            "per_measure": {m: tally(plain["per_measure"][m], truth) for m in measures}},
            "n_heldout": matched["n_heldout"]}
    return out


def markdown(res: dict) -> str:
    lines = ["| generator blur (voxel) | fitted blur / added noise | null | exact | deformed | flipped | shifted | "
             "rotated | augmented sensitivity | new patients called | specificity | held-out called (left out) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, s in res["sets"].items():
        for null in ("as_they_are", "matched"):
            c = s[null]["combined"]
            lines.append(
                f"| {s['generator_blur_vox']} | {s['fitted']['blur_vox']:.2f} / {s['fitted']['noise_sd']:.3f} | "
                f"{'matched' if null == 'matched' else 'as they are'} | "
                + " | ".join(f"{c[k]['called']}/{c[k]['n']}" for k in KINDS)
                + f" | {c['augmented_sensitivity']:.2f} | {c['new']['called']}/{c['new']['n']} | "
                  f"{c['specificity']:.3f} | {s[null]['heldout_called']}/{s['n_heldout']} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=["setup", "targets", "score"])
    ap.add_argument("--workspace", required=True, type=Path)
    ap.add_argument("--set", action="append", default=[], help="NAME=COHORT folder (the first is the workspace's own)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if args.mode == "setup":
        setup(args.workspace, sets(args))
        return
    if args.mode == "targets":
        print(*targets(args.workspace.resolve()))
        return
    res = score(args.workspace.resolve(), sets(args))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(markdown(res))
    print(markdown(res))


if __name__ == "__main__":
    main()
