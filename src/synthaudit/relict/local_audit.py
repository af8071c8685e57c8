"""The local level of one dataset, end to end: calls, the held-out check and positive controls.

Why a library function and not the rule's script: the same run is what the workflow does, what
the real-anatomy benchmark measures (bench/real_anatomy/local_controls_check.py) and what the
tests check, on arrays they build themselves. The script only reads volumes and writes files.

Steps (:mod:`.local` holds the parts): every synthetic volume, every held-out scan and every
positive control is compared block by block with every training scan (all smoothed by
``smooth_mm``); RELICT's ratio per block; each block relative to the held-out scans' median
there; a volume's lowest block is its local score, calibrated against the held-out scans' own
(leave-patient-out) at ``rate``.

Positive controls (issue 43): a training scan's region pasted into each held-out scan, placed
by information content (:func:`.local.informative_centre`; within the rarest label class where
labels exist: a tumour, not the liver), each with its diagnostics: how far the region differs
from the average patient (``distinctiveness``) and from what it replaced (``region_contrast``),
both in units of the smoothed noise, the score of the block covering it, the cut-off it had to
pass, and whether the donor is that block's closest training scan. Sensitivity is reported per
size and per distinctiveness tercile, and a size where few are called gets its reason from
those numbers (:func:`control_reasons`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from . import calibration, local
from .alignment import background_level
from .ratio import distance_ratio

CONTROL_COLUMNS = ["size_mm", "recipient_id", "recipient_patient_id", "donor_id", "donor_patient_id", "centre_mm",
                   "centred_on", "information", "distinctiveness", "distinctiveness_tercile", "region_contrast",
                   "region_block_covered", "region_block_score", "region_block_ratio", "region_donor_closest",
                   "null_cutoff",
                   "local_score", "fpr", "called", "closest_training_id", "right_patient",
                   "block_in_region", "whole_rmse_ratio", "whole_rmse_fpr", "whole_rmse_called"]
CALL_COLUMNS = ["rank", "synthetic_id", "local_score", "fpr", "n_null", "called", "closest_training_id",
                "closest_patient_id", "block_centre_mm", "block_voxels", "blocks_tested"]
TERCILES = ("low", "mid", "high")
# a size whose controls are called less often than this gets its reason in local.json and the verdict
EXPLAIN_BELOW = 0.5
# the pasted region's median contrast against what it replaced, in smoothed-noise SDs, under which
# "nothing was copied there that differs from the recipient" is the reason
LOW_CONTRAST = 2.0
# under this fraction of its best block covered by the pasted cube, the reason says so beside its cause
COVERED = 0.9

_log = logging.getLogger(__name__)


@dataclass
class LocalSettings:
    """relict.local's parameters (merged with their defaults by the plan) and the calibration."""

    block_mm: float
    smooth_mm: float
    measure: str
    sizes_mm: list[float]
    margin_mm: float
    noise_sd: float | str  # a value, or "auto"
    seed: int
    n_closest: int
    rate: float
    smooth_min_vox: float = 0.0  # the smoothing's floor in voxels per axis (smoothing_sigma_vox)

    @classmethod
    def from_config(cls, cfg: dict, n_closest: int, rate: float) -> LocalSettings:
        c = cfg["controls"]
        return cls(float(cfg["block_mm"]), float(cfg["smooth_mm"]), str(cfg["measure"]),
                   [float(x) for x in c["sizes_mm"]], float(c["margin_mm"]), c["noise_sd"], int(c["seed"]),
                   int(n_closest), float(rate), float(cfg["smooth_min_vox"]))


@dataclass
class Cohort:
    """One dataset's volumes on one grid, as the local level reads them.

    ``load_training(j)`` / ``load_label(j)``: the j-th training scan and its label map, read on
    demand (a training set need not fit in memory); the synthetic and held-out volumes are arrays.
    """

    synthetic: np.ndarray  # (S, X, Y, Z)
    heldout: np.ndarray  # (H, X, Y, Z)
    load_training: Callable[[int], np.ndarray]
    training_ids: list[str]
    training_patients: list[str]
    synthetic_ids: list[str]
    heldout_ids: list[str]
    heldout_patients: list[str]
    spacing_mm: list[float]
    affine: np.ndarray
    window: tuple[float, float] | None = None  # the grid's intensity range, where a window set one
    source_patients: dict = field(default_factory=dict)  # synthetic id -> held-out patient it was made from
    load_label: Callable[[int], np.ndarray] | None = None


