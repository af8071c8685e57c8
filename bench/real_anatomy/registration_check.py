"""Registration check on real heads given known random poses (issue 29, item 2).

Why: a replica and its source go through the same registration, so whatever the
registration fails to undo becomes distance, and RELICT's ratio (closest / mean of the n
closest) loses the copy. A user found exactly that on real head CT: posed scans of one
patient ended 5x further apart after registration than before posing, and the closest
other scan was the same patient for only 18 of 32 scans, while every scan passed the
correlation QC. This benchmark measures the same thing on real anatomy with a known truth,
running synthaudit's own preprocessing (:func:`synthaudit.preprocess.pipeline.preprocess_image`
with the ``preprocess:`` block ``synthaudit init`` writes for ``--modality mri`` / ``ct``).
It is a benchmark, not a CI test: minutes on 2 cores, and real data from ``fetch.sh``.

What is real and what is made:

- Anatomy: the five real T1-weighted MRI heads of ``cohort.yaml`` (five people) and the
  one real head CT (InVesalius ProMED 0051, HU), each brought onto the cohort's 1.5 mm
  MNI-box grid once (``build_cohort.load_base`` for MRI; the same registration keeping HU
  for CT). The BrainBrowser person's real second acquisition is left out: it has another
  intensity scale and was registered to MNI on its own, so its patients' two scans differ
  more than those of other patients already before posing (same-patient MAE 0.094 against
  0.025; 8 of 32 scans then have another patient closest), and the "before" figure would no
  longer be the reference it must be.
- Patients, as ``build_cohort.py`` makes them: one real head under a smooth random
  deformation of its own (plus, for MRI, a smooth intensity bias). Patients drawn from one
  real head are siblings: closer to each other than strangers are, so "the closest other
  scan is the same patient" is a harder test than on a real cohort (the 8 CT patients are
  all siblings of one head).
- Two scans per patient: the patient's anatomy with a small scan-level deformation, a gain
  (MRI) and noise, on the cohort grid: the "before" volumes (unposed; CT windowed as
  preprocessing windows it).
- Posing: each scan gets its own random rigid pose (rotation up to ``MAX_ROTATION_DEG``
  about a random 3D axis, shift up to ``MAX_SHIFT_MM`` in a random direction) and is
  written on (a) a clinical grid of 0.75 x 0.75 x 2.5 mm (each 2.5 mm slice the mean of
  three thin ones: a slice profile, not point samples) and, for MRI, (b) isotropic 1.5 mm,
  plus acquisition noise. The pose is the truth.

Reported per set (JSON): same-patient MAE (median, max) before posing, after registering
the unposed scans, and after registering the posed scans; the fraction of scans whose
closest other scan (MAE) is the same patient at each of those steps; registration wall
time per scan; optimiser iterations and convergence; correlation QC; and the pose
residual in mm over the head: where the registration of a posed scan sends each head
point, mapped back through the true pose, against where the registration of the same
scan unposed sends it (mean and max per scan), and the same between the two scans of a
patient (``pair_residual_mm``, what decides their MAE).

In ``registration.target: reference`` runs the frame is the reference scan's own registration
to the template, done once per set: the unposed and the posed sets have different references
(the same scan, posed or not), so ``pose_residual_mm`` there also holds the difference between
the two frames; ``pair_residual_mm`` (both scans of a patient in one frame) is the figure to read.

The three runs (before issue 29, template, reference; 2 shared cores) are in
registration_check_results/, their figures in docs/real_anatomy.md's table. With the template,
every failure is one head (BrainBrowser's: 0 of its 8 scans; the other four heads 24/24):
build_cohort.load_base's whole-head registration to the skull-stripped mni_t1 left it about
15 % smaller than MNI, and a brain-masked registration of such a head to mni_t1 ends in a
different wrong pose for each pose. The CT patients are siblings of one
real head, so the CT reference is a sibling of every scan it registers: an easier case for
``reference`` than a real cohort (MRI, five people, is the fair comparison).

Usage (from the repository root):
    .venv/bin/python bench/real_anatomy/registration_check.py --nifti data/real_anatomy/nifti \\
        --work /tmp/regcheck --out regcheck.json [--set key=value ...]

``--work`` keeps the made cohort (bases, scans), so a second run with other settings
(``--set registration.target=reference``) registers the same scans again without remaking them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import nibabel as nib
import numpy as np
import SimpleITK as sitk
import yaml
from scipy.spatial.transform import Rotation

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # build_cohort.py beside this file: its functions are reused, not copied

from build_cohort import bias, deformed, load_base, log, scanned  # noqa: E402
from registration_measures import (  # noqa: E402
    consistency,
    head_points,
    mae_matrix,
    qc_table_figure,
    registration_figures,
    residuals,
)

from synthaudit.io import load_volume, save_volume  # noqa: E402
from synthaudit.preprocess import pipeline  # noqa: E402
from synthaudit.preprocess.register import (  # noqa: E402
    reference_grid,
    register_affine,
    resample_to_grid,
)
from synthaudit.synthetic.spiked import smooth_displacement, warp  # noqa: E402
from synthaudit.workspace import Inputs, _datasets_block  # noqa: E402

RAS_TO_LPS = np.diag([-1.0, -1.0, 1.0])
CT_HEAD = "invesalius-examples/cranium_promed_ct0051.nii.gz"
CT_AIR = -1024.0
# noise: MRI in units of the head's 99th percentile (cohort.yaml's scan_noise is 0.02); CT in HU
# (a head CT's noise at 2.5 mm slices is about 5-10 HU in brain)
CT_SCAN_NOISE_HU = 5.0
CT_ACQ_NOISE_HU = 8.0
MRI_ACQ_NOISE = 0.02
# scanner grids: spacing (mm) and shape, centred on the cohort grid's centre; x runs to the
# patient's left (an LAS grid, as DICOM-converted scans usually are)
GRIDS = {
    "clinical": ((0.75, 0.75, 2.5), (320, 320, 80)),  # 240 x 240 x 200 mm
    "iso1.5": ((1.5, 1.5, 1.5), (160, 160, 134)),  # 240 x 240 x 201 mm
}
MRI_PATIENTS, CT_PATIENTS = 16, 8  # MRI patients from the five heads in turn; CT patients from the one head CT
MAX_ROTATION_DEG, MAX_SHIFT_MM = 10.0, 15.0
SETS = {  # set -> (modality, scanner grid)
    "mri_clinical": ("mri", "clinical"),
    "mri_iso1.5": ("mri", "iso1.5"),
    "ct_clinical": ("ct", "clinical"),
}


def init_preprocess(modality: str) -> dict:
    """The ``preprocess:`` block ``synthaudit init --modality <modality>`` writes (no --registered)."""
    inp = Inputs(training=Path("training"), synthetic=Path("synthetic"), modality=modality)
    block = _datasets_block(inp, {"label_values": []}, "data/manifest.tsv", 0)
    return yaml.safe_load(block)["datasets"]["audit"]["preprocess"]


def apply_overrides(pre: dict, overrides: list[str]) -> dict:
    """``key.sub=value`` (value parsed as YAML) on top of init's block, for comparing settings."""
    for item in overrides:
        key, _, value = item.partition("=")
        node = pre
        *path, last = key.split(".")
        for k in path:
            node = node.setdefault(k, {})
        node[last] = yaml.safe_load(value)
    return pre


