"""The shortlist's cheap stage on real anatomy (issue 31): the recall of the exact n closest.

Against the exhaustive matrices of the real-anatomy audit (`bench/real_anatomy/run.sh audit`:
real T1 heads at 1.5 mm, 50 synthetic x 60 training scans), per block size and K, with the
workflow's cheap stage (synthaudit.relict.search.cheap_vector) and with the rejected variant
that adds each training volume's residual energy (what block averaging leaves out;
docs/large_datasets.md says why it was rejected).

    .venv/bin/python bench/real_anatomy/shortlist_check.py [data/real_anatomy/audit_cohort]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from synthaudit.io import load_volume
from synthaudit.relict import search

MEASURES = ("mae", "rmse", "ssim", "ncc")


def residual_energy(volume: np.ndarray, factors, standardise: bool) -> float:
    """|(I - P) v|^2: the squared norm block averaging leaves out (of the standardised volume for NCC)."""
    v = np.asarray(volume, np.float64)
    if standardise:
        v = v - v.mean()
        v = v / max(np.linalg.norm(v), 1e-30)
    kept = search.cheap_vector(v, factors).astype(np.float64)
    return max(0.0, float(np.vdot(v, v) - np.vdot(kept, kept)))


def main(workspace: Path) -> None:
    relict = workspace / "results/relict"
    dataset = next(p.name for p in relict.iterdir() if (p / "measures/mae.npz").exists())
    mats = {m: np.load(relict / dataset / "measures" / f"{m}.npz") for m in MEASURES}
    syn_ids, train_ids = mats["mae"]["synthetic_ids"].tolist(), mats["mae"]["training_ids"].tolist()
    pre = next((workspace / "results/preprocessed").iterdir())
    grid = json.loads((pre / "grid.json").read_text())
    train = [load_volume(pre / "images" / f"{i}.nii.gz")[0] for i in train_ids]
    syn = [load_volume(workspace / f"results/synthetic/{dataset}/images/{i}.nii.gz")[0] for i in syn_ids]
    print(f"{dataset}: {len(syn)} synthetic x {len(train)} training, grid {grid['shape']} at {grid['spacing_mm']} mm")
    print("recall of the exact n closest (" + ", ".join(MEASURES) + "): the workflow's stage | with the energy term")
    for n, k in [(5, 10), (5, 15), (10, 20), (10, 30)]:
        for block_mm in (12.0, 6.0, 3.0):
            f = search.block_factors(block_mm, grid["spacing_mm"], grid["shape"])
            plain, energy = [], []
            for m in MEASURES:
                stand = search.stage_of(m) == "standardised"
                vt = np.stack([search.cheap_vector(v, f, standardise=stand) for v in train])
                vs = np.stack([search.cheap_vector(v, f, standardise=stand) for v in syn])
                e = np.array([residual_energy(v, f, stand) for v in train])
                top = np.argsort(mats[m]["distances"], 1, kind="stable")[:, :n]
                for out, extra in ((plain, 0.0), (energy, e)):
                    d = (vs.astype(np.float64) ** 2).sum(1)[:, None] + (vt.astype(np.float64) ** 2).sum(1)[None] \
                        - 2 * vs.astype(np.float64) @ vt.astype(np.float64).T + extra
                    cand = np.argsort(d, 1, kind="stable")[:, :k]
                    out.append(np.mean([len(set(a) & set(b)) / n for a, b in zip(top, cand)]))
            print(f"n={n} K={k} blocks {block_mm:g} mm {f}: " + " ".join(f"{x:.3f}" for x in plain) + " | "
                  + " ".join(f"{x:.3f}" for x in energy), flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("data/real_anatomy/audit_cohort"))
