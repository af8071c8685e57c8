"""The shortlist search at scale (issue 31, item 5): ``make bench-shortlist``.

Why: the workflow's shortlist search (:mod:`synthaudit.relict.search`) computes each exact
RELICT measure on K = factor x n candidates per volume, where exhaustive search computes
every pair. This bench says, on a cohort far larger than the demo, what that saves and
what it costs in exactness:

* a simulated NCCT cohort (the bench generator, every volume its own anatomy; some
  synthetic volumes are noisy copies of training volumes) of ``--n-training`` training,
  ``--n-synthetic`` synthetic and ``--n-heldout`` held-out volumes on the 3 mm grid;
* the shortlist as the workflow runs it: the cheap stage for every volume, then the
  engine on the candidate pairs and on the ``--sample`` sampled rows (timed);
* exhaustive search of **every** row (timed), the reference: the recall of the exact top n
  over all synthetic volumes (not only the sampled ones, which are the workflow's own
  estimate and are reported beside it), the largest ratio error, and the calibrated calls
  (at ``--rate`` against the held-out null, each searched the same way) that change;
* a projection of 10,000 training x 5,000 synthetic volumes at 1 mm from the measured
  per-pair and per-volume costs, for one node like this one and for 50.

    PYTHONPATH=bench python -m synthaudit_bench.shortlist_scale --out results/bench/shortlist_scale.json
"""

from __future__ import annotations

import argparse
import math
import resource
import time
from pathlib import Path

import numpy as np

from synthaudit.io import write_json
from synthaudit.relict import calibration, search
from synthaudit.relict.image_measures import all_pairs_image_measures, shortlisted_image_measures
from synthaudit import registry

from .cohort import CohortSpec, ensure

GRID_1MM = (182, 218, 182)
PROJECTED = {"n_training": 10_000, "n_synthetic": 5_000}
THREADS, SEED, BLOCK_MM, RATE = 2, 0, 6.0, 0.05  # threads; cohort and sample seed; cheap-stage blocks; call rate
# seconds per pair measured at 1 mm on this machine (docs/benchmarks.md), for the second projection
PER_PAIR_1MM = {"mae": 0.00051, "rmse": 0.00051, "ssim": 0.0106}


def _log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def _cohort(args) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[int], float, tuple]:
    """Training, synthetic and held-out volumes (float32, in memory) and each synthetic volume's source (-1: new)."""
    shape = tuple(int(math.ceil(n / args.spacing)) for n in GRID_1MM)
    spec = CohortSpec(kind="ncct", n_synthetic=args.n_synthetic + args.n_heldout, n_training=args.n_training,
                      n_replicas=args.n_replicas, shape=shape, spacing_mm=(args.spacing,) * 3, n_classes=1,
                      embedding_dim=8, seed=SEED)
    cohort = ensure(spec, Path(args.cohort_root) / f"shortlist-ncct-{spec.key()}", log=_log)
    train = cohort.reader("training_images").read(0, args.n_training).astype(np.float32)
    queries = cohort.reader("synthetic_images").read(0, args.n_synthetic + args.n_heldout).astype(np.float32)
    replica_of = cohort.replica_of
    # held-out scans: the new (non-copy) volumes after the synthetic ones
    held = [i for i in range(args.n_synthetic, len(queries)) if replica_of[i] < 0]
    return (train, queries[:args.n_synthetic], queries[held], replica_of[:args.n_synthetic], cohort.data_range,
            shape)


def _engine(rows: np.ndarray, train: np.ndarray, measure: str, data_range: float, threads: int,
            pairs: np.ndarray | None) -> tuple[np.ndarray, float]:
    """The workflow's engine on ``rows`` x every training volume (only ``pairs`` when given); values and seconds."""
    start = time.perf_counter()
    values = shortlisted_image_measures(rows, train.__getitem__, len(train), [measure], pairs, data_range=data_range,
                                        threads=threads)[measure]
    return values, time.perf_counter() - start


def _calls(syn_scores, null_scores, rate):
    null = calibration.Null([str(i) for i in range(len(null_scores))], [f"h{i}" for i in range(len(null_scores))],
                            np.asarray(null_scores), ["t"] * len(null_scores))
    return calibration.calibrate(np.asarray(syn_scores), null, rate)["called"]


