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
from synthaudit.relict.ratio import distance_ratio

CONTROL_COLUMNS = ["size_mm", "recipient_id", "recipient_patient_id", "donor_id", "donor_patient_id", "centre_mm",
                   "centred_on", "local_score", "fpr", "called", "closest_training_id", "right_patient",
                   "block_in_region", "whole_rmse_ratio", "whole_rmse_fpr", "whole_rmse_called"]
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

    smooth = float(cfg["smooth_mm"])  # the plan merged the defaults (WorkflowPlan.local)
    sigma = [smooth / s for s in spacing]

    def smoothed(v):
        if smooth <= 0:
            return v
        from scipy.ndimage import gaussian_filter

        return gaussian_filter(v, sigma).astype(np.float32)

    def read(path):
        """A volume on the grid, smoothed (``smooth_mm``)."""
        return smoothed(raw(path))

    def raw(path):
        data, aff = load_volume(path)
        check_on_grid(path, data, aff, grid_info)
        return np.asarray(data, np.float32)

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

    syn_raw = np.stack([raw(x) for x in snakemake.input.synthetic])
    held_raw = np.stack([raw(x) for x in snakemake.input.heldout])
    n_syn, n_held = len(syn_raw), len(held_raw)

    # positive controls: a training scan's region pasted into each held-out scan, per size
    ctl_cfg = cfg["controls"]
    sizes = [float(x) for x in ctl_cfg["sizes_mm"]]
    controls, ctl_raw, noise_sd, noise_source = [], [], 0.0, None
    if sizes and keep.any():
        margin, seed = float(ctl_cfg["margin_mm"]), int(ctl_cfg["seed"])
        if ctl_cfg["noise_sd"] == "auto":
            noise_sd = local.rescan_noise_sd(held_raw, list(p.heldout_patients))
            noise_source = "rescan: held-out patients scanned twice"
            if noise_sd is None:
                inside = [(np.abs(v - background) > 0.05 * data_range) & (True if ceiling is None else v < ceiling)
                          for v in first]
                noise_sd, noise_source = local.neighbour_noise_sd(first, inside), "neighbouring voxels (a lower estimate)"
        else:
            noise_sd, noise_source = float(ctl_cfg["noise_sd"]), "params"
        labels = list(snakemake.input.labels)
        donors = {}
        for size, r, d in local.plan_controls(n_held, len(train_paths), sizes, seed):
            if d not in donors:
                donors[d] = raw(train_paths[d])
            donor = donors[d]
            centre, how = None, "distinctive"
            if labels:
                fg = np.argwhere(np.asarray(load_volume(labels[d])[0]) > 0)
                if len(fg):
                    centre, how = tuple(float(c) for c in fg.mean(0)), "label"
            if centre is None:
                inside = (np.abs(donor - background) > 0.05 * data_range) & (True if ceiling is None else donor < ceiling)
                centre = local.distinctive_centre(smoothed(donor), mean, inside, [size / s for s in spacing])
            rng = np.random.default_rng([seed, r, d, int(round(size * 10))])
            ctl_raw.append(local.spike(held_raw[r], donor, centre, size, spacing, margin, noise_sd, rng))
            controls.append(local.Control(size, r, d, centre, how))
        donors.clear()
        log.info("positive controls: %d (%s mm cubes, one per held-out scan and size), fresh noise SD %.4g (%s)",
                 len(controls), "/".join(f"{x:g}" for x in sizes), noise_sd, noise_source)
    # one copy of every query volume, raw (anatomy per block, whole-volume RMSE) and smoothed (blocks)
    queries_raw = np.concatenate([syn_raw, held_raw, *(c[None] for c in ctl_raw)])
    del syn_raw, held_raw, ctl_raw
    queries = np.empty_like(queries_raw)
    for i, v in enumerate(queries_raw):
        queries[i] = smoothed(v)
    # the whole-volume RMSE of the held-out scans and the controls, in the same pass over training
    whole = queries_raw[n_syn:] if controls else None
    whole_cols = []

    def training_stream():
        from synthaudit.relict.image_measures import all_pairs_image_measures

        for path in train_paths:
            t = raw(path)
            if whole is not None:
                whole_cols.append(all_pairs_image_measures(whole, t[None], ["rmse"], data_range=data_range,
                                                           threads=int(snakemake.threads), device="cpu")["rmse"][:, 0])
            yield smoothed(t)

    progress = Progress(log, "training volumes compared block by block", len(train_paths))
    measure = cfg["measure"]
    d = local.all_pairs_block_distances(queries, training_stream(), grid, measure, keep, progress=progress)
    valid = local.volume_blocks(grid, queries_raw, background, data_range, keep, ceiling=ceiling)
    ratios = local.block_ratios(d, int(p.n_closest))

    def rows_of(lo, hi):
        return local.BlockRatios(ratios.ratio[lo:hi], ratios.closest[lo:hi], ratios.n_used)

    r_held = rows_of(n_syn, n_syn + n_held)
    held_scores = local.local_scores(r_held, r_held, list(p.heldout_patients), self_is_heldout=True,
                                     valid=valid[n_syn:n_syn + n_held])
    hp = np.asarray(p.heldout_patients)

    def scored(r, v, sources):
        """Local scores of rows ``r``; a row made from a held-out patient's scan is judged without that
        patient's scans (its block medians and its null)."""
        n = len(r.ratio)
        out = (np.empty(n), np.zeros(n, int), np.zeros(n, int), np.empty((n, r.ratio.shape[1])))
        for src in sorted(set(sources), key=str):
            mine = np.array([s == src for s in sources])
            ref = r_held if src is None else local.BlockRatios(r_held.ratio[hp != src], r_held.closest[hp != src],
                                                                r_held.n_used)
            sc = local.local_scores(local.BlockRatios(r.ratio[mine], r.closest[mine], r.n_used), ref, valid=v[mine])
            for arr, val in zip(out, (sc.score, sc.block, sc.closest, sc.z)):
                arr[mine] = val
        return out

    sources = [p.source_patients.get(i) for i in p.synthetic_ids]
    score, block, closest, zmaps = scored(rows_of(0, n_syn), valid[:n_syn], sources)
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

    ctl_state = {}  # the controls' scores, blocks and block maps, for the figure

    def control_report():
        """Score the positive controls like synthetic volumes (each judged without its recipient
        patient), and the whole-volume RMSE ratio of the same volumes; local_controls.tsv and the
        per-size figures for local.json. None without controls."""
        if not controls:
            write_tsv(snakemake.output.controls, [], CONTROL_COLUMNS)
            return None
        lo = n_syn + n_held
        recipients = [p.heldout_patients[c.recipient] for c in controls]
        c_score, c_block, c_closest, c_z = scored(rows_of(lo, lo + len(controls)), valid[lo:], recipients)
        c_calls = calibration.calibrate(c_score, null, rate, recipients)
        ctl_state.update(score=c_score, block=c_block, closest=c_closest, z=c_z, calls=c_calls, lo=lo)
        w = np.stack(whole_cols, axis=1)  # (held-out + controls, training): whole-volume RMSE
        w_held = distance_ratio(w[:n_held], int(p.n_closest))
        w_null = calibration.Null(list(p.heldout_ids), list(p.heldout_patients), w_held.ratio,
                                  [p.training_ids[j] for j in w_held.closest])
        w_ratio = distance_ratio(w[n_held:], int(p.n_closest)).ratio
        w_calls = calibration.calibrate(w_ratio, w_null, rate, recipients)
        crow = []
        for k, c in enumerate(controls):
            found = np.isfinite(c_score[k])
            ranges = grid.block_ranges(int(kept[c_block[k]])) if found else None
            half = [c.size_mm / 2.0 / s_ for s_ in spacing]
            inside = found and all(a < cc + h and b > cc - h for (a, b), cc, h in zip(ranges, c.centre_vox, half))
            right = found and p.training_patients[c_closest[k]] == p.training_patients[c.donor]
            crow.append({
                "size_mm": c.size_mm, "recipient_id": p.heldout_ids[c.recipient], "recipient_patient_id": recipients[k],
                "donor_id": p.training_ids[c.donor], "donor_patient_id": p.training_patients[c.donor],
                "centre_mm": ",".join(f"{v:.1f}" for v in (affine @ np.array([*c.centre_vox, 1.0]))[:3]),
                "centred_on": c.centred_on,
                "local_score": float(c_score[k]) if found else "NA", "fpr": float(c_calls["fpr"][k]) if found else "NA",
                "called": int(c_calls["called"][k]),
                "closest_training_id": p.training_ids[c_closest[k]] if found else "NA",
                "right_patient": int(bool(right)), "block_in_region": int(bool(inside)),
                "whole_rmse_ratio": float(w_ratio[k]), "whole_rmse_fpr": float(w_calls["fpr"][k]),
                "whole_rmse_called": int(w_calls["called"][k]),
            })
        write_tsv(snakemake.output.controls, crow, CONTROL_COLUMNS)
        ctl_state["rows"] = crow
        by_size = {}
        for size in sizes:
            sel = [r for r in crow if r["size_mm"] == size]
            n = len(sel)
            by_size[f"{size:g}"] = {
                "n": n,
                "sensitivity": sum(r["called"] for r in sel) / n,
                "called_right_patient": sum(r["called"] * r["right_patient"] for r in sel) / n,
                "called_block_in_region": sum(r["called"] * r["block_in_region"] for r in sel) / n,
                "whole_volume_rmse_sensitivity": sum(r["whole_rmse_called"] for r in sel) / n,
            }
        w_check = calibration.heldout_check(w_null, rate)
        return {"n": len(controls), "sizes_mm": sizes, "margin_mm": float(ctl_cfg["margin_mm"]),
                "noise_sd": noise_sd, "noise_source": noise_source,
                "centred_on": {k: sum(c.centred_on == k for c in controls) for k in ("label", "distinctive")},
                "by_size_mm": by_size,
                "whole_volume_rmse_heldout_false_positive_rate": float(w_check["called"].mean()),
                "figure": "results/figures/%s/local_controls.png" % snakemake.wildcards.dataset}
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
    summary["controls"] = control_report()
    write_json(snakemake.output.summary, summary)
    if smallest > rate:
        log.warning("local: %d held-out scans support no rate below %.3f, above the calibration rate %.3f: nothing "
                    "can be called", len(p.heldout_ids), smallest, rate)
    log.info("local: %d of %d synthetic volumes called local copies at %.3f; held-out scans called when left out: "
             "%d of %d", summary["n_called"], n_syn, rate, summary["heldout_called_leave_patient_out"],
             len(p.heldout_ids))
    ctl = summary["controls"]
    if ctl:
        log.info("positive controls called at %.3f, by cube side: %s (whole-volume RMSE ratio: %s)", rate,
                 ", ".join(f"{k} mm {v['sensitivity']:.2f}" for k, v in ctl["by_size_mm"].items()),
                 ", ".join(f"{k} mm {v['whole_volume_rmse_sensitivity']:.2f}" for k, v in ctl["by_size_mm"].items()))

    def control_figure():
        """Fraction of the positive controls called per cube side: the local level beside the
        whole-volume RMSE ratio, both calibrated at the rate on the same held-out scans."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        from synthaudit.io import atomic_path

        example = None
        if ctl:  # the smallest called control whose block lies in the pasted region, lowest score first
            rows_ = ctl_state.get("rows", [])
            hits = [k for k, r in enumerate(rows_) if r["called"] and r["block_in_region"]]
            if hits:
                example = min(hits, key=lambda k: (controls[k].size_mm, ctl_state["score"][k]))
        if example is None:
            fig, ax = plt.subplots(figsize=(6, 3.4))
        else:
            fig = plt.figure(figsize=(10, 7.2))
            grid_spec = fig.add_gridspec(2, 3, height_ratios=[1, 1.15])
            ax = fig.add_subplot(grid_spec[0, :])
        if not ctl:
            ax.text(0.5, 0.5, "no positive controls (relict.local.controls.sizes_mm is empty,\n"
                    "or no block could be tested)", ha="center", va="center")
            ax.axis("off")
        else:
            keys = list(ctl["by_size_mm"])
            x = np.arange(len(keys))
            loc = [ctl["by_size_mm"][k]["sensitivity"] for k in keys]
            who = [ctl["by_size_mm"][k]["whole_volume_rmse_sensitivity"] for k in keys]
            ax.bar(x - 0.18, loc, 0.36, label="local level", color="tab:red")
            ax.bar(x + 0.18, who, 0.36, label="whole-volume RMSE ratio", color="tab:gray")
            for xi, v in zip(x, loc):
                ax.text(xi - 0.18, v + 0.02, f"{v:.2f}", ha="center", fontsize=8)
            for xi, v in zip(x, who):
                ax.text(xi + 0.18, v + 0.02, f"{v:.2f}", ha="center", fontsize=8)
            ax.axhline(summary["heldout_false_positive_rate"] or 0, color="k", ls=":", lw=1,
                       label=f"held-out scans called (local, {summary['heldout_called_leave_patient_out']} of "
                             f"{n_held})")
            ax.set_xticks(x, [f"{k} mm\n(n = {ctl['by_size_mm'][k]['n']})" for k in keys])
            ax.set_ylim(0, 1.4)
            ax.set_yticks([0, 0.2, 0.4, 0.6, 0.8, 1.0])
            ax.set_ylabel(f"called at rate {rate:g}")
            ax.set_title(f"{snakemake.wildcards.dataset}: training regions pasted into held-out scans "
                         f"(noise SD {ctl['noise_sd']:.3g})", fontsize=9)
            ax.legend(fontsize=7, loc="upper center", ncol=2, frameon=False)
        if example is not None:
            k, c = example, controls[example]
            margin = float(ctl_cfg["margin_mm"])  # the pasted extent, blend included
            half = [(c.size_mm / 2.0 + margin) / s_ for s_ in spacing]
            truth = [(int(round(cc - h)), int(round(cc + h))) for cc, h in zip(c.centre_vox, half)]
            j = int(ctl_state["closest"][k])
            draw_row([fig.add_subplot(grid_spec[1, col]) for col in range(3)], queries_raw[ctl_state["lo"] + k],
                     f"control: {p.heldout_ids[c.recipient]} + {c.size_mm:g} mm of {p.training_ids[c.donor]} "
                     f"(yellow: with its blend), z = {{z}}", raw(train_paths[j]),
                     f"{p.training_ids[j]} (training, {p.training_patients[j]})", int(kept[ctl_state["block"][k]]),
                     ctl_state["z"][k], valid[ctl_state["lo"] + k],
                     f"block ratio / held-out median (score {ctl_state['score'][k]:.3f}, "
                     f"rate {ctl_state['calls']['fpr'][k]:.3f}, called)", truth=truth)
        fig.tight_layout()
        with atomic_path(snakemake.output.control_figure, suffix=".png") as tmp:
            fig.savefig(tmp, dpi=100)
        plt.close(fig)


    # the figure: the most suspicious volumes, the block's slice beside the matching training slice
    def draw_row(axes, vol, vol_title, t, t_title, b, zrow, vrow, caption, truth=None):
        """One volume's block beside the matching training slice and the block-ratio map (axial slice
        through the block's centre); ``truth``: a pasted cube's voxel ranges, drawn in yellow."""
        from matplotlib.patches import Rectangle

        (x0, x1), (y0, y1), (z0, z1) = grid.block_ranges(b)
        zc = (z0 + z1) // 2
        lo_, hi_ = np.percentile(np.concatenate([vol[..., zc].ravel(), t[..., zc].ravel()]), [1, 99])
        for col, (v, title) in enumerate(((vol, vol_title), (t, t_title))):
            ax = axes[col]
            ax.imshow(v[..., zc].T, cmap="gray", origin="lower", vmin=lo_, vmax=hi_)
            ax.add_patch(Rectangle((x0 - 0.5, y0 - 0.5), x1 - x0, y1 - y0, fill=False, ec="red", lw=1.5))
            if truth is not None and col == 0:
                (tx0, tx1), (ty0, ty1) = truth[:2]
                ax.add_patch(Rectangle((tx0 - 0.5, ty0 - 0.5), tx1 - tx0, ty1 - ty0, fill=False, ec="yellow", lw=1.2,
                                       ls="--"))
            ax.set_title(title.replace("{z}", str(zc)), fontsize=8)
            ax.axis("off")
        # block map: each voxel of the slice shows the lowest relative ratio of the blocks holding it
        heat = np.full(shape[:2], np.nan)
        for j, bb in enumerate(kept):
            (a0, a1), (b0, b1), (c0, c1) = grid.block_ranges(int(bb))
            if c0 <= zc < c1 and np.isfinite(zrow[j]) and vrow[j]:
                heat[a0:a1, b0:b1] = np.fmin(heat[a0:a1, b0:b1], zrow[j])
        ax = axes[2]
        im = ax.imshow(heat.T, origin="lower", cmap="magma", vmin=0, vmax=1.2)
        ax.add_patch(Rectangle((x0 - 0.5, y0 - 0.5), x1 - x0, y1 - y0, fill=False, ec="cyan", lw=1.5))
        ax.set_title(caption, fontsize=8)
        ax.axis("off")
        ax.figure.colorbar(im, ax=ax, fraction=0.046)

    def figure():
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

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
        for row, i in enumerate(show):
            draw_row(axes[row], queries_raw[i], f"{p.synthetic_ids[i]} (synthetic), slice z = {{z}}",
                     raw(train_paths[closest[i]]),
                     f"{p.training_ids[closest[i]]} (training, {p.training_patients[closest[i]]})",
                     int(kept[block[i]]), zmaps[i], valid[i],
                     f"block ratio / held-out median (score {score[i]:.3f}, rate {calls['fpr'][i]:.3f}"
                     f"{', called' if calls['called'][i] else ''})")
        fig.suptitle(f"{snakemake.wildcards.dataset}: most likely local copies (the axial slice through each one's block)",
                     fontsize=10)
        fig.tight_layout()
        with atomic_path(snakemake.output.figure, suffix=".png") as tmp:
            fig.savefig(tmp, dpi=100)
        plt.close(fig)

    figure()
    control_figure()
