"""Augmented copies of a real head CT kept in HU, found by the workflow's alignment (issue 29).

Why: a user's real head CT in HU (air -1,000) lost every shifted and rotated copy because the
alignment padded with 0 (water). The unit tests use small synthetic heads; this check runs the
workflow's own path (pre-selection on block means, then the coarse-to-fine full-resolution
search, the search space from params.yaml) on the one real head CT the registries ship
(invesalius-examples, 0.96 x 0.96 x 1.5 mm, resampled to 1.5 mm as the user's grid was).

Training "patients" are the real CT under smooth random deformations (up to 6 mm) plus noise;
synthetic copies are shifted (5-10 mm in all), rotated (4-10 degrees about a random 3D axis, plus
a shift) or mirrored, padded with air as a generator's augmentation pads, plus noise. Reported
per copy: plain and aligned MAE to the source, the source's rank among the training scans
(plain, aligned), the recovered transform, and over every candidate pair whether an aligned
distance ever exceeds the plain one.

    python bench/real_anatomy/alignment_ct_check.py --ct data/real_anatomy/nifti/invesalius-examples/cranium_promed_ct0051.nii.gz \\
        --out bench/real_anatomy/alignment_ct_results.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import nibabel as nib
import numpy as np
import yaml
from scipy import ndimage

sys.path.insert(0, str(Path(__file__).resolve().parent))
from build_cohort import deformed, rigid  # noqa: E402  (the cohort's own augmentations)

from synthaudit.relict import alignment as al  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CT = ROOT / "data/real_anatomy/nifti/invesalius-examples/cranium_promed_ct0051.nii.gz"
AIR = -1000.0
NOISE_HU = 10.0
SPACING_MM, PATIENTS, COPIES_PER_KIND, SEED = 1.5, 10, 3, 29  # this check's cohort (alignment_ct_results.json)


def ct_on_grid(path: Path, spacing_mm: float) -> tuple[np.ndarray, np.ndarray]:
    """A CT in HU (clipped to the 12-bit range), RAS, linearly resampled to ``spacing_mm`` isotropic;
    returns (volume, the file's voxel sizes in mm)."""
    img = nib.as_closest_canonical(nib.load(str(path)))
    v = np.clip(np.asarray(img.dataobj, np.float32), -1024, 3071)
    zooms = np.asarray(img.header.get_zooms()[:3], float)
    return ndimage.zoom(v, zooms / spacing_mm, order=1, mode="nearest").astype(np.float32), zooms


def load_ct(path: Path, spacing_mm: float) -> np.ndarray:
    """The CT in HU on an isotropic grid, cropped to the head with a 15 mm margin."""
    v, _ = ct_on_grid(path, spacing_mm)
    head = ndimage.binary_opening(v > -500, iterations=2)
    idx = np.argwhere(head)
    m = int(round(15 / spacing_mm))
    lo, hi = np.maximum(idx.min(0) - m, 0), np.minimum(idx.max(0) + m + 1, v.shape)
    return np.ascontiguousarray(v[lo[0]:hi[0], lo[1]:hi[1], lo[2]:hi[2]])


def in_air(f, v: np.ndarray, *args) -> np.ndarray:
    """Apply a 0-padding augmentation so that it pads with air instead (the CT stays in HU)."""
    return (f(v - AIR, *args) + AIR).astype(np.float32)


def cohort(base: np.ndarray, sp, n_train: int, per_kind: int, n_new: int, rng):
    """Training "patients" (``base`` under smooth deformations up to 6 mm), then per kind ``per_kind`` shifted,
    rotated and mirrored copies of training scans (padded with air), then ``n_new`` new deformations, every
    volume with 10 HU noise; the truth per synthetic volume: its kind, source and transform."""
    def noisy(v):
        return v + rng.normal(0, NOISE_HU, v.shape).astype(np.float32)

    training = [noisy(in_air(deformed, base, sp, 6.0, 30.0, rng)) for _ in range(n_train)]
    synthetic, truth = [], []
    for kind in ("shifted", "rotated", "flipped"):
        for _ in range(per_kind):
            src = int(rng.integers(n_train))
            clean = training[src]
            if kind == "shifted":
                d = rng.normal(size=3)
                shift = d / np.linalg.norm(d) * rng.uniform(5, 10)
                v, what = in_air(rigid, clean, sp, [0, 0, 0], shift), {"shift_mm": shift.round(2).tolist()}
            elif kind == "rotated":
                a = rng.normal(size=3)
                rot = a / np.linalg.norm(a) * rng.uniform(4, 10)
                shift = rng.uniform(-4, 4, 3)
                v = in_air(rigid, clean, sp, rot, shift)
                what = {"rotvec_deg": rot.round(2).tolist(), "shift_mm": shift.round(2).tolist(),
                        "angle_deg": round(float(np.linalg.norm(rot)), 2)}
            else:
                v, what = np.ascontiguousarray(clean[::-1]), {"mirror_axis": 0}
            synthetic.append(noisy(v))
            truth.append({"kind": kind, "source": src, **what})
    for _ in range(n_new):
        synthetic.append(noisy(in_air(deformed, base, sp, 6.0, 30.0, rng)))
        truth.append({"kind": "new", "source": None})
    return training, synthetic, truth


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ct", type=Path, default=CT)
    ap.add_argument("--out", type=Path, default=ROOT / "bench/real_anatomy/alignment_ct_results.json")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(SEED)
    sp = [SPACING_MM] * 3
    base = load_ct(args.ct, SPACING_MM)
    print(f"CT on {base.shape} at {SPACING_MM} mm, HU {np.percentile(base, 1):.0f} to {np.percentile(base, 99):.0f}")
    training, copies, truth = cohort(base, sp, PATIENTS, COPIES_PER_KIND, 0, rng)

    cfg = yaml.safe_load((ROOT / "params.yaml").read_text())["relict"]["alignment"]
    space = al.SearchSpace.from_params(cfg["search"])
    volumes = {f"t{i}": v for i, v in enumerate(training)} | {f"s{i}": v for i, v in enumerate(copies)}
    affine = np.diag(sp + [1.0])

    def load(key):
        return volumes[key], affine

    syn_keys, train_keys = [f"s{i}" for i in range(len(copies))], [f"t{i}" for i in range(len(training))]
    k = len(training)
    factor_pre = al.preselect_factor(float(cfg["preselect_block_mm"]), base.shape, sp, space, 4e9)
    start = time.perf_counter()
    candidates, hypotheses, spacing, background = al.preselect_volumes(
        syn_keys, train_keys, load, space, k, factor_pre, n_hypotheses=int(cfg["hypotheses"]), workers=args.threads)
    pairs = al.align_candidates(syn_keys, train_keys, load, candidates, hypotheses, space, spacing,
                                workers=args.threads, factor=al.refine_factor(cfg.get("coarse_mm"), spacing),
                                background=background)
    seconds = time.perf_counter() - start
    rows, above = [], 0
    for i, (v, t) in enumerate(zip(copies, truth)):
        plain = np.array([np.mean(np.abs(v - tr)) for tr in training])
        aligned = plain.copy()
        found = {}
        for j, p in zip(candidates[i], pairs[i]):
            found[int(j)] = p
            above += int(p.mae > plain[j] * (1 + 1e-6))
            aligned[j] = min(aligned[j], p.mae)
        s = t["source"]
        tr = found[s].transform if s in found else None
        rows.append({**t, "plain_mae_source": round(float(plain[s]), 2),
                     "aligned_mae_source": round(float(aligned[s]), 2),
                     "aligned_mae_closest_other": round(float(np.delete(aligned, s).min()), 2),
                     "rank_plain": int((plain < plain[s]).sum()) + 1, "rank_aligned": int((aligned < aligned[s]).sum()) + 1,
                     "transform_found": tr.describe(spacing) if tr else None})
    out = {"ct": str(args.ct.relative_to(ROOT)) if args.ct.is_relative_to(ROOT) else str(args.ct),
           "grid": list(base.shape), "spacing_mm": sp, "background_hu": background, "noise_hu": NOISE_HU,
           "n_training": len(training), "search": cfg["search"], "preselect_factor": factor_pre,
           "seconds": round(seconds, 1), "threads": args.threads,
           "aligned_above_plain_pairs": above, "n_pairs": int(sum(len(p) for p in pairs)),
           "found": {kind: f"{sum(r['rank_aligned'] == 1 for r in rows if r['kind'] == kind)} of "
                           f"{sum(r['kind'] == kind for r in rows)}" for kind in ("shifted", "rotated", "flipped")},
           "found_plain": {kind: f"{sum(r['rank_plain'] == 1 for r in rows if r['kind'] == kind)} of "
                                 f"{sum(r['kind'] == kind for r in rows)}" for kind in ("shifted", "rotated", "flipped")},
           "copies": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps({k: out[k] for k in ("background_hu", "seconds", "aligned_above_plain_pairs", "n_pairs",
                                          "found", "found_plain")}, indent=1))
    for r in rows:
        print(r)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
