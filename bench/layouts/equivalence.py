"""The same cohort as users hold it (issue 48) through `synthaudit init` and `snakemake --cores 2`, no edits:
folders of NIfTI, folders of DICOM series, and an nnU-Net raw dataset. Are the rankings and metrics equal?

Two pairs, each against the same volumes as NIfTI folders: DICOM (no label maps: DICOM carries none; the
patients are the series' PatientID there, a file-name pattern in the NIfTI run) and nnU-Net (imagesTr/,
imagesTs/ as held-out, labelsTr/ + labelsTs/, dataset.json's class name; the NIfTI run gives --labels
and --classes; both give --synthetic-labels, so the segmentation level runs without a U-Net).

    python bench/layouts/equivalence.py [ROOT]    # default /tmp/layout_equivalence; about 30 min on 2 cores

Writes ROOT/equivalence.json (per pair: each ranking byte-identical or not, each metrics file equal or
not, init and snakemake exit codes and wall seconds) and prints it.
"""
import json
import pathlib
import shutil
import subprocess
import sys
import time

import numpy as np

ROOT_REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT_REPO / "tests"))
import SimpleITK as sitk  # noqa: E402
from scipy import ndimage  # noqa: E402
from test_dicom import write_series  # noqa: E402

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/layout_equivalence")
shutil.rmtree(root, ignore_errors=True)
rng = np.random.default_rng(5)
shape = (18, 24, 20)
vols = {}
for p in range(8):
    base = ndimage.gaussian_filter(rng.random(shape), 2.0) * 3000 - 1000
    role = "training" if p < 5 else "heldout"
    for s in range(2):
        vols[(role, f"pat{p}_s{s}", f"P{p}")] = np.round(base + rng.normal(0, 20, shape))
vols[("synthetic", "gen_a", "G")] = vols[("training", "pat0_s1", "P0")] + 5
vols[("synthetic", "gen_b", "G")] = vols[("training", "pat2_s0", "P2")] + 5
for x in "cde":
    vols[("synthetic", f"gen_{x}", "G")] = np.round(ndimage.gaussian_filter(rng.random(shape), 2.0) * 3000 - 1000)


def _write(img_array, path):
    img = sitk.GetImageFromArray(img_array)
    img.SetSpacing((2.0, 2.0, 2.0))
    img.SetOrigin((-100.0, -120.0, 30.0))
    path.parent.mkdir(parents=True, exist_ok=True)
    sitk.WriteImage(img, str(path))


nn = root / "nnunet" / "Dataset001_Bench"
for k, ((role, name, pid), arr) in enumerate(vols.items()):
    write_series(root / "dicom" / role / name, arr, spacing=(2.0, 2.0, 2.0), patient=pid, uid=f"1.2.9.{k}")
    _write(arr.astype(np.float32), root / "nifti" / role / f"{name}.nii.gz")
    label = (arr > 300).astype(np.uint8)
    _write(label, root / "nifti" / ("synthetic_labels" if role == "synthetic" else "labels") / f"{name}.nii.gz")
    if role != "synthetic":
        images = "imagesTr" if role == "training" else "imagesTs"
        _write(arr.astype(np.float32), nn / images / f"{name}_0000.nii.gz")
        _write(label, nn / images.replace("images", "labels") / f"{name}.nii.gz")
(nn / "dataset.json").write_text(json.dumps({"channel_names": {"0": "CT"}, "labels": {"background": 0, "bone": 1},
                                             "numTraining": 10, "file_ending": ".nii.gz"}))

pattern = ["--patient-pattern", r"^(pat\d+)_"]
n = root / "nifti"
runs = {
    "nifti": ["--training", n / "training", "--heldout", n / "heldout", "--synthetic", n / "synthetic", *pattern],
    "dicom": ["--training", root / "dicom/training", "--heldout", root / "dicom/heldout", "--synthetic",
              root / "dicom/synthetic"],
    "nifti_labelled": ["--training", n / "training", "--heldout", n / "heldout", "--synthetic", n / "synthetic",
                       "--labels", n / "labels", "--classes", "bone", "--synthetic-labels", n / "synthetic_labels",
                       *pattern],
    "nnunet": ["--nnunet", nn, "--synthetic", n / "synthetic", "--synthetic-labels", n / "synthetic_labels", *pattern],
}
bin_ = pathlib.Path(sys.executable).parent
out = {"runs": {}, "pairs": {}}
for kind, args in runs.items():
    t0 = time.time()
    init = subprocess.run([str(bin_ / "synthaudit"), "init", str(root / f"ws_{kind}"), *map(str, args), "--registered"],
                          capture_output=True, text=True)
    t1 = time.time()
    run = subprocess.run([str(bin_ / "snakemake"), "--cores", "2"], cwd=root / f"ws_{kind}", capture_output=True,
                         text=True) if init.returncode == 0 else None
    out["runs"][kind] = {"init_rc": init.returncode, "init_s": round(t1 - t0, 1),
                         "snakemake_rc": run.returncode if run else None, "snakemake_s": round(time.time() - t1, 1)}
    if init.returncode or (run and run.returncode):
        out["runs"][kind]["error"] = (init.stderr + (run.stderr if run else ""))[-1500:]
    print(kind, out["runs"][kind], flush=True)
for a_kind, b_kind in (("nifti", "dicom"), ("nifti_labelled", "nnunet")):
    a, b = root / f"ws_{a_kind}/results", root / f"ws_{b_kind}/results"
    rankings = {f.name: f.read_bytes() == (b / "relict/audit" / f.name).read_bytes()
                for f in sorted((a / "relict/audit").glob("ranking_*.tsv")) if (b / "relict/audit" / f.name).is_file()}
    missing = sorted({f.name for f in (a / "relict/audit").glob("ranking_*.tsv")}
                     ^ {f.name for f in (b / "relict/audit").glob("ranking_*.tsv")})
    metrics = {}
    for m in ("relict", "copies", "fidelity", "privacy"):
        fa, fb = a / f"metrics/{m}.json", b / f"metrics/{m}.json"
        metrics[m] = fa.is_file() and fb.is_file() and json.loads(fa.read_text()) == json.loads(fb.read_text())
    out["pairs"][f"{a_kind} vs {b_kind}"] = {"rankings_identical": rankings, "rankings_in_one_only": missing,
                                            "metrics_equal": metrics}
(root / "equivalence.json").write_text(json.dumps(out, indent=1) + "\n")
print(json.dumps(out["pairs"], indent=1))
