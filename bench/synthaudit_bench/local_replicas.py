"""Local replicas on the demo's registered NCCT scans: sensitivity by region size, false
positives on new patients, and what the whole-volume ratio says (issue 33, parts 1, 2, 4, 5).

Spiked volumes: a training scan's lesion region (a cube of 20, 30 or 40 mm centred on its
haemorrhage label, or on the head's centre where it has none), blended over a margin of
``margin_mm`` with a linear ramp, pasted into a held-out patient's baseline scan. With
``noise="rescan"`` the pasted region gets fresh noise at the level of the
held-out patients' rescans: a generator reproduces anatomy, not the training scan's noise,
and an exact voxel copy would make the test easy. Every
volume is on the workflow's registered grid (``results/preprocessed/<dataset>/images``), so
the region stays where the training patient had it, as a generator trained on that grid
would reproduce it.

Local level (``synthaudit.relict.local``): block distances (``mse``, ``mae``) of every
volume against every training scan over blocks of ``block_mm`` with half-block stride,
RELICT's ratio per block (n closest), each block relative to the held-out scans' median
there, the volume's lowest block as its local score; calibrated at ``rate`` against the
held-out scans' own local scores (leave-patient-out, ``relict.calibration``); a spiked
volume is judged without its recipient patient's scans. Whole volume: RMSE's ratio calibrated
the same way, for the same volumes.

The sweep (:func:`sweep`, docs/local_replicas.md's table): every block size x smoothing with
rescan noise on the pasted region, and exact copies at each block size; and per block size the
block pass's cost against the plain MAE/RMSE pass of ``all_pairs_image_measures`` at NCCT scale
(1 mm, 182 x 218 x 182; 2 synthetic x 8 training random volumes).

    PYTHONPATH=bench python -m synthaudit_bench.local_replicas --out results/bench/local_replicas.json
"""

from __future__ import annotations

import argparse
import csv
import json
import time
from pathlib import Path

import numpy as np

from synthaudit.io import write_json


