"""How many candidates the aligned ratio needs to be exact: every training volume aligned (issue 31, part 3).

Why: the aligned ratio's denominator is the mean of the n closest *aligned* distances, but
only the K candidates the pre-selection ranks first are aligned at full resolution; the
rest keep their plain distance (an upper bound). The ratio is exact when the K candidates
hold the n closest aligned distances. The only reference that says whether they do aligns
a synthetic volume to every training volume, at full resolution, with the workflow's own
search; this bench does that for a few synthetic volumes of the cached NCCT bench cohort
(50 x 774 at 1 mm, one volume ~2 min on 2 cores) and reports, for three orderings of the
candidates (the 4 mm pre-selection the workflow uses, the plain RMSE, and the 2 mm
block-mean search of the coarse-to-fine step), the recall of the exact n closest and the
ratio at K = n, 1.5 n, 2 n, 3 n and 4 n, and the smallest K that holds all n.

    PYTHONPATH=bench python -m synthaudit_bench.alignment_recall --synthetic 12,2,0,3 \\
        --out results/bench/alignment_recall_ncct.json
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from synthaudit.io import write_json


def orderings_report(aligned: np.ndarray, orders: dict[str, np.ndarray], plain: np.ndarray, n: int,
                     ks: Sequence[int]) -> dict:
    """Per ordering: the smallest K whose first K candidates hold the n closest aligned distances,
    and at each K the recall of those n and the ratio with the first K aligned (the rest plain)."""
    aligned = np.asarray(aligned, np.float64)
    plain = np.asarray(plain, np.float64)
    true = np.argsort(aligned, kind="stable")[:n]
    exact = float(np.sort(aligned)[0] / np.sort(aligned)[:n].mean())
    out = {"ratio_exact": exact, "orderings": {}}
    for name, order in orders.items():
        order = np.asarray(order)
        pos = np.empty(len(order), np.int64)
        pos[order] = np.arange(len(order))
        rows = []
        for k in ks:
            values = plain.copy()
            values[order[:k]] = aligned[order[:k]]
            ratio = float(np.sort(values)[0] / np.sort(values)[:n].mean())
            rows.append({"k": int(k), "recall": float(np.isin(true, order[:k]).mean()), "ratio": ratio,
                         "ratio_error": ratio - exact})
        out["orderings"][name] = {"k_for_recall_1": int(pos[true].max()) + 1, "at_k": rows}
    return out


def run(synthetic: Sequence[int], params_file: str = "params.yaml", n: int = 50, batch: int = 50,
        threads: int = 2, log=print, arrays_out: str | Path | None = None) -> dict:
    import yaml

    from synthaudit.relict import alignment as al
    from synthaudit_bench.alignment import augmented_set, find_cohort
    from synthaudit_bench.cohort import Cohort

    c = Cohort(find_cohort())
    syn, tra = c.array("synthetic_images"), c.array("training_images")
    cfg = yaml.safe_load(Path(params_file).read_text())["relict"]["alignment"]
    space = al.SearchSpace.from_params(cfg["search"])
    spacing = float(c.spec.spacing_mm[0])
    sp = [spacing] * 3
    pre = max(1, int(round(4.0 / spacing)))  # as the NCCT scale bench: 4 mm blocks
    coarse = al.refine_factor(cfg.get("coarse_mm"), sp)
    n_t = len(tra)
    t0 = time.perf_counter()
    small_train = [al.block_mean(np.asarray(tra[j], np.float32), pre) for j in range(n_t)]
    log(f"training block means: {time.perf_counter() - t0:.1f} s")
    volumes, augmented = augmented_set(syn, tra, c.replica_of, spacing, 3, 0)  # the scale bench's set
    kinds = {a["index"]: a for a in augmented}
    ks = sorted({n, int(1.5 * n), 2 * n, 3 * n, 4 * n})
    rows = []
    arrays: dict[str, np.ndarray] = {}  # per volume and training volume, for other orderings offline
    for i in synthetic:
        t0 = time.perf_counter()
        s = volumes[i]
        cand, hyp, pre_err = al.preselect_gemm([al.block_mean(s, pre)], small_train, space, [spacing * pre] * 3, n_t,
                                         n_hypotheses=int(cfg["hypotheses"]), threads=threads, prune=False)
        order4 = cand[0]
        aligned = np.full(n_t, np.nan)
        coarse_mse = np.full(n_t, np.nan)
        plain = np.full(n_t, np.nan)
        s64 = s.astype(np.float64)
        results: dict[int, object] = {}
        # batches without the joint refinement of the closest pairs (space.refine_top), which is then
        # applied once to the closest over every training volume, as one search of them all would
        # (per batch it would refine each batch's closest: more pairs than the search refines)
        batch_space = dataclasses.replace(space, refine_top=0)
        for b in range(0, n_t, batch):
            js = [int(j) for j in order4[b:b + batch]]
            vols = [np.asarray(tra[j], np.float32) for j in js]
            found = al.align_pair_set_coarse_to_fine(s, vols, batch_space, sp, hyp[0][b:b + batch], factor=coarse,
                                                     workers=threads)
            _, ca = al.coarse_aligned_mse(s, vols, space, sp, hyp[0][b:b + batch], factor=coarse, workers=threads)
            for j, p, e, v in zip(js, found, ca, vols):
                results[j], coarse_mse[j] = p, e
                plain[j] = float(np.sqrt(np.mean((s64 - v) ** 2)))
            log(f"synthetic {i}: {min(b + batch, n_t)}/{n_t} aligned, {time.perf_counter() - t0:.0f} s")
        every = [results[j] for j in range(n_t)]
        every = al._refine_closest(every, s, al._Picked(tra.__getitem__, range(n_t)), space, sp)
        aligned = np.array([p.rmse for p in every])
        orders = {"preselection_4mm (the workflow's)": order4, "plain_rmse": np.argsort(plain, kind="stable"),
                  "coarse_2mm_aligned": np.argsort(coarse_mse, kind="stable")}
        row = {"synthetic": int(i), "kind": kinds.get(i, {}).get("kind", "replica" if c.replica_of[i] >= 0
                                                                    else "new"),
               "seconds": time.perf_counter() - t0, **orderings_report(aligned, orders, plain, n, ks)}
        rows.append(row)
        arrays.update({f"{i}_aligned_rmse": aligned, f"{i}_plain_rmse": plain, f"{i}_coarse_2mm_mse": coarse_mse,
                       f"{i}_preselection_4mm_mse": np.asarray(pre_err.aligned[0], np.float64),
                       f"{i}_preselection_4mm_order": np.asarray(order4)})
    if arrays_out:
        Path(arrays_out).parent.mkdir(parents=True, exist_ok=True)
        np.savez(arrays_out, **arrays)
    return {"cohort": str(c.path), "grid": list(np.asarray(tra[0]).shape), "spacing_mm": spacing, "n_closest": n,
            "n_training": n_t, "preselect_downsample": pre, "coarse_to_fine_factor": coarse,
            "search": cfg["search"], "synthetic": rows,
            "note": "every training volume aligned with align_pair_set_coarse_to_fine (the workflow's search; its joint "
            "refinement of the closest space.refine_top pairs applied once, over every training volume); "
                    "ratio at K: the first K of an ordering aligned, the rest at their plain RMSE"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m synthaudit_bench.alignment_recall",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--synthetic", default="12,2,0,3", help="comma-separated synthetic indices (default: %(default)s: "
                        "a volume that copies nobody, a shifted, a mirrored and a rotated copy)")
    parser.add_argument("--out", default="results/bench/alignment_recall_ncct.json")
    parser.add_argument("--arrays", default=None,
                        help="also write every pair's distances (aligned, plain, 2 mm, 4 mm) to this .npz")
    args = parser.parse_args(argv)
    result = run([int(x) for x in args.synthetic.split(",")], arrays_out=args.arrays)
    out = Path(args.out)
    write_json(out, result)
    for row in result["synthetic"]:
        print(f"synthetic {row['synthetic']} ({row['kind']}): exact ratio {row['ratio_exact']:.4f}")
        for name, o in row["orderings"].items():
            cells = ", ".join(f"K={r['k']}: recall {r['recall']:.2f}, ratio {r['ratio']:.4f}" for r in o["at_k"])
            print(f"  {name}: all {result['n_closest']} held from K = {o['k_for_recall_1']}; {cells}")
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
