"""How the privacy filters' batches are made, measured: Packhäuser et al.'s random pairs over the whole
training set (``batching: pairs``) against batches of patients with every pair of their scans (``patients``,
the default), each training the workflow's filters 0-2 and the retrieval network and evaluated as the
workflow does (privacy.evaluate.evaluate_space), on one thread per job:

* the demo's ``ncct_demo`` image space (11 training patients; verification on its 11 held-out patients), and
* the real-anatomy cohort run through ``synthaudit init`` (docs/real_anatomy.md: 30 training patients,
  20 held-out scans, 50 samples of which 22 copy training patients; bench/real_anatomy/run.sh audit).

    make demo; bench/real_anatomy/run.sh audit        # the two runs' privacy inputs (real.npz, synthetic.npz)
    python bench/privacy/batching.py compute          # -> results/bench/privacy_batching.json (~20 min, 2 cores)
    python bench/privacy/batching.py doc [--write]    # docs/privacy.md's table from that JSON
"""

from __future__ import annotations

import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import synthaudit  # noqa: F401  first: portable numerics before numpy loads
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import doc_table  # noqa: E402  the docs page's tables from the JSON

RESULT = "results/bench/privacy_batching.json"
PAGE = "docs/privacy.md"
MARKERS = ("<!-- privacy_batching: bench/privacy/batching.py doc --write -->", "<!-- /privacy_batching -->")
REAL = ROOT / "data/real_anatomy/audit_alone"
COHORTS = {"demo": ("results/privacy/ncct_demo/image", "ncct_demo"),
           "real": ("results/privacy/audit/image", "audit")}


def _truth(cohort: str, root: Path, owner: str) -> dict:
    """Per synthetic set, per volume: replica or not, and its source patient (the workflow's, or the
    real cohort's truth table)."""
    if cohort == "demo":
        from synthaudit.config import load_params
        from synthaudit.workflow_plan import WorkflowPlan

        return WorkflowPlan(load_params(root / "params.yaml")).privacy_truth(owner)
    from synthaudit.io import read_tsv

    rows = read_tsv(ROOT / "data/real_anatomy/cohort/truth.tsv")
    return {owner: {r["synthetic_id"]: {"kind": "replica" if r["replica"] == "1" else "nonreplica",
                                        "source_patient": r["source_patient"] or None} for r in rows}}


def run(cohort: str, root: str, batching: str) -> dict:
    """Train and evaluate one cohort's filters with ``batching`` (one thread, the project's other settings)."""
    import torch
    from synthaudit.config import load_params
    from synthaudit.privacy.data import patient_split
    from synthaudit.privacy.evaluate import evaluate_space
    from synthaudit.privacy.train import train_network

    torch.set_num_threads(1)
    root_path = Path(root)
    os.chdir(root_path)
    space, owner = COHORTS[cohort]
    cfg = load_params(root_path / "params.yaml")["privacy"]
    cfg["training"]["batching"] = batching
    real, syn = dict(np.load(f"{space}/real.npz")), dict(np.load(f"{space}/synthetic.npz"))
    patients, roles = [str(p) for p in real["patients"]], [str(r) for r in real["roles"]]
    train_idx, val_idx = patient_split(patients, [i for i, r in enumerate(roles) if r == "train"],
                                       cfg["training"]["validation_fraction"], cfg["training"]["split_seed"])
    models, jobs = [], []
    for k in range(int(cfg["consistency"]["n_filters"]) + 1):  # the filters, then the retrieval network
        objective, seed = ("retrieval", 0) if k == cfg["consistency"]["n_filters"] else (cfg["filter_objective"], k)
        start = time.perf_counter()
        model, history = train_network(real["x"], patients, train_idx, val_idx, cfg["network"], cfg["training"],
                                       objective=objective, seed=cfg["training"]["seed"] + seed, device="cpu")
        jobs.append({"seconds": time.perf_counter() - start, "epochs": len(history),
                     "seconds_per_epoch": float(np.mean([r["seconds"] for r in history]))})
        models.append(model)
    ev = evaluate_space(real, syn, models[:-1], models[-1], cfg, truth=_truth(cohort, root_path, owner))["summary"]
    sets = [d for d in ev["synthetic"] if ev["synthetic"][d].get("near_duplicates")]
    return {"cohort": cohort, "batching": batching, "jobs": jobs,
            "verification_auc": [f["verification_auc"] for f in ev["per_filter"]],
            "replica_flag_rate": {d: [f["synthetic"][d]["replica_flag_rate"] for f in ev["per_filter"]] for d in sets},
            "nonreplica_flag_rate": {d: ev["synthetic"][d]["near_duplicates"]["nonreplica_flag_rate"] for d in sets},
            "training_patients_flagged": (ev["sensitivity"]["training_patients"] or {}).get("flag_rate_overall"),
            "training_patients_attributed": (ev["sensitivity"]["training_patients"] or {}).get("attribution_correct")}


def compute(demo_root: Path) -> dict:
    tasks = [("real", str(REAL), "pairs"), ("real", str(REAL), "patients"), ("demo", str(demo_root), "pairs"),
             ("demo", str(demo_root), "patients")]
    with ProcessPoolExecutor(2) as pool:
        rows = list(pool.map(run, *zip(*tasks)))
    return {"threads_per_job": 1, "processes": 2, "rows": rows}


def _range(values) -> str:
    values = [v for v in values if v is not None]
    return f"{np.mean(values):.2f} ({min(values):.2f}-{max(values):.2f})" if values else "-"


def markdown(res: dict) -> str:
    lines = ["| cohort | batching | training, 4 jobs (s) | s per epoch | epochs | verification AUC, 3 filters "
             "| copies flagged, 3 filters | new patients flagged | training patients flagged / attributed |",
             "|---|---|---:|---:|---|---|---|---|---|"]
    for r in res["rows"]:
        sets = sorted(r["replica_flag_rate"])
        copies = "; ".join(f"{d} {_range(r['replica_flag_rate'][d])}" for d in sets)
        new = "; ".join(f"{d} {r['nonreplica_flag_rate'][d]:.2f}" for d in sets)
        lines.append(
            f"| {r['cohort']} | {r['batching']} | {sum(j['seconds'] for j in r['jobs']):.0f} "
            f"| {np.mean([j['seconds_per_epoch'] for j in r['jobs']]):.2f} "
            f"| {', '.join(str(j['epochs']) for j in r['jobs'])} | {_range(r['verification_auc'])} | {copies} "
            f"| {new} | {r['training_patients_flagged']:.2f} / {r['training_patients_attributed']:.2f} |")
    return "\n".join(lines)


def doc(write: bool) -> int:
    return doc_table.doc(PAGE, RESULT, MARKERS, markdown, write, "bench/privacy/batching.py doc --write")


def main(argv=None) -> int:
    def options(parser):
        parser.add_argument("--demo-root", type=Path, default=ROOT, help="a checkout whose make demo has run")

    return doc_table.cli(argv, __doc__.splitlines()[0], RESULT, markdown, doc, options,
                         lambda a: compute(a.demo_root.resolve()))


if __name__ == "__main__":
    raise SystemExit(main())
