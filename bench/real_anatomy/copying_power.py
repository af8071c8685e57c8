"""Where Meehan et al.'s C_T detects copying (issue 45): the workflow's C_T on real-anatomy heads with
held-out and synthetic sets from the cohort's 20 up to thousands of volumes each, at copy shares of
0, 5, 10 and 20 % (docs/fidelity.md's "C_T at scale" table).

Why: with the cohort's 20 held-out scans C_T cannot reach -2 at a 5 % copy share (docs/fidelity.md's
closed form: a cell's Z_U has the expectation -q sqrt(3mn / (m + n + 1))). The closed form says how many
volumes it needs; this measures it on real anatomy, through the function the workflow calls
(``fidelity.measures.c_t`` with the shipped ``fidelity.c_t`` settings), with many replicates per size.

What is real and what is made: the anatomy is the real-anatomy cohort's (``make real-anatomy``): its 60
training scans of 30 patients and its 20 held-out scans (five real heads under per-patient deformations,
bench/real_anatomy/build_cohort.py). Thousands of volumes through the 3D encoder would take hours on 2
cores (Astra's ResNet-152: 0.5 s per volume at 4.5 mm, 2.2 s at 1.5 mm), so the embedding here is the image
itself at 6 mm (4 x 4 x 4 block means of the 1.5 mm scans, 30 x 36 x 30 values), which C_T reduces by PCA
to the training set's leading axes as it does any embedding. New patients (the held-out pool and the
synthetic set's non-copies, drawn from one pool so that they are exchangeable): a held-out scan's block
means under a new smooth deformation (6 mm, correlation 30 mm, the cohort's patient recipe) plus fresh
noise (the cohort's 0.02 scan noise averaged over a block, 0.0025). Copies: a training scan's block means
plus fresh noise of the same size. Every replicate draws its held-out and synthetic volumes from the pool
anew (disjoint within a replicate).

The pool is projected once onto the training set's principal axes (at most 59 for 60 scans): C_T's own
PCA of those coordinates spans the same space, so distances and C_T are unchanged (checked on one
replicate against C_T on the full block means; the difference is written to the JSON).

Usage:
  copying_power.py compute --cohort data/real_anatomy/cohort [--pool 30000] [--replicates 20]
                           --out results/bench/real_anatomy_copying_power.json
  copying_power.py doc [--write]      docs/fidelity.md's table from the committed JSON
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import synthaudit  # noqa: F401  first: portable numerics before numpy loads
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "bench"))
import doc_table  # noqa: E402  the docs page's table from the JSON

RESULT = "results/bench/real_anatomy_copying_power.json"
PAGE = "docs/fidelity.md"
MARKERS = ("<!-- copying_power: bench/real_anatomy/copying_power.py doc --write -->", "<!-- /copying_power -->")
SEED = 4505
FACTOR = 4  # 1.5 mm scans -> 6 mm block means
DEFORMATION_MM, SMOOTHNESS_MM, SCAN_NOISE = 6.0, 30.0, 0.02  # the cohort's patient and scan recipe (cohort.yaml)
SIZES = [20, 100, 300, 1000, 3000, 6000]  # held-out scans = synthetic volumes per replicate
SHARES = [0.0, 0.05, 0.10, 0.20]


def expected_c_t(q: float, m: int, n: int, k: int) -> float:
    """C_T's expectation when a share q of the n samples are exact copies and the rest exchangeable
    with the m held-out scans, over k equal cells (each cell's Z_U: -q sqrt(3 m_c n_c / (m_c + n_c + 1)),
    docs/fidelity.md; C_T their held-out-weighted mean)."""
    mc, nc = m / k, n / k
    return float(-q * np.sqrt(3 * mc * nc / (mc + nc + 1))) + 0.0  # + 0.0: no -0.0 without copies


def _block_means(vols: list[np.ndarray]) -> np.ndarray:
    from synthaudit.relict.alignment.group import block_mean

    return np.stack([block_mean(v, FACTOR).ravel() for v in vols])


def compute(cohort: Path, pool_size: int, replicates: int, sizes: list[int]) -> dict:
    import yaml

    sys.path.insert(0, str(HERE))
    from build_cohort import deformed  # the cohort's own smooth deformation
    from fidelity_table import load_folder

    from synthaudit import resources
    from synthaudit.config import fill_defaults
    from synthaudit.fidelity.measures import c_t, pca_fit

    t0 = time.perf_counter()
    settings = fill_defaults(yaml.safe_load(resources.default_params().read_text()))["fidelity"]["c_t"]
    kw = dict(n_cells=int(settings["cells"]), min_generated=int(settings["min_generated"]),
              pca_components=int(settings["pca_components"]), seed=int(settings["seed"]))
    copy_z = float(settings["copy_z"])
    _, train, affine = load_folder(cohort / "training")
    _, held, _ = load_folder(cohort / "heldout")
    spacing = float(np.sqrt((affine[:3, :3] ** 2).sum(axis=0)).max()) * FACTOR
    train_b, held_b = _block_means(train), _block_means(held)
    shape = [n // FACTOR for n in train[0].shape]
    noise = SCAN_NOISE / np.sqrt(FACTOR ** 3)
    mean, axes = pca_fit(train_b.astype(np.float64), 10 ** 6)  # every axis the training set has
    project = lambda x: (np.asarray(x, np.float64) - mean) @ axes.T  # noqa: E731

    def new_patient(k: int) -> np.ndarray:
        rng = np.random.default_rng([SEED, 1, k])
        base = held_b[k % len(held_b)].reshape(shape)
        v = deformed(base, [spacing] * 3, DEFORMATION_MM, SMOOTHNESS_MM, rng)
        return (v + rng.normal(0, noise, v.shape)).ravel()

    def copy(k: int) -> np.ndarray:
        rng = np.random.default_rng([SEED, 2, k])
        return train_b[k % len(train_b)] + rng.normal(0, noise, train_b.shape[1])

    pool_raw_check = [new_patient(k) for k in range(400)]  # the projection check's volumes, kept raw
    pool = np.empty((pool_size, axes.shape[0]))
    for k in range(pool_size):
        pool[k] = project(pool_raw_check[k] if k < len(pool_raw_check) else new_patient(k))
        if (k + 1) % 5000 == 0:
            print(f"pool: {k + 1} of {pool_size} new patients ({time.perf_counter() - t0:.0f} s)", flush=True)
    n_copies = int(round(max(SHARES) * max(sizes)))
    copies_raw = [copy(k) for k in range(n_copies)]
    copies = project(np.stack(copies_raw))
    t_pool = time.perf_counter() - t0

    # the projection leaves C_T as it is: one replicate (200 held-out, 200 samples with 20 copies), both ways
    raw = c_t(train_b, np.stack(pool_raw_check[:200]), np.concatenate([np.stack(pool_raw_check[200:380]),
                                                                        np.stack(copies_raw[:20])]), **kw)
    proj = c_t(project(train_b), pool[:200], np.concatenate([pool[200:380], copies[:20]]), **kw)
    projection_check = {"c_t_block_means": raw.c_t, "c_t_projected": proj.c_t,
                        "difference": abs(raw.c_t - proj.c_t)}
    print(f"projection check: C_T {raw.c_t:.6f} on the block means, {proj.c_t:.6f} projected", flush=True)

    train_p = project(train_b)
    rows = []
    for size in sizes:
        if 2 * size > pool_size:
            raise SystemExit(f"--pool {pool_size} is too small for {size} held-out and {size} synthetic volumes")
        for q in SHARES:
            values, cells = [], []
            n_copy = int(round(q * size))
            for r in range(replicates):
                rng = np.random.default_rng([SEED, 3, size, int(round(q * 100)), r])
                draw = rng.choice(pool_size, 2 * size - n_copy, replace=False)
                heldout, news = pool[draw[:size]], pool[draw[size:]]
                picked = copies[rng.choice(len(copies), n_copy, replace=False)] if n_copy else copies[:0]
                res = c_t(train_p, heldout, np.concatenate([news, picked]), **kw)
                values.append(res.c_t)
                cells.append(res.n_cells)
            v = np.array(values, float)
            k = int(round(float(np.mean(cells))))
            rows.append({"size": size, "share": q, "copies": n_copy, "replicates": replicates,
                         "c_t_mean": float(v.mean()), "c_t_sd": float(v.std(ddof=1)), "c_t_min": float(v.min()),
                         "c_t_max": float(v.max()), "detected": float(np.mean(v < -copy_z)), "cells": k,
                         "expected": expected_c_t(n_copy / size, size, size, k)})
            print(f"m = n = {size}, copies {q:.0%}: C_T {v.mean():.3g} +- {v.std(ddof=1):.2g} (expected "
                  f"{rows[-1]['expected']:.3g}), below -{copy_z:g} in {rows[-1]['detected']:.0%} "
                  f"({time.perf_counter() - t0:.0f} s)", flush=True)
    return {"cohort": str(cohort.relative_to(ROOT) if cohort.is_relative_to(ROOT) else cohort),
            "n_training": len(train), "n_heldout_bases": len(held), "embedding":
            f"block means of {FACTOR}^3 voxels ({spacing:g} mm, {train_b.shape[1]} values), "
            f"projected on the training set's {axes.shape[0]} principal axes",
            "new_patients": f"a held-out scan's block means deformed ({DEFORMATION_MM:g} mm, correlation "
                            f"{SMOOTHNESS_MM:g} mm) plus noise SD {noise:.4g}",
            "copies": f"a training scan's block means plus noise SD {noise:.4g}",
            "pool": pool_size, "c_t_settings": dict(settings), "projection_check": projection_check,
            "rows": rows, "seconds": {"pool": round(t_pool, 1), "total": round(time.perf_counter() - t0, 1)}}


def markdown(res: dict) -> str:
    z = res["c_t_settings"]["copy_z"]
    lines = [f"| held-out = synthetic | copies | C_T mean ± SD | expected | replicates below -{z:g} |",
             "|---|---|---|---|---|"]
    for r in res["rows"]:
        lines.append(f"| {r['size']} | {r['share']:.0%} ({r['copies']}) | {r['c_t_mean']:.2f} ± {r['c_t_sd']:.2f} | "
                     f"{r['expected'] + 0.0:.2f} | {r['detected']:.0%} of {r['replicates']} |")
    lines.append("")
    lines.append(f"{res['n_training']} training scans of `{res['cohort']}`; new patients: {res['new_patients']} "
                 f"(from its {res['n_heldout_bases']} held-out scans; a pool of {res['pool']}); copies: "
                 f"{res['copies']}; embedding: {res['embedding']}; C_T as the workflow computes it "
                 f"({res['c_t_settings']['cells']} cells); expected: the closed form over equal cells. "
                 f"{res['seconds']['total']:.0f} s on 2 cores.")
    return "\n".join(lines)


def doc(write: bool) -> int:
    return doc_table.doc(PAGE, RESULT, MARKERS, markdown, write, "bench/real_anatomy/copying_power.py doc --write")


def main(argv=None) -> int:
    def options(c):
        c.add_argument("--cohort", type=Path, default=ROOT / "data/real_anatomy/cohort")
        c.add_argument("--pool", type=int, default=30000, help="new patients drawn once, replicates draw from them")
        c.add_argument("--replicates", type=int, default=20)
        c.add_argument("--sizes", default=",".join(map(str, SIZES)))

    return doc_table.cli(argv, __doc__.splitlines()[0], RESULT, markdown, doc, options,
                         lambda a: compute(a.cohort, a.pool, a.replicates, [int(x) for x in a.sizes.split(",")]))


if __name__ == "__main__":
    sys.exit(main())