# ------------------------------------------------------------------------------ cohort


def pose_transform(rotvec_deg: np.ndarray, shift_mm: np.ndarray, centre_ras: np.ndarray) -> sitk.AffineTransform:
    """The pose P^-1 as SimpleITK wants it (scanner LPS point -> cohort LPS point).

    P maps a cohort point x to the scanner point R (x - c) + c + t (RAS), so
    P^-1(y) = R^T (y - c - t) + c; in LPS (D = diag(-1, -1, 1)) the matrix is D R^T D.
    """
    r = Rotation.from_rotvec(np.deg2rad(rotvec_deg)).as_matrix()
    c, t = np.asarray(centre_ras, float), np.asarray(shift_mm, float)
    m = RAS_TO_LPS @ r.T @ RAS_TO_LPS
    tr = sitk.AffineTransform(3)
    tr.SetMatrix(m.ravel().tolist())
    tr.SetTranslation((RAS_TO_LPS @ c - m @ (RAS_TO_LPS @ (c + t))).tolist())
    return tr


def scanner_affine(spacing, shape, centre_ras) -> np.ndarray:
    """An LAS grid (x towards the patient's left) of ``shape`` centred on ``centre_ras``."""
    a = np.diag([-spacing[0], spacing[1], spacing[2], 1.0])
    a[:3, 3] = np.asarray(centre_ras) - a[:3, :3] @ ((np.asarray(shape) - 1) / 2.0)
    return a