def run(dataset_dir: Path, sizes_mm, block_mm: float, n_closest: int, rate: float, margin_mm: float,
        measures, noise: str = "none", seed: int = 0, smooth_mm: float = 0.0) -> dict:
    """One (block size, smoothing, region noise) of the sweep: its report."""
    from synthaudit.io import load_volume
    from synthaudit.relict import calibration, local
    from synthaudit.relict.ratio import distance_ratio

    cohort = dataset_dir.parents[1] / "cohort" / dataset_dir.name
    rows = list(csv.DictReader(open(cohort / "manifest.tsv"), delimiter="\t"))
    images = dataset_dir / "images"
    labels = dataset_dir / "labels"
    train = [r for r in rows if r["role"] == "train"]
    held = [r for r in rows if r["role"] == "heldout"]
    loaded = [load_volume(images / f"{r['id']}.nii.gz") for r in train]
    t_vol = np.stack([v for v, _ in loaded])
    affine = loaded[0][1]
    h_vol = np.stack([load_volume(images / f"{r['id']}.nii.gz")[0] for r in held])
    spacing = np.sqrt((affine[:3, :3] ** 2).sum(0))
    shape = t_vol.shape[1:]
    held_patients = [r["patient_id"] for r in held]
    background = float(np.median(np.concatenate([t_vol[:, 0].ravel(), t_vol[:, -1].ravel()])))
    data_range = float(t_vol.max() - t_vol.min())
    ceiling = float(t_vol.max())  # the intensity window's top: clipped voxels carry no patient detail

    noise_sd = {"none": 0.0, "rescan": local.rescan_noise_sd(h_vol, held_patients) or 0.0}[noise]
    # spiked local replicas: one per (recipient patient, size); donors cycle over the training scans
    recipients = [r for r in held if r["session"] == "baseline"]
    spiked, meta = [], []
    for size in sizes_mm:
        for k, rec in enumerate(recipients):
            donor_i = (k * 3 + int(size)) % len(train)
            donor = train[donor_i]
            lab_path = labels / f"{donor['id']}.nii.gz"
            lab = load_volume(lab_path)[0] if lab_path.exists() else np.zeros(shape)
            fg = np.argwhere(lab > 0)
            centre = fg.mean(0) if len(fg) else (np.array(shape) - 1) / 2.0
            side = np.asarray(size) / spacing
            w = local.paste_weights(shape, centre, side, np.full(3, margin_mm) / spacing)
            recipient = h_vol[held.index(rec)]
            region = t_vol[donor_i]
            if noise_sd > 0:  # a generator reproduces the anatomy, not the scan's noise
                rng = np.random.default_rng([seed, k, int(size)])
                region = region + rng.normal(0.0, noise_sd, size=shape).astype(np.float32)
            spiked.append(w * region + (1 - w) * recipient)
            meta.append({"size_mm": size, "recipient": rec["id"], "recipient_patient": rec["patient_id"],
                         "donor": donor["id"], "donor_patient": donor["patient_id"],
                         "centre_vox": [round(float(c), 1) for c in centre], "lesion": bool(len(fg)),
                         "pasted_fraction": float((w > 0.5).mean())})
    spiked = np.stack(spiked)
    sources = [m["recipient_patient"] for m in meta]

    report = {"dataset": dataset_dir.name, "grid": list(shape), "spacing_mm": [float(s) for s in spacing],
              "n_training": len(train), "n_heldout": len(held), "n_heldout_patients": len(set(held_patients)),
              "block_mm": block_mm, "n_closest": n_closest, "rate": rate, "margin_mm": margin_mm,
              "region_noise": noise, "region_noise_sd": noise_sd,
              "volumes": meta, "measures": {}}
    grid = local.BlockGrid.from_mm(shape, spacing, block_mm)
    keep = local.anatomy_blocks(grid, t_vol.mean(0), background, data_range)
    report["blocks"] = {"cell_vox": list(grid.cell), "n_blocks": grid.n_blocks, "anatomy_blocks": int(keep.sum())}

    # whole volume: RMSE ratio, calibrated the same way
    def rmse(a):
        return np.sqrt(((a[:, None] - t_vol[None]) ** 2).mean(axis=(2, 3, 4)))

    held_ratio = distance_ratio(rmse(h_vol), n_closest)
    null_w = calibration.Null([r["id"] for r in held], held_patients, held_ratio.ratio,
                              [train[j]["id"] for j in held_ratio.closest])
    syn_ratio = distance_ratio(rmse(spiked), n_closest).ratio
    whole_calls = calibration.calibrate(syn_ratio, null_w, rate, sources)["called"]
    whole_check = calibration.heldout_check(null_w, rate)["called"]

    cmp_t, cmp_h, cmp_s = t_vol, h_vol, spiked
    if smooth_mm > 0:  # noise is not identity: compare low-passed volumes
        from scipy.ndimage import gaussian_filter

        sig = [smooth_mm / float(sp) for sp in spacing]
        cmp_t, cmp_h, cmp_s = ([gaussian_filter(v, sig) for v in vols] for vols in (t_vol, h_vol, spiked))
        cmp_t, cmp_h, cmp_s = np.stack(cmp_t), np.stack(cmp_h), np.stack(cmp_s)
    report["smooth_mm"] = smooth_mm
    for measure in measures:
        start = time.perf_counter()
        d_held = local.all_pairs_block_distances(cmp_h, cmp_t, grid, f"block_{measure}", keep)
        d_syn = local.all_pairs_block_distances(cmp_s, cmp_t, grid, f"block_{measure}", keep)
        seconds = time.perf_counter() - start
        r_held = local.block_ratios(d_held, n_closest)
        r_syn = local.block_ratios(d_syn, n_closest)
        v_held = local.volume_blocks(grid, h_vol, background, data_range, keep, ceiling=ceiling)
        v_syn = local.volume_blocks(grid, spiked, background, data_range, keep, ceiling=ceiling)
        held_scores = local.local_scores(r_held, r_held, held_patients, self_is_heldout=True, valid=v_held)
        # a spiked volume is its recipient's scan elsewhere: judged without that patient's scans
        syn_score = np.empty(len(spiked))
        syn_block = np.empty(len(spiked), int)
        syn_closest = np.empty(len(spiked), int)
        hp = np.asarray(held_patients)
        for p in sorted(set(sources)):
            mine = np.array([s == p for s in sources])
            others = local.BlockRatios(r_held.ratio[hp != p], r_held.closest[hp != p], r_held.n_used)
            sc = local.local_scores(local.BlockRatios(r_syn.ratio[mine], r_syn.closest[mine], r_syn.n_used), others,
                                    valid=v_syn[mine])
            syn_score[mine], syn_block[mine], syn_closest[mine] = sc.score, sc.block, sc.closest
        null = calibration.Null([r["id"] for r in held], held_patients, held_scores.score,
                                [train[j]["id"] for j in held_scores.closest])
        calls = calibration.calibrate(syn_score, null, rate, sources)
        check = calibration.heldout_check(null, rate)
        kept = np.flatnonzero(keep)
        by_size = {}
        for size in sizes_mm:
            sel = np.array([m["size_mm"] == size for m in meta])
            right_donor = np.array([train[syn_closest[i]]["patient_id"] == meta[i]["donor_patient"]
                                    for i in range(len(meta))])
            inside = []
            for i in np.flatnonzero(sel):
                ranges = grid.block_ranges(kept[syn_block[i]])
                c = meta[i]["centre_vox"]
                inside.append(all(lo - 0.5 * size / s <= cc <= hi + 0.5 * size / s
                                  for (lo, hi), cc, s in zip(ranges, c, spacing)))
            by_size[f"{size:g}"] = {
                "n": int(sel.sum()),
                "sensitivity_local": float(calls["called"][sel].mean()),
                "called_and_right_patient": float((calls["called"] & right_donor)[sel].mean()),
                "block_overlaps_region": float(np.mean(inside)),
                "sensitivity_whole_volume_rmse": float(whole_calls[sel].mean()),
                "median_local_score": float(np.median(syn_score[sel])),
                "median_whole_ratio": float(np.median(syn_ratio[sel])),
            }
        per_volume = [{"size_mm": meta[i]["size_mm"], "donor": meta[i]["donor"], "score": float(syn_score[i]),
                       "fpr": float(calls["fpr"][i]), "called": bool(calls["called"][i]),
                       "closest": train[syn_closest[i]]["id"],
                       "block_vox": [list(r) for r in grid.block_ranges(kept[syn_block[i]])],
                       "valid_blocks": int(v_syn[i].sum()), "whole_ratio": float(syn_ratio[i])}
                      for i in range(len(meta))]
        report["measures"][measure] = {
            "by_size_mm": by_size, "per_volume": per_volume,
            "false_positive_rate_heldout": float(check["called"].mean()),
            "heldout_local_score_range": [float(held_scores.score.min()), float(held_scores.score.max())],
            "block_pass_seconds": seconds, "pairs": int((len(h_vol) + len(spiked)) * len(t_vol)),
        }
        print(measure, json.dumps(by_size), "FPR", report["measures"][measure]["false_positive_rate_heldout"],
              flush=True)
    report["whole_volume_rmse_false_positive_rate_heldout"] = float(whole_check.mean())
    return report