@dataclass
class LocalResult:
    """What the rule writes (``calls``, ``controls``, ``summary``) and what its figures draw."""

    calls: list[dict]
    controls: list[dict]
    summary: dict
    grid: local.BlockGrid
    kept: np.ndarray  # indices of the blocks inside the anatomy
    queries_raw: np.ndarray  # synthetic, held-out, controls (unsmoothed)
    valid: np.ndarray  # (queries, kept blocks)
    score: np.ndarray
    block: np.ndarray
    closest: np.ndarray
    zmaps: np.ndarray
    fpr: np.ndarray
    called: np.ndarray
    order: np.ndarray
    control_list: list = field(default_factory=list)
    control_state: dict = field(default_factory=dict)
    # the held-out scans' own lowest blocks (each judged without its patient): the null's floor and
    # whose training scan sets it (score, block into kept, closest training index)
    heldout_state: dict = field(default_factory=dict)


def smoothing_sigma_vox(smooth_mm: float, spacing_mm: Sequence[float], min_vox: float = 0.0) -> list[float]:
    """The Gaussian's sigma per axis in voxels: ``smooth_mm``, but at least ``min_vox`` voxels (0 mm: none).

    Why a floor: the noise the smoothing removes is the voxels', its cost in anatomy is in mm. On
    1.5 mm grids 0.5 voxel left the noise in charge (3 of 12 distinctive 30-40 mm controls on real
    MRI); on the tests' 4 mm grid 2.25 mm is 0.56 voxel and found no control; 0.75 voxel (the demo's
    3 mm grid at 2.25 mm, the tests' grid at 3 mm) found them, and so does a thick slice's axis."""
    if float(smooth_mm) <= 0:
        return [0.0 for _ in spacing_mm]
    return [max(float(smooth_mm) / float(s), float(min_vox)) for s in spacing_mm]


def smoothed_noise_factor(sigma_vox: Sequence[float]) -> float:
    """SD of white noise of SD 1 after scipy's Gaussian filter of ``sigma_vox`` (the root of its
    impulse response's energy): the unit in which the controls' contrasts are read."""
    from scipy.ndimage import gaussian_filter

    if all(s <= 0 for s in sigma_vox):
        return 1.0
    half = [int(4 * s + 0.5) + 1 for s in sigma_vox]
    delta = np.zeros([2 * h + 1 for h in half])
    delta[tuple(half)] = 1.0
    return float(np.sqrt((gaussian_filter(delta, sigma_vox, mode="constant") ** 2).sum()))


