"""Snakemake adapter: alignment-aware image measures (relict.alignment) for one dataset.

Candidates for every synthetic volume from a group search on block means (all pairs,
training volumes streamed; one matrix product per synthetic volume and group element, with
exact early rejection), then the full-resolution search on those K pairs only (coarse-to-fine
from block means of about ``coarse_mm``, or every shift at full resolution). With
``rank_candidates`` on a grid finer than ``coarse_mm``, that many are pre-selected and ranked
by the coarse search first, and only the best K of them go on to full resolution;
each aligned measure's matrix is the plain one with the candidate pairs replaced by
their aligned value when lower. The per-pair transforms go to alignment.tsv. A seeded
sample of rows is also aligned to every training volume (relict.alignment.recall): the
recall of the exact n closest among the candidates goes to alignment_recall.json.
"""

import json
import time

import numpy as np

from synthaudit.io import check_on_grid, load_volume, write_json, write_tsv
from synthaudit.logs import Progress, logged
from synthaudit.relict import alignment as al
from synthaudit.relict import matrix
from synthaudit.relict import search as relict_search

with logged(snakemake.log[0]) as log:
    cfg = snakemake.params.alignment
    search = cfg["search"]
    space = al.SearchSpace() if search == "none" else al.SearchSpace.from_params(search)
    grid = json.loads(open(snakemake.input.grid).read())
    measures = list(snakemake.params.measures)
    syn_ids, train_ids = list(snakemake.params.synthetic_ids), list(snakemake.params.training_ids)
    # a pair the shortlist search (relict.search) did not compute is +inf: never among the n closest
    # unless its alignment is computed here
    plain = {m: np.asarray(matrix.load(path, syn_ids, train_ids, expected="the dataset's plan").distances, np.float64)
             for m, path in zip(measures, snakemake.input.plain)}

    def loaded(path):
        data, affine = load_volume(path)
        check_on_grid(path, data, affine, grid)
        return data, affine

    spacing = None
    start = time.perf_counter()
    n_syn, n_train = len(snakemake.input.synthetic), len(snakemake.input.training)
    k = min(int(cfg["candidates"]), n_train)
    factor, background = al.refine_factor(cfg.get("coarse_mm"), grid["spacing_mm"]), 0.0
    # relict.alignment.rank_candidates: on grids finer than coarse_mm, pre-select more and rank them
    # on the coarse search; only the best k are aligned at full resolution
    k_pre = min(max(k, int(cfg.get("rank_candidates") or k)), n_train) if factor > 1 else k
    if space.is_identity:
        log.info("search space none: the aligned measures are the plain ones")
        candidates, pairs = np.zeros((n_syn, 0), np.int64), [[] for _ in range(n_syn)]
        t_pre = 0.0
    else:
        # the stack of moved and shifted rows gets half of the job's memory (resources mem_mb)
        budget = 0.5 * float(snakemake.resources.mem_mb) * 2 ** 20  # the rule's resources always set it
        factor_pre = al.preselect_factor(float(cfg["preselect_block_mm"]), grid["shape"], grid["spacing_mm"], space,
                                         budget)
        log.info("pre-selection on %d-voxel block means (%s mm; preselect_block_mm %s, memory budget %.1f GB)",
                 factor_pre, " x ".join(f"{factor_pre * s:.2g}" for s in grid["spacing_mm"]),
                 cfg["preselect_block_mm"], budget / 1e9)
        allowed = None
        if snakemake.input.get("shortlist"):  # relict.search: align among each volume's shortlist only
            shortlist = relict_search.aligned_to(relict_search.Shortlist.load(snakemake.input.shortlist[0]),
                                                 syn_ids, train_ids, "the dataset's plan")
            mask = shortlist.pairs("raw")
            allowed = [np.flatnonzero(row) for row in mask]
            log.info("shortlist search: pre-selection among %d of %d pairs", int(mask.sum()), mask.size)
        candidates, hypotheses, spacing, background = al.preselect_volumes(
            snakemake.input.synthetic, snakemake.input.training, loaded, space, k_pre, factor_pre, allowed=allowed,
            n_hypotheses=int(cfg["hypotheses"]), workers=snakemake.threads, max_stack_bytes=budget,
            progress=Progress(log, "pre-selection on block means: synthetic volumes", n_syn))
        t_pre = time.perf_counter() - start
        log.info("pre-selection: %d x %d pairs, %d group elements, %.1f s; %d candidates each; background %.4g "
                 "(median of the training volumes' faces: what shifts and rotations pad with)", n_syn, n_train,
                 len(space.flips()) * len(space.rotations()), t_pre, k_pre, background)
        log.info("full-resolution search: %s", (f"coarse-to-fine from {factor}x block means" if factor > 1
                 else "every shift at full resolution") + (f"; the {k_pre} candidates ranked on the block means, "
                                                           f"the best {k} aligned at full resolution"
                                                           if k_pre > k else ""))
        candidates, pairs = al.align_candidates_ranked(
            snakemake.input.synthetic, snakemake.input.training, loaded, candidates, hypotheses, space, spacing,
            workers=snakemake.threads, factor=factor, background=background, keep=k,
            plain=(plain["mae"], plain["rmse"]) if {"mae", "rmse"} <= set(plain) else None,
            progress=Progress(log, "full-resolution alignment: synthetic volumes", n_syn))
    seconds = time.perf_counter() - start
    n_pairs = int(sum(len(r) for r in pairs))
    log.info("alignment: %d candidate pairs in %.1f s (%.2f s per pair, pre-selection %.1f s)", n_pairs, seconds,
             (seconds - t_pre) / max(n_pairs, 1), t_pre)
    spacing = spacing or [1.0, 1.0, 1.0]
    matrices = al.aligned_matrices(plain, candidates, pairs, spacing)
    for m, out in zip(measures, snakemake.output.measures):
        matrix.MeasureMatrix(matrices[m], f"{m}_aligned", syn_ids, train_ids, seconds, distances=matrices[m],
                             extras={"transform": matrices[f"{m}_transform"], "plain": plain[m]}).save(out)
        lowered = int(np.sum(matrices[m] < plain[m]))
        log.info("%s_aligned: %d of %d candidate pairs closer than plain", m, lowered, n_pairs)
    write_tsv(snakemake.output.table, al.alignment_rows(syn_ids, train_ids, candidates, pairs, plain, spacing),
              al.alignment_columns(measures))

    # the recall check (relict.alignment.recall): a seeded sample of rows aligned to every training
    # volume over the whole group; were the exact n closest among the K candidates?
    rcfg = cfg.get("recall") or {"sample": 0, "seed": 0}
    n_check = 0 if space.is_identity or k >= n_train else min(int(rcfg["sample"]), n_syn)
    rows = sorted(int(i) for i in np.random.default_rng(int(rcfg["seed"])).choice(n_syn, n_check, replace=False))
    t_check = time.perf_counter()
    report = {"k": k, "ranked": k_pre, "n_training": n_train, "sample": int(rcfg["sample"]), "seed": int(rcfg["seed"]),
              "pairs_aligned": n_pairs, "rows": [syn_ids[i] for i in rows], "measures": {}}
    if rows:
        everything = np.tile(np.arange(n_train), (len(rows), 1))
        full = al.align_candidates([snakemake.input.synthetic[i] for i in rows], snakemake.input.training, loaded,
                                   everything, [None] * len(rows), space, spacing, workers=snakemake.threads,
                                   factor=factor, background=background,
                                   plain=(plain["mae"][rows], plain["rmse"][rows]) if {"mae", "rmse"} <= set(plain)
                                   else None,
                                   progress=Progress(log, "recall check: sampled volumes aligned to every training "
                                                     "volume", len(rows)))
        exhaustive = al.aligned_matrices({m: plain[m][rows] for m in measures}, everything, full, spacing)
    mask = np.zeros((len(rows), n_train), bool)
    for r, i in enumerate(rows):
        mask[r, candidates[i]] = True
    for m in measures:
        ex = exhaustive[m] if rows else np.zeros((0, n_train))
        report["measures"][m] = relict_search.alignment_recall(ex, matrices[m][rows], mask, snakemake.params.n_closest)
    write_json(snakemake.output.recall, report)  # no time in it: the same bytes on every run (dvc status)
    if rows:
        log.info("recall check: %d volumes aligned to all %d training volumes in %.1f s; recall of the exact %d "
                 "closest among the %d candidates: %s; largest ratio error %s", len(rows), n_train,
                 time.perf_counter() - t_check, min(snakemake.params.n_closest, n_train), k,
                 ", ".join(f"{m} {report['measures'][m]['recall_top_n']:.4f}" for m in measures),
                 ", ".join(f"{m} {report['measures'][m]['max_ratio_error']:.3g}" for m in measures))
    else:
        log.info("recall check: none (%s)", "every training volume is a candidate" if k >= n_train and
                 not space.is_identity else "relict.alignment.recall.sample is 0" if not space.is_identity
                 else "search space none")