def _random_ncct(shape=(182, 218, 182)):
    rng = np.random.default_rng(0)
    return (rng.normal(size=(2, *shape)).astype(np.float32), rng.normal(size=(8, *shape)).astype(np.float32))


def cost(syn, train, block_mm: float, repeats: int = 3) -> dict:
    """Seconds of the per-cell sums (block MAE and MSE at once, ``local.cell_error_sums``) against
    the plain MAE + RMSE pass (``all_pairs_image_measures``), same pairs (1 mm volumes), 2 threads;
    best of ``repeats``."""
    from synthaudit.relict import local
    from synthaudit.relict.image_measures import all_pairs_image_measures
    from synthaudit.relict.kernels import kernel_threads

    grid = local.BlockGrid.from_mm(syn.shape[1:], (1.0, 1.0, 1.0), block_mm)
    plain, blocks = [], []
    with kernel_threads(2):
        local.cell_error_sums(syn[:1], train[:1], grid.cell)  # compiled before timing
        for _ in range(repeats):
            t0 = time.perf_counter()
            all_pairs_image_measures(syn, train, ["mae", "rmse"], data_range=1.0, threads=2)
            plain.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            local.cell_error_sums(syn, train, grid.cell)
            blocks.append(time.perf_counter() - t0)
    p, b = min(plain), min(blocks)
    return {"grid": list(syn.shape[1:]), "block_mm": float(block_mm), "cell_vox": list(grid.cell),
            "pairs": int(len(syn) * len(train)), "plain_mae_rmse_s": p, "block_mae_mse_s": b,
            "ratio_block_to_plain": b / p, "seconds_per_pair_plain": p / (len(syn) * len(train)),
            "seconds_per_pair_block": b / (len(syn) * len(train))}


def sweep(dataset_dir: Path, out: Path, blocks_mm=(12.0, 18.0, 24.0), smooth_mm=(0.0, 3.0, 6.0),
          sizes_mm=(20.0, 30.0, 40.0), n_closest: int = 10, rate: float = 0.05, margin_mm: float = 3.0) -> dict:
    """Every (block size, smoothing) with rescan noise on the pasted region, and exact copies at
    each block size: the table of docs/local_replicas.md, one JSON."""
    runs = [run(dataset_dir, sizes_mm, block, n_closest, rate, margin_mm, ["mse", "mae"], noise=noise,
                smooth_mm=smooth)
            for noise in ("rescan", "none") for block in blocks_mm
            for smooth in (smooth_mm if noise == "rescan" else (0.0,))]
    report = {"runs": runs, "cost_ncct_1mm": [cost(*_random_ncct(), block_mm=b) for b in blocks_mm]}
    write_json(out, report)
    return report


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", type=Path, default=Path("results/preprocessed/ncct_demo"))
    ap.add_argument("--out", type=Path, default=Path("results/bench/local_replicas.json"))
    a = ap.parse_args(argv)
    sweep(a.dataset, a.out)


if __name__ == "__main__":
    main()