def posed(vol: np.ndarray, vol_affine: np.ndarray, pose: sitk.Transform, grid: str, background: float) -> tuple:
    """``vol`` (cohort grid) under ``pose`` on a scanner grid; thick slices average three thin ones."""
    spacing, shape = GRIDS[grid]
    centre = vol_affine[:3, :3] @ ((np.array(vol.shape) - 1) / 2.0) + vol_affine[:3, 3]
    affine = scanner_affine(spacing, shape, centre)
    sub = 3 if spacing[2] > 2 * spacing[0] else 1
    fine = affine.copy()
    fine[:3, 2] /= sub
    fine[:3, 3] -= fine[:3, 2] * (sub - 1) / 2.0  # thin slices centred on each thick one
    fine_shape = (shape[0], shape[1], shape[2] * sub)
    out = resample_to_grid(vol, vol_affine, pose, fine, fine_shape, order=1, default_value=background)
    out = out.reshape(shape[0], shape[1], shape[2], sub).mean(axis=-1)
    return out.astype(np.float32), affine


def ct_base(path: Path, grid_affine: np.ndarray, shape, template) -> np.ndarray:
    """The real head CT on the cohort grid in HU: registered to the CT-like MNI template
    (as load_base does for MRI, without its rescaling: CT keeps its units), air outside."""
    img = nib.as_closest_canonical(nib.load(str(path)))
    data = np.asarray(img.dataobj, np.float32)
    res = register_affine(template[0], template[1], data, img.affine, threads=2)
    return resample_to_grid(data, img.affine, res.transform, grid_affine, shape, order=1, default_value=CT_AIR)


def make_cohort(args, cfg: dict, work: Path) -> dict:
    """Bases, patients, unposed and posed scans (cached under ``work``); returns the manifest."""
    manifest_path = work / "manifest.json"
    made_with = {"mri_patients": MRI_PATIENTS, "ct_patients": CT_PATIENTS, "max_rotation_deg": MAX_ROTATION_DEG,
                 "max_shift_mm": MAX_SHIFT_MM}
    if manifest_path.exists():
        manifest = json.loads(manifest_path.read_text())
        if manifest.get("made_with") != made_with:
            raise SystemExit(f"{work}: holds a cohort made with {manifest.get('made_with')}, not {made_with}; "
                             "use another --work folder")
        return manifest
    shape = tuple(cfg["grid_vox"])
    sp = [float(cfg["spacing_mm"])] * 3
    grid = reference_grid(cfg["spacing_mm"], shape, cfg["grid_center_mm"])
    centre = np.asarray(cfg["grid_center_mm"], float)
    bases = {}
    t1 = pipeline.load_template("mni_t1", 2.0)
    for name, rel in cfg["heads"].items():
        log(f"MRI base {name}: {rel}")
        bases[name] = load_base(args.nifti / rel, grid, shape, t1)
    log(f"CT base: {CT_HEAD}")
    ct = ct_base(args.nifti / CT_HEAD, grid, shape, pipeline.load_template("mni_ct", 2.0))
    names = list(bases)
    scans = []
    for modality, n_patients in (("mri", MRI_PATIENTS), ("ct", CT_PATIENTS)):
        for k in range(n_patients):
            head = names[k % len(names)] if modality == "mri" else "ct0051"
            prng = np.random.default_rng([cfg["seed"], 100 if modality == "ct" else 0, k])
            disp = smooth_displacement(shape, sp, cfg["patient_deformation_mm"], cfg["patient_smoothness_mm"], prng)
            field = bias(shape, sp, cfg["patient_bias"], prng) if modality == "mri" else None
            for s in range(2):
                srng = np.random.default_rng([cfg["seed"], 100 if modality == "ct" else 0, k, s, 7])
                if modality == "mri":
                    v = scanned(warp(bases[head], disp, order=1) * field, cfg, sp, srng)
                    background, noise = 0.0, MRI_ACQ_NOISE
                else:
                    v = deformed(warp(ct, disp, order=1), sp, cfg["scan_deformation_mm"], 30.0, srng)
                    v = v + srng.normal(0, CT_SCAN_NOISE_HU, v.shape)
                    background, noise = CT_AIR, CT_ACQ_NOISE_HU
                v = v.astype(np.float32)
                sid = f"{modality}{k:02d}_s{s}"
                unposed = work / "unposed" / modality / f"{sid}.nii.gz"
                save_volume(unposed, v, grid, dtype=np.int16 if modality == "ct" else np.float32)
                axis = srng.normal(size=3)
                axis /= np.linalg.norm(axis)
                angle = float(srng.uniform(0, MAX_ROTATION_DEG))
                direction = srng.normal(size=3)
                direction /= np.linalg.norm(direction)
                shift = direction * float(srng.uniform(0, MAX_SHIFT_MM))
                pose = pose_transform(axis * angle, shift, centre)
                entry = {"id": sid, "patient": f"{modality}{k:02d}", "modality": modality, "head": head,
                         "unposed": str(unposed), "rotvec_deg": (axis * angle).tolist(), "shift_mm": shift.tolist(),
                         "angle_deg": angle, "posed": {}}
                for grid_name in {g for m, g in SETS.values() if m == modality}:
                    out, aff = posed(v, grid, pose, grid_name, background)
                    out = out + srng.normal(0, noise, out.shape).astype(np.float32)
                    path = work / "posed" / grid_name / f"{sid}.nii.gz"
                    save_volume(path, out, aff, dtype=np.int16 if modality == "ct" else np.float32)
                    entry["posed"][grid_name] = str(path)
                scans.append(entry)
            log(f"{modality} patient {k:02d} ({head}): 2 scans")
    manifest = {"made_with": made_with, "cohort_grid": grid.tolist(), "cohort_shape": list(shape),
                "centre_ras": centre.tolist(),
                "scans": scans}
    manifest_path.write_text(json.dumps(manifest, indent=1))
    return manifest