def run(cohort: Cohort, settings: LocalSettings, threads: int = 1, log: logging.Logger | None = None,
        progress: Callable[[int], None] | None = None) -> LocalResult:
    """The local level of one dataset (module docstring): calls, held-out check, controls."""
    log = log or _log
    spacing = [float(s) for s in cohort.spacing_mm]
    smooth = settings.smooth_mm
    sigma = smoothing_sigma_vox(smooth, spacing, settings.smooth_min_vox)

    def smoothed(v):
        if smooth <= 0:
            return v
        from scipy.ndimage import gaussian_filter

        return gaussian_filter(v, sigma).astype(np.float32)

    def raw(j):
        return np.asarray(cohort.load_training(j), np.float32)

    n_train = len(cohort.training_ids)
    if n_train < 1:
        raise ValueError("the local level needs training scans")
    first = [raw(j) for j in range(min(n_train, 20))]
    background = background_level(first)
    if cohort.window is not None:
        data_range, ceiling = float(cohort.window[1] - cohort.window[0]), float(cohort.window[1])
    else:
        data_range, ceiling = float(max(v.max() for v in first) - min(v.min() for v in first)), None
    shape = tuple(first[0].shape)
    grid = local.BlockGrid.from_mm(shape, spacing, settings.block_mm, clamp=True)
    wanted = [max(1, int(round(settings.block_mm / (2 * s)))) for s in spacing]
    if list(grid.cell) != wanted:
        log.warning("local: the grid %s is too thin for blocks of %s mm along some axis; blocks of %s voxels there",
                    list(shape), settings.block_mm, [2 * c for c in grid.cell])
    mean = np.mean([smoothed(raw(j)) for j in range(n_train)], axis=0) if smooth > 0 else np.mean(
        [raw(j) for j in range(n_train)], axis=0)
    keep = local.anatomy_blocks(grid, mean, background, data_range)
    log.info("blocks of %s voxels (%s mm, half-block stride): %d of %d inside the anatomy; smoothing sigma %s mm; "
             "background %.4g, data range %.4g%s", "x".join(str(2 * c) for c in grid.cell),
             " x ".join(f"{2 * c * s:.3g}" for c, s in zip(grid.cell, spacing)), int(keep.sum()), grid.n_blocks,
             " x ".join(f"{g * s:.3g}" for g, s in zip(sigma, spacing)), background, data_range,
             f", ceiling {ceiling:.4g} (window)" if ceiling is not None else "")
    if not keep.any():
        log.warning("local: no block of %s mm has anatomy in at least half its voxels (off the background %.4g by 5 %% "
                    "of the range): nothing to test; a smaller relict.local.block_mm may fit", settings.block_mm,
                    background)

    def anatomy(v):
        inside = np.abs(v - background) > 0.05 * data_range
        return inside & (v < ceiling) if ceiling is not None else inside

    syn_raw = np.asarray(cohort.synthetic, np.float32)
    held_raw = np.asarray(cohort.heldout, np.float32)
    n_syn, n_held = len(syn_raw), len(held_raw)
    hp = np.asarray(cohort.heldout_patients)

    # positive controls: a training scan's region pasted into each held-out scan, per size
    controls, ctl_raw, noise_sd, noise_source, ctl_info = [], [], 0.0, None, []
    held_s = [None] * n_held  # a held-out scan smoothed once: the controls' contrast, then its query row
    if settings.sizes_mm and keep.any():
        if settings.noise_sd == "auto":
            noise_sd = local.rescan_noise_sd(held_raw, list(cohort.heldout_patients))
            noise_source = "rescan: held-out patients scanned twice"
            if noise_sd is None:
                noise_sd = local.neighbour_noise_sd(first, [anatomy(v) for v in first])
                noise_source = "neighbouring voxels (a lower estimate)"
        else:
            noise_sd, noise_source = float(settings.noise_sd), "params"
        donors = {}  # per donor: raw, smoothed, (rarest label class voxels, class)
        for size, r, d in local.plan_controls(n_held, n_train, settings.sizes_mm, settings.seed):
            if d not in donors:
                v = raw(d)
                rare = local.rarest_label(cohort.load_label(d)) if cohort.load_label is not None else (None, None)
                donors[d] = (v, smoothed(v), rare)
            if held_s[r] is None:
                held_s[r] = smoothed(held_raw[r])
            donor, donor_s, (within, label_class) = donors[d]
            rng = np.random.default_rng([settings.seed, r, d, int(round(size * 10))])
            side = [size / s for s in spacing]
            how = "informative" if within is None else f"label {label_class}"
            centre, information = local.informative_centre(donor_s, anatomy(donor) & anatomy(held_raw[r]), side,
                                                           np.random.default_rng([settings.seed, r, d, 1]),
                                                           within=within)
            ctl_raw.append(local.spike(held_raw[r], donor, centre, size, spacing, settings.margin_mm, noise_sd, rng))
            controls.append(local.Control(size, r, d, centre, how))
            cube = local.cube_slices(shape, centre, side)
            ctl_info.append({"information": information,
                             "distinctive_sq": float(np.mean((donor_s[cube] - mean[cube]) ** 2, dtype=np.float64)),
                             "contrast_sq": float(np.mean((donor_s[cube] - held_s[r][cube]) ** 2, dtype=np.float64))})
        donors.clear()
        log.info("positive controls: %d (%s mm cubes, one per held-out scan and size, placed by information "
                 "content), fresh noise SD %.4g (%s)", len(controls), "/".join(f"{x:g}" for x in settings.sizes_mm),
                 noise_sd, noise_source)
    # one copy of every query volume, raw (anatomy per block, whole-volume RMSE) and smoothed (blocks)
    queries_raw = np.concatenate([syn_raw, held_raw, *(c[None] for c in ctl_raw)])
    del ctl_raw
    queries = np.empty_like(queries_raw)
    for i, v in enumerate(queries_raw):
        done = held_s[i - n_syn] if n_syn <= i < n_syn + n_held else None
        queries[i] = smoothed(v) if done is None else done
    held_s = None
    # the whole-volume RMSE of the held-out scans and the controls, in the same pass over training
    whole = queries_raw[n_syn:] if controls else None
    whole_cols = []

    def training_stream():
        from .image_measures import all_pairs_image_measures

        for j in range(n_train):
            t = raw(j)
            if whole is not None:
                whole_cols.append(all_pairs_image_measures(whole, t[None], ["rmse"], data_range=data_range,
                                                           threads=int(threads), device="cpu")["rmse"][:, 0])
            yield smoothed(t)

    # the n closest per block, streamed: never the (queries x training x blocks) array
    nearest = local.NearestBlocks(settings.n_closest)
    for column in local.block_distance_columns(queries, training_stream(), grid, settings.measure, keep,
                                               progress=progress):
        nearest.add(column)
    del queries
    valid = local.volume_blocks(grid, queries_raw, background, data_range, keep, ceiling=ceiling)
    ratios = nearest.ratios()
    del nearest

    def rows_of(lo, hi):
        return local.BlockRatios(ratios.ratio[lo:hi], ratios.closest[lo:hi], ratios.n_used)

    r_held = rows_of(n_syn, n_syn + n_held)
    held_scores = local.local_scores(r_held, r_held, list(cohort.heldout_patients), self_is_heldout=True,
                                     valid=valid[n_syn:n_syn + n_held])

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

    sources = [cohort.source_patients.get(i) for i in cohort.synthetic_ids]
    score, block, closest, zmaps = scored(rows_of(0, n_syn), valid[:n_syn], sources)
    null = calibration.Null(list(cohort.heldout_ids), list(cohort.heldout_patients), held_scores.score,
                            [cohort.training_ids[j] for j in held_scores.closest])
    rate = settings.rate
    calls = calibration.calibrate(score, null, rate, sources)
    check = calibration.heldout_check(null, rate)
    kept = np.flatnonzero(keep)
    order = np.lexsort((np.asarray(cohort.synthetic_ids, dtype=str), score))
    rows = _call_rows(cohort, grid, kept, order, score, block, closest, calls, valid)

    result = LocalResult(rows, [], {}, grid, kept, queries_raw, valid, score, block, closest, zmaps,
                         calls["fpr"], calls["called"], order, controls,
                         heldout_state=dict(score=held_scores.score, block=held_scores.block,
                                            closest=held_scores.closest))
    ctl_summary = None
    if controls:
        lo = n_syn + n_held
        recipients = [cohort.heldout_patients[c.recipient] for c in controls]
        c_score, c_block, c_closest, c_z = scored(rows_of(lo, lo + len(controls)), valid[lo:], recipients)
        recipient_ids = [cohort.heldout_ids[c.recipient] for c in controls]
        c_calls = calibration.calibrate_without_scans(c_score, null, rate, recipient_ids)
        result.control_state = dict(score=c_score, block=c_block, closest=c_closest, z=c_z, calls=c_calls, lo=lo)
        w = np.stack(whole_cols, axis=1)  # (held-out + controls, training): whole-volume RMSE
        noise_s = noise_sd * smoothed_noise_factor(sigma)
        diag = _control_diagnostics(controls, ctl_info, ratios.closest[lo:], ratios.ratio[lo:], c_z, valid[lo:],
                                    grid, kept, cohort, null, rate, noise_s, settings.n_closest)
        result.controls, ctl_summary = _control_report(cohort, settings, controls, recipients, c_score, c_block,
                                                       c_closest, c_calls, w, grid, kept, null, diag, n_held)
        ctl_summary.update(noise_sd=noise_sd, noise_source=noise_source, noise_sd_smoothed=noise_s)
    smallest = calibration.min_rate(len(cohort.heldout_ids))
    result.summary = {
        "settings": {"block_mm": settings.block_mm, "smooth_mm": settings.smooth_mm, "measure": settings.measure,
                     "n_closest": int(ratios.n_used), "rate": rate, "block_voxels": [2 * c for c in grid.cell],
                     "background": background, "data_range": data_range, "ceiling": ceiling},
        "n_synthetic": n_syn, "n_heldout": len(cohort.heldout_ids), "n_blocks": grid.n_blocks,
        "n_anatomy_blocks": int(keep.sum()), "n_called": int(calls["called"].sum()),
        "heldout_called_leave_patient_out": int(check["called"].sum()),
        "heldout_false_positive_rate": float(check["called"].mean()) if len(check["called"]) else None,
        "smallest_possible_rate": smallest,
        "called": [r["synthetic_id"] for r in rows if r["called"]],
        "controls": ctl_summary,
    }
    if smallest > rate:
        log.warning("local: %d held-out scans support no rate below %.3f, above the calibration rate %.3f: nothing "
                    "can be called", len(cohort.heldout_ids), smallest, rate)
    log.info("local: %d of %d synthetic volumes called local copies at %.3f; held-out scans called when left out: "
             "%d of %d", result.summary["n_called"], n_syn, rate, result.summary["heldout_called_leave_patient_out"],
             len(cohort.heldout_ids))
    if ctl_summary:
        log.info("positive controls called at %.3f, by cube side: %s (whole-volume RMSE ratio: %s)", rate,
                 ", ".join(f"{k} mm {v['sensitivity']:.2f}" for k, v in ctl_summary["by_size_mm"].items()),
                 ", ".join(f"{k} mm {v['whole_volume_rmse_sensitivity']:.2f}"
                           for k, v in ctl_summary["by_size_mm"].items()))
        for reason in ctl_summary["reasons"].values():
            log.info("positive controls: %s", reason)
    return result


