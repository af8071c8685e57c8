"""Snakemake adapter: alignment-aware image measures (relict.alignment) for one dataset.

Candidates for every synthetic volume from a group search on block means (all pairs,
training volumes streamed), then the full-resolution search on those K pairs only;
each aligned measure's matrix is the plain one with the candidate pairs replaced by
their aligned value when lower. The per-pair transforms go to alignment.tsv.
"""

import functools
import json
import time

import numpy as np

from synthaudit.io import atomic_path, check_on_grid, load_volume, spacing_from_affine, write_tsv
from synthaudit.logs import Progress, logged
from synthaudit.relict import alignment as al

with logged(snakemake.log[0]) as log:
    cfg = snakemake.params.alignment
    search = cfg["search"]
    space = al.SearchSpace() if search == "none" else al.SearchSpace.from_params(search)
    grid = json.loads(open(snakemake.input.grid).read())
    measures = list(snakemake.params.measures)
    plain = {}
    for m, path in zip(measures, snakemake.input.plain):
        with np.load(path) as npz:
            plain[m] = np.asarray(npz["values"], np.float64)
            if list(npz["synthetic_ids"]) != list(snakemake.params.synthetic_ids) or \
                    list(npz["training_ids"]) != list(snakemake.params.training_ids):
                raise ValueError(f"{path}: its ids differ from the dataset's plan; rerun relict_gather")

    def loaded(path):
        data, affine = load_volume(path)
        check_on_grid(path, data, affine, grid)
        return data, affine

    spacing = None
    factor = int(cfg["preselect_downsample"])
    start = time.perf_counter()
    n_syn, n_train = len(snakemake.input.synthetic), len(snakemake.input.training)
    k = min(int(cfg["candidates"]), n_train)
    if space.is_identity:
        log.info("search space none: the aligned measures are the plain ones")
        candidates, pairs = np.zeros((n_syn, 0), np.int64), [[] for _ in range(n_syn)]
        t_pre = 0.0
    else:
        small_syn, small_train = [], []
        for p in snakemake.input.synthetic:
            v, affine = loaded(p)
            spacing = spacing if spacing is not None else [float(x) for x in spacing_from_affine(affine)]
            small_syn.append(al.block_mean(v, factor))
        for p in snakemake.input.training:
            small_train.append(al.block_mean(loaded(p)[0], factor))
        candidates, hypotheses = al.preselect(
            small_syn, small_train, space, [s * factor for s in spacing], k, factor=1,
            n_hypotheses=int(cfg["hypotheses"]), workers=snakemake.threads,
            progress=Progress(log, "pre-selection on block means: synthetic volumes", n_syn))
        t_pre = time.perf_counter() - start
        log.info("pre-selection: %d x %d pairs, %d group elements, %.1f s; %d candidates each", n_syn, n_train,
                 len(space.flips()) * len(space.rotations()), t_pre, k)
        # Candidate lists of different synthetic volumes overlap (the same few training scans
        # are close to many), so training volumes are kept in a bounded cache instead of
        # being read K times per synthetic volume; at least K fit, about 2 GB in all.
        per_volume = 4 * int(np.prod(grid["shape"]))

        @functools.lru_cache(maxsize=max(k, int(2e9 // per_volume)))
        def training_volume(j):
            v = loaded(snakemake.input.training[j])[0]
            v.setflags(write=False)  # shared between pairs: never changed in place
            return v

        pairs = []
        progress = Progress(log, "full-resolution alignment: synthetic volumes", n_syn)
        for i, p in enumerate(snakemake.input.synthetic):
            s = loaded(p)[0]
            targets = [training_volume(int(j)) for j in candidates[i]]
            pairs.append(al.align_pair_set(s, targets, space, spacing, hypotheses[i], workers=snakemake.threads))
            progress(i + 1)
    seconds = time.perf_counter() - start
    n_pairs = int(sum(len(r) for r in pairs))
    log.info("alignment: %d candidate pairs in %.1f s (%.2f s per pair, pre-selection %.1f s)", n_pairs, seconds,
             (seconds - t_pre) / max(n_pairs, 1), t_pre)
    spacing = spacing or [1.0, 1.0, 1.0]
    matrices = al.aligned_matrices(plain, candidates, pairs, spacing)
    syn_ids, train_ids = list(snakemake.params.synthetic_ids), list(snakemake.params.training_ids)
    for m, out in zip(measures, snakemake.output.measures):
        with atomic_path(out) as tmp:
            np.savez(tmp, values=matrices[m], distances=matrices[m], measure=f"{m}_aligned",
                     synthetic_ids=np.array(syn_ids), training_ids=np.array(train_ids), seconds=seconds,
                     transform=matrices[f"{m}_transform"], plain=plain[m])
        lowered = int(np.sum(matrices[m] < plain[m]))
        log.info("%s_aligned: %d of %d candidate pairs closer than plain", m, lowered, n_pairs)
    rows = []
    for i, row in enumerate(pairs):
        for rank, (j, pr) in enumerate(zip(candidates[i], row), start=1):
            r = {"synthetic_id": syn_ids[i], "candidate_rank": rank, "training_id": train_ids[j],
                 "transform": pr.transform.describe(spacing), "flip_axes": "".join(map(str, pr.transform.flips)),
                 "rotation_axis": pr.transform.rotation_axis if pr.transform.angle_deg else "",
                 "angle_deg": pr.transform.angle_deg,
                 **{f"shift_{a}_mm": pr.transform.shift_vox[n] * spacing[n] for n, a in enumerate("xyz")}}
            for m in measures:
                r[f"{m}_plain"], r[f"{m}_aligned"] = float(plain[m][i, j]), float(getattr(pr, m))
            rows.append(r)
    cols = ["synthetic_id", "candidate_rank", "training_id", "transform", "flip_axes", "rotation_axis", "angle_deg",
            "shift_x_mm", "shift_y_mm", "shift_z_mm"] + [f"{m}_{k}" for m in measures for k in ("plain", "aligned")]
    write_tsv(snakemake.output.table, rows, cols)