# ------------------------------------------------------------------------------ registration

_TEMPLATES: dict = {}


def _template(pre: dict):
    key = (pre["template"], pre["spacing_mm"])
    if key not in _TEMPLATES:
        _TEMPLATES[key] = pipeline.load_template(pre["template"], pre["spacing_mm"])
    return _TEMPLATES[key]


def register_one(job: dict) -> dict:
    """One scan through preprocess_image (threads=1, as the workflow's jobs run); returns figures."""
    pre, grid = job["pre"], job["grid"]
    target = _template(pre)
    if job.get("target") is not None:  # the dataset's registered reference scan (registration.target: reference)
        target = pipeline.load_registration_target(*job["target"])
    t0 = time.perf_counter()
    data, transform, qc = pipeline.preprocess_image(job["path"], pre, grid, target, job["template_roi"], threads=1)
    seconds = time.perf_counter() - t0
    save_volume(job["out"], data, np.asarray(grid["affine"]), dtype=np.float32)
    sitk.WriteTransform(transform, job["out"].replace(".nii.gz", ".tfm"))
    return {"id": job["id"], "seconds": seconds, "qc": {k: v for k, v in qc.items() if k != "file"}}


def run_jobs(jobs: list[dict], processes: int) -> list[dict]:
    if processes == 1:
        return [register_one(j) for j in jobs]
    with ProcessPoolExecutor(processes) as pool:
        return list(pool.map(register_one, jobs))


# ------------------------------------------------------------------------------ measures


def windowed(data: np.ndarray, pre: dict) -> np.ndarray:
    from synthaudit.preprocess.intensity import window

    win = pre["intensity"]["window"]
    return data if win is None else window(data, win[0], win[1], pre["intensity"]["rescale"])


