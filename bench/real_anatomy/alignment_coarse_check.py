"""A coarse stage for the alignment on a 1.5 mm grid (issue 47, part 2): the time against SSIM's, and
whether it finds what the full-resolution search finds, on real head-CT anatomy.

Why: a user's head CT at 1.5 mm (60 training, 70 aligned volumes) took 42-60 s per volume to align,
because ``coarse_mm: 2`` gave a 1.5 mm grid no coarse stage (block factor floor(2 / 1.5) = 1), so every
candidate was searched over every shift at full resolution. This bench runs the workflow's own alignment
(``relict.alignment_job.align_dataset``: pre-selection on block means, then the per-pair search) on the
one real head CT the registries ship (invesalius-examples, resampled to 1.5 mm as in
alignment_ct_check.py), twice: with the coarse-to-fine search from 2-voxel (3 mm) block means, and with
the full-resolution search on a seeded subset of the synthetic volumes (the reference; every training
volume is a candidate in both, as init sets K for 60 training scans). It reports per-pair seconds, the
SSIM all-pairs time on the same volumes (the engine the workflow runs), and per reference row the
aligned MAE and RMSE ratios (n closest) of both searches, the closest training volume, and how far the
coarse search's distances lie above the full-resolution ones.

Training "patients": the CT under smooth random deformations (up to 6 mm) plus 10 HU noise. Synthetic:
shifted, rotated and mirrored copies of training scans (padded with air) and new deformations.

    python bench/real_anatomy/alignment_coarse_check.py --out results/bench/alignment_coarse_ct.json
    python bench/real_anatomy/alignment_coarse_check.py --profile results/bench/alignment_coarse_ct_profile.txt
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from alignment_ct_check import AIR, CT, cohort, load_ct  # noqa: E402

from synthaudit.relict import alignment as al  # noqa: E402
from synthaudit.relict.alignment_job import align_dataset  # noqa: E402
from synthaudit.relict.image_measures import all_pairs_image_measures  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
# the cohort: 60 training scans (every one a candidate, as init sets K for 60), 10 copies per kind and 40 new
# patients; 12 synthetic volumes also searched at full resolution; n = 50, and n = 20 for the ranking check
# (3n ranked, 1.6n aligned)
N_TRAINING, COPIES_PER_KIND, N_NEW, REFERENCE_ROWS, N_CLOSEST, N_RANKED, SEED = 60, 10, 40, 12, 50, 20, 47


def ratio(row: np.ndarray, n: int) -> float:
    s = np.sort(row)
    return float(s[0] / s[:n].mean())


def profile(args, syn_keys, train_keys, loaded, plain, cfg, grid, k, log, t_ssim) -> int:
    """The coarse-stage run over every pair under cProfile (where the alignment's time goes), to a text file."""
    import cProfile
    import io
    import pstats

    c = dict(cfg, coarse_mm=3.0, candidates=k, rank_candidates=k, recall={"sample": 0, "seed": 0})
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    got = align_dataset(syn_keys, train_keys, loaded, plain, c, grid, syn_keys, train_keys, N_CLOSEST,
                        mem_mb=8000, threads=args.threads, log=log)
    prof.disable()
    wall = time.perf_counter() - t0
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats(40)
    args.profile.parent.mkdir(parents=True, exist_ok=True)
    args.profile.write_text(f"{got.n_pairs} pairs aligned in {wall:.1f} s under cProfile; SSIM of the same pairs "
                            f"{t_ssim:.1f} s ({args.threads} threads)\n"
                            + text.getvalue().replace(str(ROOT) + "/", ""))  # paths relative to the checkout
    print(args.profile.read_text().splitlines()[0])
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "results/bench/alignment_coarse_ct.json")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--profile", type=Path, default=None,
                    help="only the coarse-stage run over every pair, under cProfile: its 40 costliest calls "
                         "(cumulative) written to this text file")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    log = logging.getLogger("coarse")
    rng = np.random.default_rng(SEED)
    sp = [1.5, 1.5, 1.5]
    base = load_ct(CT, 1.5)
    training, synthetic, truth = cohort(base, sp, N_TRAINING, COPIES_PER_KIND, N_NEW, rng)
    truth = [{"kind": t["kind"], "source": t["source"]} for t in truth]  # the JSON's rows name no transform
    log.info("cohort: %d training, %d synthetic on %s at 1.5 mm", len(training), len(synthetic), base.shape)
    volumes = {f"t{i}": v for i, v in enumerate(training)} | {f"s{i}": v for i, v in enumerate(synthetic)}
    affine = np.diag(sp + [1.0])

    def loaded(key):
        return volumes[key], affine

    syn, tr = np.stack(synthetic), np.stack(training)
    t0 = time.perf_counter()
    plain = all_pairs_image_measures(syn, tr, ["mae", "rmse"], data_range=float(tr.max() - tr.min()),
                                     threads=args.threads, device="cpu")
    t_plain = time.perf_counter() - t0
    t0 = time.perf_counter()
    all_pairs_image_measures(syn, tr, ["ssim"], data_range=float(tr.max() - tr.min()), threads=args.threads,
                             device="cpu")
    t_ssim = time.perf_counter() - t0
    log.info("plain MAE+RMSE %.1f s, SSIM %.1f s (%d pairs)", t_plain, t_ssim, syn.shape[0] * tr.shape[0])

    cfg = yaml.safe_load((ROOT / "params.yaml").read_text())["relict"]["alignment"]
    grid = {"shape": list(base.shape), "spacing_mm": sp}
    syn_keys, train_keys = [f"s{i}" for i in range(len(synthetic))], [f"t{i}" for i in range(len(training))]
    k = len(training)  # init: 3n ranked, 1.6n aligned (coarse stage) or 2n (none): all 60 here
    runs = {}
    ref_rows = sorted(int(i) for i in rng.choice(len(synthetic), REFERENCE_ROWS, replace=False))
    if args.profile:
        return profile(args, syn_keys, train_keys, loaded, plain, cfg, grid, k, log, t_ssim)
    for name, coarse_mm, rows in (("coarse_3mm", 3.0, list(range(len(synthetic)))), ("full_resolution", None, ref_rows)):
        c = dict(cfg, coarse_mm=coarse_mm, candidates=k, rank_candidates=k, recall={"sample": 0, "seed": 0})
        assert al.refine_factor(coarse_mm, sp) == (2 if coarse_mm else 1)
        t0 = time.perf_counter()
        got = align_dataset([syn_keys[i] for i in rows], train_keys, loaded, {m: plain[m][rows] for m in plain}, c,
                            grid, [syn_keys[i] for i in rows], train_keys, N_CLOSEST, mem_mb=8000,
                            threads=args.threads, log=log)
        runs[name] = {"rows": rows, "seconds": time.perf_counter() - t0, "pairs": got.n_pairs,
                      "matrices": {m: got.matrices[m] for m in ("mae", "rmse")}}
        log.info("%s: %d pairs in %.1f s", name, got.n_pairs, runs[name]["seconds"])

    # the ranking stage init writes on a grid with a coarse stage (3n ranked, the best 1.6n aligned), at a
    # smaller n so that 60 training scans leave something to rank: does it keep the n closest of the
    # all-aligned coarse run?
    n_rank = N_RANKED
    keep = int(np.ceil(1.6 * n_rank))
    c = dict(cfg, coarse_mm=3.0, candidates=keep, rank_candidates=min(3 * n_rank, k), recall={"sample": 0, "seed": 0})
    t0 = time.perf_counter()
    got = align_dataset(syn_keys, train_keys, loaded, plain, c, grid, syn_keys, train_keys, n_rank, mem_mb=8000,
                        threads=args.threads, log=log)
    t_ranked = time.perf_counter() - t0
    ranked_recall = {}
    for m in ("mae", "rmse"):
        every = runs["coarse_3mm"]["matrices"][m]
        recalls, errors = [], []
        for i in range(len(synthetic)):
            true = np.argsort(every[i], kind="stable")[:n_rank]
            recalls.append(float(np.mean(np.isclose(got.matrices[m][i][true], every[i][true], rtol=1e-6))))
            errors.append(abs(ratio(got.matrices[m][i], n_rank) - ratio(every[i], n_rank)))
        ranked_recall[m] = {"min_recall": min(recalls), "mean_recall": float(np.mean(recalls)),
                            "max_ratio_error": max(errors)}
    log.info("ranked (n %d: %d ranked, %d aligned): %.1f s; %s", n_rank, c["rank_candidates"], keep, t_ranked,
             ranked_recall)

    coarse, full = runs["coarse_3mm"], runs["full_resolution"]
    per_row = []
    for r, i in enumerate(ref_rows):
        entry = {"synthetic": syn_keys[i], **truth[i]}
        for m in ("mae", "rmse"):
            a, b = coarse["matrices"][m][i], full["matrices"][m][r]
            entry[m] = {"ratio_coarse": ratio(a, N_CLOSEST), "ratio_full": ratio(b, N_CLOSEST),
                        "closest_coarse": int(np.argmin(a)), "closest_full": int(np.argmin(b)),
                        "max_rel_above": float(np.max((a - b) / b)), "max_rel_below": float(np.max((b - a) / b))}
        per_row.append(entry)
    found = {}
    for kind in ("shifted", "rotated", "flipped"):
        idx = [i for i, t in enumerate(truth) if t["kind"] == kind]
        found[kind] = {m: f"{sum(int(np.argmin(coarse['matrices'][m][i])) == truth[i]['source'] for i in idx)} of "
                          f"{len(idx)}" for m in ("mae", "rmse")}
    n_pairs_coarse = coarse["pairs"]
    per_pair_full = full["seconds"] / max(full["pairs"], 1)
    out = {
        "ct": str(CT.relative_to(ROOT)),
        "grid": list(base.shape), "spacing_mm": sp, "n_training": len(training), "n_synthetic": len(synthetic),
        "threads": args.threads, "n_closest": N_CLOSEST, "search": cfg["search"],
        "seconds": {"plain_mae_rmse": round(t_plain, 1), "ssim": round(t_ssim, 1),
                    "align_coarse_3mm": round(coarse["seconds"], 1),
                    "align_full_resolution_reference_rows": round(full["seconds"], 1),
                    "align_full_resolution_all_rows_estimated": round(per_pair_full * n_pairs_coarse, 1)},
        "per_pair_s": {"coarse_3mm": round(coarse["seconds"] / max(n_pairs_coarse, 1), 4),
                       "full_resolution": round(per_pair_full, 4)},
        "align_coarse_over_ssim": round(coarse["seconds"] / t_ssim, 2),
        "copies_found_coarse": found,
        "ranked": {"n_closest": n_rank, "ranked": min(3 * n_rank, k), "aligned": keep, "seconds": round(t_ranked, 1),
                   "against_all_aligned_coarse": ranked_recall},
        "reference": {
            "rows": len(ref_rows),
            "same_closest": {m: sum(e[m]["closest_coarse"] == e[m]["closest_full"] for e in per_row)
                             for m in ("mae", "rmse")},
            "max_ratio_difference": {m: max(abs(e[m]["ratio_coarse"] - e[m]["ratio_full"]) for e in per_row)
                                     for m in ("mae", "rmse")},
            "max_rel_distance_above_full": {m: max(e[m]["max_rel_above"] for e in per_row) for m in ("mae", "rmse")},
            "per_row": per_row},
        "background_hu": AIR,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({k: out[k] for k in ("seconds", "per_pair_s", "align_coarse_over_ssim", "copies_found_coarse",
                                          "ranked")},
                     indent=1))
    print(json.dumps({k: v for k, v in out["reference"].items() if k != "per_row"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
