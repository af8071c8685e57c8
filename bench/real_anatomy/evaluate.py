"""Score a finished audit of the real-anatomy cohort against its truth, per replica kind.

Why: ``relict.json`` gives one balanced accuracy per measure over the whole set (the
rating is the truth here). What issue 29 asks is finer: over all kinds, augmented copies
included; without them for the feature level; and per kind, whether the copy was found and
traced to its source patient. Everything is read from the run's own rankings and calibrated
calls; the balanced accuracy is RELICT's (threshold sweep, optimal threshold:
:func:`synthaudit.relict.evaluate.evaluate_measure`), as the workflow computes it.

Usage: python evaluate.py --workspace <audit folder> --cohort <cohort folder> --out <file.json>
       [--dataset audit] [--wall-seconds S]  (writes <file.json> and <file>.md)
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from synthaudit.io import read_tsv
from synthaudit.relict.evaluate import evaluate_measure

AUGMENTED = ("flipped", "shifted", "rotated")


def patient_of_training(workspace: Path) -> dict[str, str]:
    return {r["id"]: r["patient_id"] for r in read_tsv(workspace / "data/manifest.tsv")}


def score(rows: list[dict], truth: dict[str, dict], keep, patients: dict[str, str], step: float) -> dict:
    ids = [r["synthetic_id"] for r in rows if keep(truth[r["synthetic_id"]])]
    by_id = {r["synthetic_id"]: r for r in rows}
    ratio = np.array([float(by_id[i]["ratio"]) for i in ids])
    replica = np.array([truth[i]["replica"] == "1" for i in ids])
    res = evaluate_measure(ratio, replica, step)
    called = ratio <= res["threshold"]
    kinds = {}
    for kind in sorted({truth[i]["kind"] for i in ids}):
        m = np.array([truth[i]["kind"] == kind for i in ids])
        e = {"n": int(m.sum()), "called_at_threshold": int(called[m].sum())}
        if kind != "new":
            e["closest_is_source_patient"] = int(sum(patients.get(by_id[i]["closest_training_id"]) ==
                                                     truth[i]["source_patient"] for i in np.array(ids)[m]))
        if "calibrated_replica" in by_id[ids[0]]:
            e["calibrated_calls"] = int(sum(by_id[i]["calibrated_replica"] in ("1", "True", "true")
                                            for i in np.array(ids)[m]))
        kinds[kind] = e
    return {"balanced_accuracy": res["balanced_accuracy"],
            "balanced_accuracy_any_threshold": res["balanced_accuracy_any_threshold"],
            "auc": res["auc"], "threshold": res["threshold"],
            "sensitivity": res["sensitivity"], "specificity": res["specificity"],
            "n_replicas": res["n_replicas"], "n_nonreplicas": res["n_nonreplicas"], "kinds": kinds}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workspace", required=True, type=Path)
    ap.add_argument("--cohort", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--dataset", default="audit")
    ap.add_argument("--wall-seconds", type=float, default=None, help="the audit's wall time, recorded as given")
    args = ap.parse_args(argv)
    import yaml

    params = yaml.safe_load((args.workspace / "params.yaml").read_text())
    step = float(params["relict"]["evaluation"]["threshold_step"])
    truth = {r["synthetic_id"]: r for r in read_tsv(args.cohort / "truth.tsv")}
    patients = patient_of_training(args.workspace)
    base = args.workspace / "results/relict" / args.dataset
    out = {"cohort": str(args.cohort), "workspace": str(args.workspace),
           "n_closest": params["relict"]["n_closest"],
           "alignment_on": args.dataset in (params["relict"].get("alignment") or {}).get("datasets", []),
           "kinds": {k: sum(r["kind"] == k for r in truth.values()) for k in sorted({r["kind"] for r in truth.values()})},
           "wall_seconds": args.wall_seconds, "measures": {}}
    for path in sorted(base.glob("ranking_*.tsv")):
        m = path.stem.removeprefix("ranking_")
        rows = read_tsv(path)
        out["measures"][m] = {
            "all_kinds": score(rows, truth, lambda t: True, patients, step),
            "without_augmented": score(rows, truth, lambda t: t["kind"] not in AUGMENTED, patients, step)}
    copies = base / "copies.json"
    if copies.is_file():
        out["calibrated_combined"] = json.loads(copies.read_text()).get("combined")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2, default=float) + "\n")
    args.out.with_suffix(".md").write_text(markdown(out))
    print(markdown(out))
    return 0


def markdown(out: dict) -> str:
    kinds = list(out["kinds"])
    head = ["measure", "BA all kinds", "AUC all", "BA without augmented", "(any threshold)", "AUC without"] + \
        [f"{k} (n={out['kinds'][k]})" for k in kinds]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for m, e in out["measures"].items():
        a, w = e["all_kinds"], e["without_augmented"]
        cells = [m, f"{a['balanced_accuracy']:.3f}", f"{a['auc']:.3f}", f"{w['balanced_accuracy']:.3f}",
                 f"{w['balanced_accuracy_any_threshold']:.3f}", f"{w['auc']:.3f}"]
        for k in kinds:
            ke = a["kinds"].get(k, {})
            s = f"{ke.get('called_at_threshold', '')}/{ke.get('n', '')} called"
            if "closest_is_source_patient" in ke:
                s += f", {ke['closest_is_source_patient']} to source"
            if "calibrated_calls" in ke:
                s += f", {ke['calibrated_calls']} calibrated"
            cells.append(s)
        lines.append("| " + " | ".join(cells) + " |")
    note = (f"\nn_closest {out['n_closest']}; alignment {'on' if out['alignment_on'] else 'off'}"
            + (f"; audit wall time {out['wall_seconds']:.0f} s" if out.get("wall_seconds") else "") + ".\n"
            "Called = at or below the measure's rating-tuned threshold (RELICT 2.7, all kinds); calibrated = "
            "called by the held-out calibration at the configured rate; 'to source' = the closest training scan "
            "belongs to the copied patient; (any threshold) = the best balanced accuracy at any threshold, not only "
            "on RELICT's 0.01 grid.\n")
    return "\n".join(lines) + "\n" + note


if __name__ == "__main__":
    raise SystemExit(main())