# ------------------------------------------------------------------------------ main


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nifti", type=Path, default=HERE.parents[1] / "data/real_anatomy/nifti",
                    help="fetch.sh's nifti/ folder")
    ap.add_argument("--work", type=Path, required=True, help="folder for the made cohort and registered scans")
    ap.add_argument("--out", type=Path, required=True, help="JSON file for the figures")
    ap.add_argument("--processes", type=int, default=2, help="registrations run in parallel (threads=1 each)")
    ap.add_argument("--set", dest="overrides", action="append", default=[],
                    help="override init's preprocess block, e.g. registration.iterations=400 (YAML value)")
    ap.add_argument("--tag", default="run", help="subfolder of --work for this run's registered scans")
    args = ap.parse_args(argv)
    start = time.perf_counter()
    cfg = yaml.safe_load((HERE / "cohort.yaml").read_text())
    args.work.mkdir(parents=True, exist_ok=True)
    manifest = make_cohort(args, cfg, args.work)
    log(f"cohort ready ({time.perf_counter() - start:.0f} s)")
    centre = np.asarray(manifest["centre_ras"])
    for s in manifest["scans"]:
        s["_pose"] = pose_transform(s["rotvec_deg"], s["shift_mm"], centre)

    figures = {"command": " ".join(sys.argv), "sets": {}, "settings": {}}
    pres = {m: apply_overrides(init_preprocess(m), args.overrides) for m in ("mri", "ct")}
    figures["settings"] = pres
    run_dir = args.work / args.tag
    unposed_done: dict = {}
    for set_name in SETS:
        modality, grid_name = SETS[set_name]
        pre = pres[modality]
        grid = pipeline.output_grid(pre)
        scans = [s for s in manifest["scans"] if s["modality"] == modality]
        patients = [s["patient"] for s in scans]
        template_roi_path = run_dir / modality / "template_roi.nii.gz"
        if not template_roi_path.exists():
            t = pipeline.load_template(pre["template"], pre["spacing_mm"])
            roi = resample_to_grid(t[0], t[1], None, np.asarray(grid["affine"]), tuple(grid["shape"]),
                                   default_value=float(t[0].min()))
            save_volume(template_roi_path, roi, np.asarray(grid["affine"]))
        template_roi, _ = load_volume(template_roi_path)

        def jobs_for(kind: str, paths: dict) -> list[dict]:
            target = None
            if pipeline.registration_settings(pre).get("target") == "reference":
                # as the workflow: the first training scan (sorted ids), registered to the template once
                target = (str(run_dir / kind / "registration_reference.nii.gz"),
                          str(run_dir / kind / "registration_reference_mask.nii.gz"),
                          str(run_dir / kind / "registration_reference.tfm"))
                if not Path(target[2]).exists():
                    t0 = time.perf_counter()
                    ref, qc = pipeline.registration_reference(pre, _template(pre), paths[min(paths)], threads=1)
                    pipeline.save_registration_target(ref, *target)
                    log(f"{kind}: reference {min(paths)} registered to the template in "
                        f"{time.perf_counter() - t0:.1f} s: {qc}")
            return [{"id": s["id"], "path": paths[s["id"]], "pre": pre, "grid": grid, "template_roi": template_roi,
                     "target": target, "out": str(run_dir / kind / f"{s['id']}.nii.gz")} for s in scans]

        out = {"modality": modality, "scanner_grid_mm": GRIDS[grid_name][0], "n_patients": len(set(patients))}
        before = [windowed(load_volume(s["unposed"])[0], pre) for s in scans]
        heads = [s["head"] for s in scans]
        out["before"] = consistency(mae_matrix(before), patients, heads)
        del before
        if modality not in unposed_done:
            log(f"{set_name}: registering {len(scans)} unposed scans")
            res = run_jobs(jobs_for(f"unposed_{modality}", {s["id"]: s["unposed"] for s in scans}), args.processes)
            vols = [load_volume(run_dir / f"unposed_{modality}" / f"{s['id']}.nii.gz")[0] for s in scans]
            unposed_done[modality] = {"registered": consistency(mae_matrix(vols), patients, heads),
                                      **registration_figures(res)}
        out["unposed_registered"] = unposed_done[modality]
        log(f"{set_name}: registering {len(scans)} posed scans")
        res = run_jobs(jobs_for(set_name, {s["id"]: s["posed"][grid_name] for s in scans}), args.processes)
        vols = [load_volume(run_dir / set_name / f"{s['id']}.nii.gz")[0] for s in scans]
        out["after"] = consistency(mae_matrix(vols), patients, heads)
        out["after"]["qc_table_closest_is_same_patient"] = qc_table_figure(vols, patients, grid)
        out.update(registration_figures(res))
        points = head_points(template_roi, np.asarray(grid["affine"]))
        tfm = {s["id"]: sitk.ReadTransform(str(run_dir / set_name / f"{s['id']}.tfm")) for s in scans}
        tfm0 = {s["id"]: sitk.ReadTransform(str(run_dir / f"unposed_{modality}" / f"{s['id']}.tfm")) for s in scans}
        out.update(residuals(scans, tfm, tfm0, points))
        figures["sets"][set_name] = out
        log(f"{set_name}: {json.dumps({k: out[k] for k in ('before', 'after', 'pose_residual_mm')})}")
    figures["wall_s"] = round(time.perf_counter() - start, 1)
    figures["cpu_count"] = os.cpu_count()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(figures, indent=2) + "\n")
    log(f"written {args.out} ({figures['wall_s']} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