def _call_rows(cohort, grid, kept, order, score, block, closest, calls, valid) -> list[dict]:
    rows = []
    for rank, i in enumerate(order, start=1):
        if not np.isfinite(score[i]):  # no block of this volume could be tested
            rows.append({"rank": rank, "synthetic_id": cohort.synthetic_ids[i], "local_score": "NA", "fpr": "NA",
                         "n_null": int(calls["n_null"][i]), "called": 0, "closest_training_id": "NA",
                         "closest_patient_id": "NA", "block_centre_mm": "NA", "block_voxels": "NA",
                         "blocks_tested": int(valid[i].sum()) if valid.shape[1] else 0})
            continue
        b = int(kept[block[i]])
        rows.append({
            "rank": rank, "synthetic_id": cohort.synthetic_ids[i], "local_score": float(score[i]),
            "fpr": float(calls["fpr"][i]), "n_null": int(calls["n_null"][i]), "called": int(calls["called"][i]),
            "closest_training_id": cohort.training_ids[closest[i]],
            "closest_patient_id": cohort.training_patients[closest[i]],
            "block_centre_mm": ",".join(f"{v:.1f}" for v in grid.block_centre_mm(b, cohort.affine)),
            "block_voxels": ",".join(f"{lo}:{hi}" for lo, hi in grid.block_ranges(b)),
            "blocks_tested": int(valid[i].sum()),
        })
    return rows