def run(args) -> dict:
    import torch

    torch.set_num_threads(THREADS)
    t0 = time.perf_counter()
    train, syn, held, replica_of, data_range, shape = _cohort(args)
    load_s = time.perf_counter() - t0
    n_t, n_s, n_h = len(train), len(syn), len(held)
    _log(f"cohort: {n_t} training, {n_s} synthetic ({sum(r >= 0 for r in replica_of)} copies), {n_h} held-out "
         f"volumes of {shape} at {args.spacing} mm; read in {load_s:.1f} s")
    factors = search.block_factors(BLOCK_MM, [args.spacing] * 3, shape)
    k = search.shortlist_size(args.n, n_t, args.factor)

    # 1. the cheap stage (every volume once) and the k-NN, as relict_shortlist runs them
    start = time.perf_counter()
    vec_train = [search.cheap_vectors(v, factors) for v in train]
    vec_syn = [search.cheap_vectors(v, factors) for v in syn]
    vec_held = [search.cheap_vectors(v, factors) for v in held]
    vectors_s = time.perf_counter() - start
    start = time.perf_counter()
    shortlists = {}
    for role, vecs, n_q in (("synthetic", vec_syn, n_s), ("heldout", vec_held, n_h)):
        shortlists[role] = search.build_shortlist(
            [str(i) for i in range(n_q)], [str(j) for j in range(n_t)], lambda vecs=vecs: iter(vecs),
            lambda: iter(vec_train), k=k, n_sample=args.sample, seed=SEED, factors=factors,
            block_mm=BLOCK_MM)
    knn_s = time.perf_counter() - start
    dims = len(vec_train[0]["raw"])
    _log(f"cheap stage: {factors} voxel blocks ({dims} numbers per volume), {vectors_s:.1f} s for {n_t + n_s + n_h} "
         f"volumes; k-NN (K = {k}) {knn_s:.1f} s")

    out = {"cohort": {"n_training": n_t, "n_synthetic": n_s, "n_heldout": n_h, "n_copies": int(sum(
        r >= 0 for r in replica_of)), "shape": list(shape), "spacing_mm": args.spacing, "seed": SEED},
        "settings": {"n": args.n, "factor": args.factor, "k": k, "block_mm": BLOCK_MM,
                     "block_voxels": list(factors), "sample": args.sample, "rate": RATE,
                     "threads": THREADS},
        "cheap_stage": {"vectors_s": vectors_s, "vectors_per_volume_s": vectors_s / (n_t + n_s + n_h),
                        "knn_s": knn_s, "dims": dims},
        "measures": {}}
    for measure in args.measures:  # compile the kernels first: the timings are of the work, not of numba
        all_pairs_image_measures(syn[:2], train[:4], [measure], data_range=data_range, threads=THREADS,
                                 pairs=np.eye(2, 4, dtype=bool))
    exact = {}
    for measure in args.measures:
        stage = search.stage_of(measure)
        res = {}
        # 2. the shortlist run: candidates and sampled rows of synthetic and held-out volumes
        masks = {role: shortlists[role].pairs(stage) for role in shortlists}
        short_syn, s_syn = _engine(syn, train, measure, data_range, THREADS, masks["synthetic"])
        short_held, s_held = _engine(held, train, measure, data_range, THREADS, masks["heldout"])
        pairs_short = int(masks["synthetic"].sum() + masks["heldout"].sum())
        pairs_cand = int(sum(shortlists[role].shortlisted(stage).sum() for role in shortlists))
        _log(f"{measure}: shortlist {pairs_short} pairs in {s_syn + s_held:.1f} s")
        # 3. exhaustive: every row (the reference)
        full_syn, f_syn = _engine(syn, train, measure, data_range, THREADS, None)
        full_held, f_held = _engine(held, train, measure, data_range, THREADS, None)
        pairs_full = full_syn.size + full_held.size
        _log(f"{measure}: exhaustive {pairs_full} pairs in {f_syn + f_held:.1f} s")
        # the shortlist's values are the exhaustive ones, bit for bit (same kernels, skipped work)
        for short, full, mask in ((short_syn, full_syn, masks["synthetic"]), (short_held, full_held,
                                                                                masks["heldout"])):
            assert np.array_equal(short[mask], full[mask]), f"{measure}: shortlist values differ from exhaustive"
        d_full = registry.to_distance(measure, full_syn)
        h_full = registry.to_distance(measure, full_held)
        # a shortlist-only run: each row on its candidates alone (the workflow uses the sampled rows' exact
        # values in its ranking; here every row is judged on its candidates, the harder case)
        cand_s = shortlists["synthetic"].shortlisted(stage)
        cand_h = shortlists["heldout"].shortlisted(stage)
        every = search.recall_check(d_full, cand_s, np.arange(n_s), args.n)
        every_h = search.recall_check(h_full, cand_h, np.arange(n_h), args.n)
        sampled = search.recall_check(d_full, cand_s, shortlists["synthetic"].sampled, args.n)
        exact_calls = _calls(every["ratio_exact"], every_h["ratio_exact"], RATE)
        short_calls = _calls(every["ratio_shortlist"], every_h["ratio_shortlist"], RATE)
        copies = np.array([r >= 0 for r in replica_of])
        source_closest = [int(np.argmin(d_full[i])) == replica_of[i] for i in range(n_s) if replica_of[i] >= 0]
        res.update({
            "shortlist": {"wall_s": s_syn + s_held, "pairs": pairs_short, "pairs_fraction": pairs_short / pairs_full,
                          "candidate_pairs": pairs_cand, "candidate_fraction": pairs_cand / pairs_full,
                          "sample_pairs": pairs_short - pairs_cand},
            "exhaustive": {"wall_s": f_syn + f_held, "pairs": pairs_full, "s_per_pair": (f_syn + f_held) / pairs_full},
            "speedup_with_cheap_stage": (f_syn + f_held) / (s_syn + s_held + vectors_s + knn_s),
            "recall_top_n_all_synthetic": every["recall_top_n"], "min_recall_all_synthetic": every["min_recall"],
            "rows_with_recall_below_1": int(np.sum(every["recall"] < 1)),
            "recall_top_n_heldout": every_h["recall_top_n"],
            "recall_top_n_sampled": sampled["recall_top_n"], "n_sampled": int(len(sampled["rows"])),
            "closest_found": float(np.mean(every["closest_found"])),
            "max_ratio_error": every["max_ratio_error"], "max_ratio_error_heldout": every_h["max_ratio_error"],
            "calls_exhaustive": int(exact_calls.sum()), "calls_shortlist": int(short_calls.sum()),
            "calls_changed": int(np.sum(exact_calls != short_calls)),
            "copies_called_exhaustive": int(np.sum(exact_calls & copies)),
            "copies_with_source_closest": int(sum(source_closest)),
        })
        _log(f"{measure}: recall of the exact top {args.n}: {res['recall_top_n_all_synthetic']:.5f} over all "
             f"{n_s} synthetic volumes (sampled rows: {res['recall_top_n_sampled']:.5f}); largest ratio error "
             f"{res['max_ratio_error']:.3g}; calls changed {res['calls_changed']} of {res['calls_exhaustive']}")
        out["measures"][measure] = res
        exact[measure] = (d_full, h_full)
    out["sweep"] = sweep(args, train, syn, held, exact, shape)
    out["projection"] = projection(out, shape)
    out["projection_measured_1mm"] = projection(out, shape, PER_PAIR_1MM)
    out["peak_rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    out["total_s"] = time.perf_counter() - t0
    # issue 31's target, on the candidate pairs (the sampled rows measure the recall in every workflow run;
    # their share is sample / synthetic volumes: 10 % of 200 here, 0.4 % of 5,000)
    met = {m: v["shortlist"]["candidate_fraction"] <= 0.10 and v["recall_top_n_all_synthetic"] >= 0.999
           and v["calls_changed"] == 0 for m, v in out["measures"].items()}
    out["targets"] = {"candidate_pairs_at_most_10_percent_recall_at_least_0.999_no_call_changed": met}
    return out


def sweep(args, train, syn, held, exact: dict, shape) -> list[dict]:
    """Recall of the exact top n over every synthetic and held-out volume, per block size and K factor:
    the trade-off behind the defaults, from the exhaustive matrices already computed (no exact work)."""
    rows = []
    for block_mm in args.sweep_block_mm:
        factors = search.block_factors(block_mm, [args.spacing] * 3, shape)
        start = time.perf_counter()
        vt = {st: np.stack([search.cheap_vectors(v, factors)[st] for v in train]) for st in ("raw", "standardised")}
        vq = {role: {st: np.stack([search.cheap_vectors(v, factors)[st] for v in vols]) for st in vt}
              for role, vols in (("synthetic", syn), ("heldout", held))}
        vectors_s = time.perf_counter() - start
        for factor in args.sweep_factors:
            k = search.shortlist_size(args.n, len(train), factor)
            row = {"block_mm": block_mm, "factor": factor, "k": k, "candidate_fraction": k / len(train),
                   "vectors_s": vectors_s}
            for m, (d_syn, d_held) in exact.items():
                st = search.stage_of(m)
                for role, d in (("synthetic", d_syn), ("heldout", d_held)):
                    cand = search.nearest(vq[role][st], vt[st], k)[0]
                    mask = np.zeros(d.shape, bool)
                    mask[np.repeat(np.arange(len(cand)), k), cand.ravel()] = True
                    chk = search.recall_check(d, mask, np.arange(len(d)), args.n)
                    row[f"{m}_{role}_recall"] = chk["recall_top_n"]
                    row[f"{m}_{role}_max_ratio_error"] = chk["max_ratio_error"]
            rows.append(row)
            _log("sweep: " + ", ".join(f"{k_}={v:.5g}" if isinstance(v, float) else f"{k_}={v}"
                                       for k_, v in row.items()))
    return rows


def projection(out: dict, shape: tuple, per_pair_1mm: dict | None = None) -> list[dict]:
    """10,000 x 5,000 at 1 mm from this run's per-pair and per-volume costs, scaled by voxel count.

    The per-pair cost of every measure and the per-volume cost of the cheap stage grow with
    the voxels (they stream them); the k-NN's matrix product grows with the queries x
    training x dims. ``per_pair_1mm`` replaces a measure's scaled cost by one measured at
    1 mm (docs/benchmarks.md: cache effects make SSIM at 1 mm dearer than the voxel ratio
    says). One node is this machine (2 cores); 50 nodes split the pairs and the volumes
    evenly (shards), the k-NN runs once. Reading the volumes from disk is not included.
    """
    scale = math.prod(GRID_1MM) / math.prod(shape)
    s, t = PROJECTED["n_synthetic"], PROJECTED["n_training"]
    k = search.shortlist_size(out["settings"]["n"], t, out["settings"]["factor"])
    sample = out["settings"]["sample"]
    pairs_exh = s * t
    pairs_short = s * k + sample * t
    cheap = out["cheap_stage"]
    # the block means' count depends on the field of view in mm, not on the voxels
    dims_1mm = math.prod(math.ceil(n / f) for n, f in zip(
        GRID_1MM, search.block_factors(out["settings"]["block_mm"], [1.0] * 3, GRID_1MM)))
    n_now = out["cohort"]["n_synthetic"] + out["cohort"]["n_heldout"]
    knn_per_product = cheap["knn_s"] / (n_now * out["cohort"]["n_training"] * cheap["dims"])
    vectors_h = (s + t) * cheap["vectors_per_volume_s"] * scale / 3600
    knn_h = s * t * dims_1mm * knn_per_product / 3600
    rows = []
    for m, r in out["measures"].items():
        per_pair = (per_pair_1mm or {}).get(m, r["exhaustive"]["s_per_pair"] * scale)
        exh_h = pairs_exh * per_pair / 3600
        short_h = pairs_short * per_pair / 3600
        rows.append({"measure": m, "s_per_pair_1mm": per_pair, "pairs_exhaustive": pairs_exh,
                     "pairs_shortlist": pairs_short, "k": k,
                     "exhaustive_h_1_node": exh_h, "exhaustive_h_50_nodes": exh_h / 50,
                     "shortlist_h_1_node": short_h + vectors_h + knn_h,
                     "shortlist_h_50_nodes": (short_h + vectors_h) / 50 + knn_h,
                     "cheap_stage_h_1_node": vectors_h + knn_h})
    return rows


def markdown(out: dict) -> str:
    c, st = out["cohort"], out["settings"]
    lines = [f"Cohort: {c['n_training']} training x {c['n_synthetic']} synthetic ({c['n_copies']} copies) + "
             f"{c['n_heldout']} held-out at {c['spacing_mm']} mm {tuple(c['shape'])}; n = {st['n']}, K = {st['k']}, "
             f"blocks {st['block_voxels']} voxels, {st['threads']} threads. Cheap stage "
             f"{out['cheap_stage']['vectors_s']:.0f} s + k-NN {out['cheap_stage']['knn_s']:.1f} s.", "",
             "| measure | search | wall s | pairs | recall top-n (all / sampled) | max ratio error | calls changed |",
             "|---|---|---|---|---|---|---|"]
    for m, r in out["measures"].items():
        ex = r["exhaustive"]
        lines.append(f"| {m} | exhaustive | {ex['wall_s']:.1f} | {ex['pairs']:,} | 1 | 0 | - |")
        sh = r["shortlist"]
        lines.append(f"| {m} | shortlist | {sh['wall_s']:.1f} | {sh['candidate_pairs']:,} candidates "
                     f"({100 * sh['candidate_fraction']:.1f} %) + {sh['sample_pairs']:,} sampled rows "
                     f"({100 * sh['pairs_fraction']:.1f} % in all) | {r['recall_top_n_all_synthetic']:.5f} / "
                     f"{r['recall_top_n_sampled']:.5f} (held-out {r['recall_top_n_heldout']:.5f}) | "
                     f"{r['max_ratio_error']:.3g} | {r['calls_changed']} of {r['calls_exhaustive']} |")
    if out.get("sweep"):
        ms = list(out["measures"])
        lines += ["", "Recall of the exact top n over every synthetic (held-out) volume by block size and K:", "",
                  "| block mm | K | candidates | " + " | ".join(ms) + " |", "|---|---|---|" + "---|" * len(ms)]
        for w in out["sweep"]:
            lines.append(f"| {w['block_mm']:g} | {w['k']} | {100 * w['candidate_fraction']:.1f} % | " + " | ".join(
                f"{w[f'{m}_synthetic_recall']:.4f} ({w[f'{m}_heldout_recall']:.4f})" for m in ms) + " |")
    for key, title in (("projection", "scaled from this run's per-pair costs by voxel count"),
                       ("projection_measured_1mm", "with the per-pair costs measured at 1 mm (docs/benchmarks.md)")):
        if not out.get(key):
            continue
        lines += ["", f"Projection to 10,000 training x 5,000 synthetic at 1 mm, {title} (hours):", "",
                  "| measure | s per pair at 1 mm | exhaustive, 1 node | exhaustive, 50 nodes | shortlist, 1 node | "
                  "shortlist, 50 nodes |", "|---|---|---|---|---|---|"]
        for p in out[key]:
            lines.append(f"| {p['measure']} | {p['s_per_pair_1mm']:.4f} | {p['exhaustive_h_1_node']:,.0f} | "
                         f"{p['exhaustive_h_50_nodes']:,.1f} | {p['shortlist_h_1_node']:,.1f} | "
                         f"{p['shortlist_h_50_nodes']:,.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m synthaudit_bench.shortlist_scale",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--n-training", type=int, default=2000)
    parser.add_argument("--n-synthetic", type=int, default=200)
    parser.add_argument("--n-heldout", type=int, default=40)
    parser.add_argument("--n-replicas", type=int, default=20, help="copies among synthetic + held-out draws")
    parser.add_argument("--spacing", type=float, default=3.0)
    parser.add_argument("--n", type=int, default=50, help="the ratio's n closest (RELICT: 50)")
    parser.add_argument("--factor", type=float, default=4.0, help="K = factor x n")
    parser.add_argument("--sample", type=int, default=20)
    parser.add_argument("--measures", nargs="+", default=["mae", "rmse", "ssim"])
    parser.add_argument("--sweep-block-mm", type=float, nargs="*", default=[6.0, 12.0])
    parser.add_argument("--sweep-factors", type=float, nargs="*", default=[3.0, 4.0, 6.0])
    parser.add_argument("--cohort-root", default="results/bench/cohort")
    parser.add_argument("--out", default="results/bench/shortlist_scale.json")
    args = parser.parse_args(argv)
    out = run(args)
    out["command"] = "python -m synthaudit_bench.shortlist_scale " + " ".join(argv or [])
    write_json(args.out, out)
    Path(args.out).with_suffix(".md").write_text(markdown(out))
    print(markdown(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
