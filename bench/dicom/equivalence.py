"""A DICOM cohort and the same volumes as NIfTI through `synthaudit init` and `snakemake` (issue 48):
are the rankings and metrics equal? (The patients are PatientIDs in one, a file-name pattern in the other.)

    python bench/dicom/equivalence.py [ROOT]      # default /tmp/dicom_equivalence; about 15 min on 2 cores
"""
import json, sys, pathlib, shutil, subprocess
import numpy as np
ROOT_REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT_REPO / "tests"))
import SimpleITK as sitk
from scipy import ndimage
from test_dicom import write_series
root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/dicom_equivalence")
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
for k, ((role, name, pid), arr) in enumerate(vols.items()):
    write_series(root / "dicom" / role / name, arr, spacing=(2.0, 2.0, 2.0), patient=pid, uid=f"1.2.9.{k}")
    img = sitk.GetImageFromArray(arr.astype(np.float32)); img.SetSpacing((2.0, 2.0, 2.0)); img.SetOrigin((-100.0, -120.0, 30.0))
    (root / "nifti" / role).mkdir(parents=True, exist_ok=True)
    sitk.WriteImage(img, str(root / "nifti" / role / f"{name}.nii.gz"))
bin_ = str(pathlib.Path(sys.executable).parent)
for kind, extra in (("dicom", []), ("nifti", ["--patient-pattern", r"^(pat\d+)_"])):
    d = root / kind
    r = subprocess.run([f"{bin_}/synthaudit", "init", str(root / f"ws_{kind}"), "--training", str(d / "training"), "--heldout",
                        str(d / "heldout"), "--synthetic", str(d / "synthetic"), "--registered", *extra], capture_output=True, text=True)
    print(kind, "init", r.returncode, r.stderr[-500:])
    run = subprocess.run([f"{bin_}/snakemake", "--cores", "2"], cwd=root / f"ws_{kind}", capture_output=True, text=True)
    print(kind, "snakemake", run.returncode, run.stderr[-300:] if run.returncode else "")
a, b = root / "ws_dicom/results", root / "ws_nifti/results"
for f in sorted((a / "relict/audit").glob("ranking_*.tsv")):
    print(f.name, "same" if f.read_bytes() == (b / "relict/audit" / f.name).read_bytes() else "DIFFERENT")
for m in ("relict", "copies", "fidelity", "privacy"):
    same = json.loads((a / f"metrics/{m}.json").read_text()) == json.loads((b / f"metrics/{m}.json").read_text())
    print(f"metrics/{m}.json", "equal" if same else "DIFFERENT")