def _control_diagnostics(controls, info, closest, ratio, z, valid, grid, kept, cohort, null, rate, noise_s,
                         n_closest) -> list[dict]:
    """Per control: the block covering its region (the kept block overlapping the pasted cube
    most), its score and raw ratio there, whether the donor's patient is that block's closest
    training scan, the cut-off the control's score had to pass (the null without its recipient
    scan), and the region's distinctiveness and contrast in smoothed-noise SDs."""
    unit = noise_s if noise_s > 0 else float("nan")
    patients = np.asarray(cohort.training_patients)
    out = []
    for k, c in enumerate(controls):
        side = [c.size_mm / s for s in cohort.spacing_mm]
        j, covered = local.covering_block(grid, kept, c.centre_vox, side)
        row = {"information": info[k]["information"], "region_block_covered": covered,
               "distinctiveness": math.sqrt(info[k]["distinctive_sq"]) / unit,
               "region_contrast": math.sqrt(info[k]["contrast_sq"]) / unit}
        if j is None:
            row.update(region_block_score=float("nan"), region_block_ratio=float("nan"), region_donor_closest=0)
        else:
            row.update(region_block_score=float(z[k, j]) if valid[k, j] else float("nan"),
                       region_block_ratio=float(ratio[k, j]),
                       region_donor_closest=int(patients[int(closest[k, j])] == patients[c.donor]))
        cut = calibration.threshold(np.delete(null.scores, c.recipient), rate)
        row["null_cutoff"] = float("nan") if cut is None else cut
        out.append(row)
    return out


