"""Snakemake adapter: local replicas of one dataset (relict.local; synthaudit.relict.local).

Every synthetic volume and every held-out scan of its training set is compared block by
block with every training scan (volumes smoothed by ``smooth_mm`` first); RELICT's ratio per
block; each block relative to the held-out scans' median there; a volume's lowest block is
its local score, calibrated against the held-out scans' own (leave-patient-out) at
``relict.calibration.rate``. Writes ``local_calls.tsv`` (one row per synthetic volume, most
suspicious first: score, rate, call, the block's centre in mm and voxel range, the training
scan and patient it matches), ``local.json`` (settings, counts, the held-out check) and a
figure of the most suspicious volumes.
"""

from pathlib import Path

import numpy as np

from synthaudit.io import check_on_grid, load_volume, write_json, write_tsv
from synthaudit.logs import Progress, logged
from synthaudit.relict import calibration, local
from synthaudit.relict.alignment import background_level

COLUMNS = ["rank", "synthetic_id", "local_score", "fpr", "n_null", "called", "closest_training_id",
           "closest_patient_id", "block_centre_mm", "block_voxels", "blocks_tested"]

with logged(snakemake.log[0]) as log:
    import json

    cfg, p = snakemake.params.local, snakemake.params
    grid_info = json.loads(open(snakemake.input.grid).read())
    spacing = [float(s) for s in grid_info["spacing_mm"]]
    affine = np.asarray(grid_info["affine"], np.float64)
    for ids, paths, what in ((p.synthetic_ids, snakemake.input.synthetic, "synthetic"),
                             (p.heldout_ids, snakemake.input.heldout, "held-out")):
        names = [Path(x).name for x in paths]
        if names != [f"{i}.nii.gz" for i in ids]:
            raise ValueError(f"{what} volumes and ids disagree ({names[:3]} vs {list(ids)[:3]}): the plan is stale")

    smooth = float(cfg.get("smooth_mm", 0.0))
    sigma = [smooth / s for s in spacing]

    def read(path):
        data, aff = load_volume(path)
        check_on_grid(path, data, aff, grid_info)
        data = np.asarray(data, np.float32)
        if smooth > 0:
            from scipy.ndimage import gaussian_filter

            data = gaussian_filter(data, sigma).astype(np.float32)
        return data

    def raw(path):
        return np.asarray(load_volume(path)[0], np.float32)

    train_paths = list(snakemake.input.training)
    window = grid_info.get("intensity_range")
    first = [raw(x) for x in train_paths[: min(len(train_paths), 20)]]
    background = background_level(first)
    if window is not None:
        data_range, ceiling = float(window[1] - window[0]), float(window[1])
    else:
        data_range, ceiling = float(max(v.max() for v in first) - min(v.min() for v in first)), None
    shape = tuple(first[0].shape)
    grid = local.BlockGrid.from_mm(shape, spacing, float(cfg["block_mm"]), clamp=True)
    wanted = [max(1, int(round(float(cfg["block_mm"]) / (2 * s)))) for s in spacing]
    if list(grid.cell) != wanted:
        log.warning("local: the grid %s is too thin for blocks of %s mm along some axis; blocks of %s voxels there",
                    list(shape), cfg["block_mm"], [2 * c for c in grid.cell])
    mean = np.mean([read(x) for x in train_paths], axis=0) if smooth > 0 else np.mean(
        [raw(x) for x in train_paths], axis=0)
    keep = local.anatomy_blocks(grid, mean, background, data_range)
    log.info("blocks of %s voxels (%s mm, half-block stride): %d of %d inside the anatomy; smoothing %.3g mm; "
             "background %.4g, data range %.4g%s", "x".join(str(2 * c) for c in grid.cell),
             " x ".join(f"{2 * c * s:.3g}" for c, s in zip(grid.cell, spacing)), int(keep.sum()), grid.n_blocks,
             smooth, background, data_range, f", ceiling {ceiling:.4g} (window)" if ceiling is not None else "")

    if not keep.any():
        log.warning("local: no block of %s mm has anatomy in at least half its voxels (off the background %.4g by 5 %% "
                    "of the range): nothing to test; a smaller relict.local.block_mm may fit", cfg["block_mm"],
                    background)
    syn = np.stack([read(x) for x in snakemake.input.synthetic])
    held = np.stack([read(x) for x in snakemake.input.heldout])
    queries = np.concatenate([syn, held])
    progress = Progress(log, "training volumes compared block by block", len(train_paths))
    measure = {"squared": "mse", "absolute": "mae"}[cfg.get("error", "squared")]
    d = local.all_pairs_block_distances(queries, (read(x) for x in train_paths), grid, measure, keep,
                                        progress=progress)
    valid = local.volume_blocks(grid, np.concatenate([np.stack([raw(x) for x in snakemake.input.synthetic]),
                                                      np.stack([raw(x) for x in snakemake.input.heldout])]),
                                background, data_range, keep, ceiling=ceiling)
    n_syn = len(syn)
    ratios = local.block_ratios(d, int(p.n_closest))
    r_syn = local.BlockRatios(ratios.ratio[:n_syn], ratios.closest[:n_syn], ratios.n_used)
    r_held = local.BlockRatios(ratios.ratio[n_syn:], ratios.closest[n_syn:], ratios.n_used)
    held_scores = local.local_scores(r_held, r_held, list(p.heldout_patients), self_is_heldout=True,
                                     valid=valid[n_syn:])
    # a synthetic volume made from a held-out scan is judged without that patient's scans
    sources = [p.source_patients.get(i) for i in p.synthetic_ids]
    hp = np.asarray(p.heldout_patients)
    score = np.empty(n_syn)
    block = np.zeros(n_syn, int)
    closest = np.zeros(n_syn, int)
    zmaps = np.empty((n_syn, int(keep.sum())))
    for src in sorted(set(sources), key=str):
        mine = np.array([s == src for s in sources])
        ref = r_held if src is None else local.BlockRatios(r_held.ratio[hp != src], r_held.closest[hp != src],
                                                            r_held.n_used)
        sc = local.local_scores(local.BlockRatios(r_syn.ratio[mine], r_syn.closest[mine], r_syn.n_used), ref,
                                valid=valid[:n_syn][mine])
        score[mine], block[mine], closest[mine], zmaps[mine] = sc.score, sc.block, sc.closest, sc.z
    null = calibration.Null(list(p.heldout_ids), list(p.heldout_patients), held_scores.score,
                            [p.training_ids[j] for j in held_scores.closest])
    rate = float(p.rate)
    calls = calibration.calibrate(score, null, rate, sources)
    check = calibration.heldout_check(null, rate)
    kept = np.flatnonzero(keep)
    order = np.lexsort((np.asarray(p.synthetic_ids, dtype=str), score))
    rows = []
    for rank, i in enumerate(order, start=1):
        if not np.isfinite(score[i]):  # no block of this volume could be tested
            rows.append({"rank": rank, "synthetic_id": p.synthetic_ids[i], "local_score": "NA", "fpr": "NA",
                         "n_null": int(calls["n_null"][i]), "called": 0, "closest_training_id": "NA",
                         "closest_patient_id": "NA", "block_centre_mm": "NA", "block_voxels": "NA",
                         "blocks_tested": int(valid[i].sum()) if valid.shape[1] else 0})
            continue
        b = int(kept[block[i]])
        ranges = grid.block_ranges(b)
        rows.append({
            "rank": rank, "synthetic_id": p.synthetic_ids[i], "local_score": float(score[i]),
            "fpr": float(calls["fpr"][i]), "n_null": int(calls["n_null"][i]), "called": int(calls["called"][i]),
            "closest_training_id": p.training_ids[closest[i]], "closest_patient_id": p.training_patients[closest[i]],
            "block_centre_mm": ",".join(f"{v:.1f}" for v in grid.block_centre_mm(b, affine)),
            "block_voxels": ",".join(f"{lo}:{hi}" for lo, hi in ranges),
            "blocks_tested": int(valid[i].sum()),
        })
    write_tsv(snakemake.output.calls, rows, COLUMNS)
    smallest = calibration.min_rate(len(p.heldout_ids))
    summary = {
        "settings": {**cfg, "n_closest": int(ratios.n_used), "rate": rate, "block_voxels": [2 * c for c in grid.cell],
                     "background": background, "data_range": data_range, "ceiling": ceiling},
        "n_synthetic": n_syn, "n_heldout": len(p.heldout_ids), "n_blocks": grid.n_blocks,
        "n_anatomy_blocks": int(keep.sum()), "n_called": int(calls["called"].sum()),
        "heldout_called_leave_patient_out": int(check["called"].sum()),
        "heldout_false_positive_rate": float(check["called"].mean()) if len(check["called"]) else None,
        "smallest_possible_rate": smallest,
        "called": [r["synthetic_id"] for r in rows if r["called"]],
    }
    write_json(snakemake.output.summary, summary)
    if smallest > rate:
        log.warning("local: %d held-out scans support no rate below %.3f, above the calibration rate %.3f: nothing "
                    "can be called", len(p.heldout_ids), smallest, rate)
    log.info("local: %d of %d synthetic volumes called local copies at %.3f; held-out scans called when left out: "
             "%d of %d", summary["n_called"], n_syn, rate, summary["heldout_called_leave_patient_out"],
             len(p.heldout_ids))

    # the figure: the most suspicious volumes, the block's slice beside the matching training slice
    def figure():
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Rectangle

        from synthaudit.io import atomic_path

        show = [i for i in order[: min(3, n_syn)] if np.isfinite(score[i])]
        if not show:
            fig, ax = plt.subplots(figsize=(6, 2))
            ax.text(0.5, 0.5, "no block could be tested (see the job's log)", ha="center", va="center")
            ax.axis("off")
            with atomic_path(snakemake.output.figure, suffix=".png") as tmp:
                fig.savefig(tmp, dpi=100)
            plt.close(fig)
            return
        fig, axes = plt.subplots(len(show), 3, figsize=(10, 3.3 * len(show)), squeeze=False)
        syn_raw = {i: raw(snakemake.input.synthetic[i]) for i in show}
        for row, i in enumerate(show):
            b = int(kept[block[i]])
            (x0, x1), (y0, y1), (z0, z1) = grid.block_ranges(b)
            zc = (z0 + z1) // 2
            t = raw(train_paths[closest[i]])
            lo, hi = np.percentile(np.concatenate([syn_raw[i][..., zc].ravel(), t[..., zc].ravel()]), [1, 99])
            for col, (vol, title) in enumerate(((syn_raw[i], f"{p.synthetic_ids[i]} (synthetic), slice z = {zc}"),
                                                (t, f"{p.training_ids[closest[i]]} (training, "
                                                    f"{p.training_patients[closest[i]]})"))):
                ax = axes[row, col]
                ax.imshow(vol[..., zc].T, cmap="gray", origin="lower", vmin=lo, vmax=hi)
                ax.add_patch(Rectangle((x0 - 0.5, y0 - 0.5), x1 - x0, y1 - y0, fill=False, ec="red", lw=1.5))
                ax.set_title(title, fontsize=8)
                ax.axis("off")
            # block map: each voxel of the slice shows the lowest relative ratio of the blocks holding it
            heat = np.full(shape[:2], np.nan)
            for j, bb in enumerate(kept):
                (a0, a1), (b0, b1), (c0, c1) = grid.block_ranges(int(bb))
                if c0 <= zc < c1 and np.isfinite(zmaps[i, j]) and valid[i, j]:
                    cur = heat[a0:a1, b0:b1]
                    heat[a0:a1, b0:b1] = np.fmin(cur, zmaps[i, j])
            ax = axes[row, 2]
            im = ax.imshow(heat.T, origin="lower", cmap="magma", vmin=0, vmax=1.2)
            ax.add_patch(Rectangle((x0 - 0.5, y0 - 0.5), x1 - x0, y1 - y0, fill=False, ec="cyan", lw=1.5))
            ax.set_title(f"block ratio / held-out median (score {score[i]:.3f}, rate {calls['fpr'][i]:.3f}"
                         f"{', called' if calls['called'][i] else ''})", fontsize=8)
            ax.axis("off")
            fig.colorbar(im, ax=ax, fraction=0.046)
        fig.suptitle(f"{snakemake.wildcards.dataset}: most likely local copies (the axial slice through each one's block)",
                     fontsize=10)
        fig.tight_layout()
        with atomic_path(snakemake.output.figure, suffix=".png") as tmp:
            fig.savefig(tmp, dpi=100)
        plt.close(fig)

    figure()
