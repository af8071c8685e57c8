"""The model-level measures on real anatomy with two scans per training patient (issue 63, item 5): synthetic
sets of 0-75 % copies, exact and blurred, and a set that drops half the heads, through the workflow's own
fidelity audit, membership attacks and release gate (docs/fidelity_validation.md).

What is real and what is made: bench/membership/real_anatomy.py's cohort (the real-anatomy benchmark's five
real heads and its recipe, at 3 mm; the embedding is the image's 6 mm block means divided by their length, in
place of an encoder's). 30 training patients with 2 scans each, 20 held-out patients with 1 scan, samples of
50. A copy is a training scan through the samples' generator (its blur and noise); a blurred copy is blurred
further by sigma voxels of the cohort's 1.5 mm grid. The rest of each set are new patients of the five heads.
"Half the heads" is 50 new patients of two of the five heads: the modes a generator dropped.

Per set: authenticity and beta-recall (synthaudit.fidelity.audit, the shipped fidelity settings: patient-aware
neighbours, bootstrap CIs), C_T with its power, the Frechet distance against its floor, the strongest membership
attack, and the shipped gate's model-level rules on them (c_t, frechet_distance_vs_floor, membership_auc).

    python bench/fidelity/copies_validation.py compute   # -> results/bench/fidelity_copies_validation.json
    python bench/fidelity/copies_validation.py doc [--write]
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import synthaudit  # noqa: F401  first: portable numerics before numpy loads
import numpy as np
import yaml
from scipy import ndimage

from synthaudit.features.compare import standardise
from synthaudit.fidelity.audit import Embedded, audit as fidelity_audit
from synthaudit.fidelity.metrics import metrics_entry as fidelity_entry
from synthaudit.membership import audit as membership
from synthaudit.review import gate

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "bench" / "membership"))
import doc_table  # noqa: E402  the docs page's tables from the JSON
import real_anatomy as cohort  # noqa: E402  bench/membership/real_anatomy.py: the heads and the recipe

RESULT = "results/bench/fidelity_copies_validation.json"
PAGE = "docs/fidelity_validation.md"
MARKERS = ("<!-- copies_validation: bench/fidelity/copies_validation.py doc --write -->", "<!-- /copies_validation -->")
SHARES = [0.0, 0.05, 0.1, 0.2, 0.5, 0.75]
BLURS = [0.0, 0.5, 0.8, 1.2]  # the copies' extra blur, in the cohort's 1.5 mm voxels (0: exact copies)
MODEL_RULES = ("c_t", "frechet_distance_vs_floor", "membership_auc")


def _embedded(ids, patients, vols) -> Embedded:
    six = np.stack([cohort.block_mean(v, 2).ravel() for v in vols]).astype(np.float64)
    near = standardise(six, six, "length")[0].astype(np.float64)
    return Embedded(list(ids), six, near, list(patients))


def _gate(name: str, fid: dict, mem: dict) -> dict[str, str]:
    """The shipped policy's model-level rules on one set's numbers, through synthaudit.review.gate itself."""
    policy = gate.load_policy()
    policy = {**policy, "datasets": [name], "rules": {k: v for k, v in policy["rules"].items() if k in MODEL_RULES}}
    with tempfile.TemporaryDirectory() as tmp:
        metrics = Path(tmp) / "results" / "metrics"
        metrics.mkdir(parents=True)
        (metrics / "fidelity.json").write_text(json.dumps({name: fidelity_entry(fid)}))
        (metrics / "membership.json").write_text(json.dumps({name: membership.metrics_entry(mem)}))
        checks = gate.evaluate(tmp, policy)
    out = {}
    for c in checks:  # a rule with several checks (one per attack) takes its worst
        order = [gate.FAIL, gate.INCONCLUSIVE, gate.PASS, gate.NA]
        out[c.rule] = min(out.get(c.rule, gate.NA), c.verdict, key=order.index)
    return out


def compute(nifti: Path) -> dict:
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    fidelity_settings, mem_settings = params["fidelity"], {**params["membership"], "fpr": [0.1]}
    co = cohort.cohort(nifti)  # the membership bench's cohort, scan for scan
    r, train, n = co.recipe, co.train, cohort.N_SAMPLES
    train_e, held_e = _embedded(*zip(*train)), _embedded(*zip(*co.held))
    fresh = iter(range(20_000, 200_000))

    def new_patient(grng, heads=None):
        while True:
            k = next(fresh)
            if heads is None or k % len(r.names) in heads:
                return r.generated(r.anatomy(k), grng)

    sets = [("no copies", 0.0, 0.0, None)] + [
        (f"{q:.0%} copies, {'exact' if b == 0 else f'blur {b:g} voxel'}", q, b, None)
        for q in SHARES[1:] for b in BLURS] + [("no copies, half the heads", 0.0, 0.0, (0, 1))]
    rows = []
    for k, (label, share, blur, heads) in enumerate(sets):
        grng = np.random.default_rng([cohort.SEED, 63, k])
        n_copies = int(round(share * n))
        copied = grng.choice(len(train), size=n_copies, replace=False)
        samples = [r.generated(ndimage.gaussian_filter(train[j][2], blur / 2.0) if blur else train[j][2], grng)
                   for j in copied] + [new_patient(grng, heads) for _ in range(n - n_copies)]
        ids = [f"syn{j:03d}" for j in range(n)]
        fid = fidelity_audit(train_e, held_e, _embedded(ids, ids, samples), fidelity_settings,
                             "6 mm block means", "length")
        mem = cohort.attack_result(co, np.stack(samples), mem_settings)
        s = fid["synthetic"]
        strongest = mem["attacks"][mem["strongest"]]
        rows.append({"set": label, "copy_share": share, "blur_vox": blur, "heads": list(heads) if heads else None,
                     "authenticity": s["authenticity"]["value"], "authenticity_ci": s["authenticity"]["ci"],
                     "authenticity_floor": fid["floor"]["authenticity"]["value"],
                     "beta_recall": s["beta_recall"]["value"], "beta_recall_ci": s["beta_recall"]["ci"],
                     "beta_recall_floor": fid["floor"]["beta_recall"]["value"],
                     "c_t": fid["c_t"]["value"], "c_t_power": fid["c_t"]["power"]["probability"],
                     "membership_attack": mem["strongest"], "membership_auc": strongest["auc"],
                     "membership_auc_ci": strongest["auc_ci"], "gate": _gate("set", fid, mem)})
        cohort.log(f"{label}: authenticity {rows[-1]['authenticity']:.2f}, beta-recall {rows[-1]['beta_recall']:.3f}, "
                   f"C_T {rows[-1]['c_t']:.2f}, membership AUC {strongest['auc']:.2f}; gate {rows[-1]['gate']}")
    return {"grid_mm": r.sp[0], "training_patients": len(co.train_anatomy), "heldout_patients": len(co.held),
            "samples": n,
            "rows": rows}


def markdown(res: dict) -> str:
    lines = ["| synthetic set | authenticity (floor) | β-recall [95 % CI] | C_T (power) | strongest membership AUC "
             "| gate: c_t / FD vs floor / membership |", "|---|---|---|---|---|---|"]
    for r in res["rows"]:
        g = r["gate"]
        lines.append(f"| {r['set']} | {r['authenticity']:.2f} ({r['authenticity_floor']:.2f}) | "
                     f"{r['beta_recall']:.3f} [{r['beta_recall_ci'][0]:.3f}, {r['beta_recall_ci'][1]:.3f}] | "
                     f"{r['c_t']:.2f} ({r['c_t_power']:.2f}) | {r['membership_auc']:.2f} "
                     f"[{r['membership_auc_ci'][0]:.2f}, {r['membership_auc_ci'][1]:.2f}] | "
                     + " / ".join(g.get(k, "–") for k in MODEL_RULES) + " |")
    return "\n".join(lines)


def doc(write: bool) -> int:
    return doc_table.doc(PAGE, RESULT, MARKERS, markdown, write, "bench/fidelity/copies_validation.py doc --write")


def main(argv=None) -> int:
    def options(c):
        c.add_argument("--nifti", type=Path, default=ROOT / "data" / "real_anatomy" / "nifti",
                       help="fetch.sh's nifti folder")

    return doc_table.cli(argv, __doc__.splitlines()[0], RESULT, markdown, doc, options, lambda a: compute(a.nifti))


if __name__ == "__main__":
    raise SystemExit(main())