def terciles(values: Sequence[float]) -> list[str]:
    """"low" / "mid" / "high" by the values' rank (ties by order), a third each."""
    v = np.asarray(values, np.float64)
    ranks = np.empty(len(v), int)
    ranks[np.lexsort((np.arange(len(v)), np.nan_to_num(v, nan=-np.inf)))] = np.arange(len(v))
    return [TERCILES[min(2, int(3 * r / max(len(v), 1)))] for r in ranks]


def _control_report(cohort, settings, controls, recipients, c_score, c_block, c_closest, c_calls, w, grid, kept,
                    null, diag, n_held):
    """local_controls.tsv's rows and local.json's "controls": the controls scored like synthetic
    volumes (each without its recipient patient), beside the whole-volume RMSE ratio of the same
    volumes, per size and per distinctiveness tercile (within each size), with reasons."""
    rate = settings.rate
    w_held = distance_ratio(w[:n_held], settings.n_closest)
    w_null = calibration.Null(list(cohort.heldout_ids), list(cohort.heldout_patients), w_held.ratio,
                              [cohort.training_ids[j] for j in w_held.closest])
    w_ratio = distance_ratio(w[n_held:], settings.n_closest).ratio
    w_calls = calibration.calibrate_without_scans(w_ratio, w_null, rate,
                                                  [cohort.heldout_ids[c.recipient] for c in controls])
    tercile = [""] * len(controls)
    for size in settings.sizes_mm:
        idx = [k for k, c in enumerate(controls) if c.size_mm == size]
        for k, t in zip(idx, terciles([diag[k]["distinctiveness"] for k in idx])):
            tercile[k] = t
    rows = []
    for k, c in enumerate(controls):
        found = np.isfinite(c_score[k])
        ranges = grid.block_ranges(int(kept[c_block[k]])) if found else None
        half = [c.size_mm / 2.0 / s_ for s_ in cohort.spacing_mm]
        inside = found and all(a < cc + h and b > cc - h for (a, b), cc, h in zip(ranges, c.centre_vox, half))
        right = found and cohort.training_patients[c_closest[k]] == cohort.training_patients[c.donor]
        g = diag[k]
        rows.append({
            "size_mm": c.size_mm, "recipient_id": cohort.heldout_ids[c.recipient],
            "recipient_patient_id": recipients[k], "donor_id": cohort.training_ids[c.donor],
            "donor_patient_id": cohort.training_patients[c.donor],
            "centre_mm": ",".join(f"{v:.1f}" for v in (cohort.affine @ np.array([*c.centre_vox, 1.0]))[:3]),
            "centred_on": c.centred_on, "information": g["information"], "distinctiveness": g["distinctiveness"],
            "distinctiveness_tercile": tercile[k], "region_contrast": g["region_contrast"],
            "region_block_covered": g["region_block_covered"],
            "region_block_score": g["region_block_score"], "region_block_ratio": g["region_block_ratio"],
            "region_donor_closest": g["region_donor_closest"], "null_cutoff": g["null_cutoff"],
            "local_score": float(c_score[k]) if found else "NA", "fpr": float(c_calls["fpr"][k]) if found else "NA",
            "called": int(c_calls["called"][k]),
            "closest_training_id": cohort.training_ids[c_closest[k]] if found else "NA",
            "right_patient": int(bool(right)), "block_in_region": int(bool(inside)),
            "whole_rmse_ratio": float(w_ratio[k]), "whole_rmse_fpr": float(w_calls["fpr"][k]),
            "whole_rmse_called": int(w_calls["called"][k]),
        })
    by_size = {}
    for size in settings.sizes_mm:
        sel = [r for r in rows if r["size_mm"] == size]
        n = len(sel)
        by_size[f"{size:g}"] = {
            "n": n,
            "sensitivity": sum(r["called"] for r in sel) / n,
            "called_right_patient": sum(r["called"] * r["right_patient"] for r in sel) / n,
            "called_block_in_region": sum(r["called"] * r["block_in_region"] for r in sel) / n,
            "whole_volume_rmse_sensitivity": sum(r["whole_rmse_called"] for r in sel) / n,
            "by_distinctiveness": {t: _fraction([r["called"] for r in sel if r["distinctiveness_tercile"] == t])
                                   for t in TERCILES},
            "median_distinctiveness": _median([r["distinctiveness"] for r in sel]),
            "median_region_contrast": _median([r["region_contrast"] for r in sel]),
            "median_region_block_score": _median([r["region_block_score"] for r in sel]),
            "median_region_block_covered": _median([r["region_block_covered"] for r in sel]),
            "median_null_cutoff": _median([r["null_cutoff"] for r in sel]),
            "donor_closest_at_region": _fraction([r["region_donor_closest"] for r in sel]),
            # a control is judged against the other held-out scans: with fewer than 1 / rate - 1, none is called
            "smallest_possible_rate": min(1.0 / (1 + int(c_calls["n_null"][k])) for k, c in enumerate(controls)
                                          if c.size_mm == size),
        }
    w_check = calibration.heldout_check(w_null, rate)
    centred = {}
    for c in controls:
        centred[c.centred_on] = centred.get(c.centred_on, 0) + 1
    summary = {"n": len(controls), "sizes_mm": list(settings.sizes_mm), "margin_mm": settings.margin_mm,
               "centred_on": centred, "by_size_mm": by_size,
               "whole_volume_rmse_heldout_false_positive_rate": float(w_check["called"].mean())}
    summary["reasons"] = control_reasons(by_size, rate)
    return rows, summary


def _fraction(values: Sequence[float]) -> float | None:
    return float(np.mean(values)) if len(values) else None


def _median(values: Sequence[float]) -> float | None:
    v = np.asarray([x for x in values if x is not None], np.float64)
    v = v[np.isfinite(v)]
    return float(np.median(v)) if v.size else None


def control_reasons(by_size: dict, rate: float) -> dict[str, str]:
    """Why a size's controls were seldom called (sensitivity below :data:`EXPLAIN_BELOW`), from the
    controls' own diagnostics, most basic cause first: the region barely differs from what it
    replaced (nothing to find); the donor is not even the closest training scan at the region's
    block (the region's anatomy is shared by other patients); or it is, but the held-out scans'
    own lowest blocks go as low (the null is wide). Where the cubes cover less than
    :data:`COVERED` of their best block, that is said beside it, not given as the cause: 12 mm
    blocks, which 20 mm cubes cover whole, found at most a fifth of the 20 mm controls placed by
    information content on the real-anatomy cohorts (docs/local_replicas_real_anatomy.md)."""
    out = {}
    for size, e in by_size.items():
        if e["sensitivity"] >= EXPLAIN_BELOW:
            continue
        contrast, closest = e["median_region_contrast"], e["donor_closest_at_region"]
        score, cut = e["median_region_block_score"], e["median_null_cutoff"]
        numbers = (f"median block score over the region {_fmt(score)} against a cut-off of {_fmt(cut)} "
                   f"(the held-out scans' lowest blocks at rate {rate:g}); regions differ from the recipient by "
                   f"{_fmt(contrast)} and from the average patient by {_fmt(e['median_distinctiveness'])} smoothed-noise SD")
        covered = e.get("median_region_block_covered")
        part = (f"; the cubes hold a median {covered:.0%} of the block that covers them most (relict.local.block_mm)"
                if covered is not None and covered < COVERED else "")
        if e.get("smallest_possible_rate", 0.0) > rate:
            why = (f"no control can be called: each is judged against the other held-out scans, too few for rate "
                   f"{rate:g} (the smallest possible is {e['smallest_possible_rate']:.3f}; add held-out scans)")
        elif contrast is not None and contrast < LOW_CONTRAST:
            why = "the pasted regions barely differ from what they replaced: there is no copy there to see"
        elif closest is not None and closest < 0.5:
            why = (f"the donor is the closest training scan at the region's block in only {closest:.0%}: its anatomy "
                   f"there is shared by other training patients{part}")
        elif cut is None or score is None or score >= cut:
            why = ("the donor is found at the region's block, but held-out scans' own lowest blocks score as low: "
                   f"the null is wide (more held-out scans, or less noisy blocks, would narrow it){part}")
        else:
            why = "the regions' blocks score near the cut-off: about half pass it"
        out[size] = f"{size} mm controls, {e['sensitivity']:.2f} called, because {why} ({numbers})"
    return out


def _fmt(x) -> str:
    return "NA" if x is None else f"{x:.2f}"
