"""Helpers for the end-to-end workflow tests: tiny configurations and running Snakemake."""

from __future__ import annotations

import contextlib
import copy
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def tiny_params() -> dict:
    """The shipped params.yaml shrunk to seconds: 4 mm voxels, few patients, small n."""
    p = yaml.safe_load((ROOT / "params.yaml").read_text())
    ds = p["datasets"]["ncct_demo"]
    ds["demo"]["n_patients"] = 7
    ds["demo"]["n_heldout_patients"] = 3
    ds["demo"]["acquisition"]["spacing_mm"] = [[4.0, 4.0, 4.0], [3.5, 3.5, 5.0]]
    pre = ds["preprocess"]
    pre["spacing_mm"] = 4.0
    pre["roi"]["size_vox"] = [44, 52, 44]
    pre["registration"]["shrink_factors"] = [2, 1]
    pre["registration"]["smoothing_sigmas_vox"] = [1, 0]
    pre["registration"]["iterations"] = 100
    sp = ds["synthetic"]["spiked"]
    sp["n_replicas"], sp["n_nonreplicas"] = 5, 4
    ds["segmentation"]["source"] = "unet"  # as the demo: the U-Net trained in the workflow (3 epochs here)
    unet = ds["segmentation"]["unet"]
    unet.update(epochs=3, patch_size=[24, 24, 24], batch_size=2, channels=[8, 16, 32])
    tof = p["datasets"]["tof_demo"]
    tof["demo"].update(n_subjects=10, n_heldout_subjects=4)  # RELICT's 128 x 128 x 32 grid: small already
    tof["synthetic"]["spiked"].update(n_replicas=4, n_nonreplicas=4)
    tof["measures"] = ["rmse", "dice_multiclass", "asd_multiclass"]  # its finding; every level runs on ncct_demo
    p["datasets"].pop("tof_demo_batch2")  # training_from and the filter: tested on a user dataset
    p["datasets"].pop("ncct_demo_hard")  # the feature-level study's harder set: the study runs on ncct_demo here
    p["datasets"]["ncct_ldm"]["measures"] = ["rmse"]  # what its filter, recall and sweep read; all levels: ncct_demo
    ldm = p["datasets"]["ncct_ldm"]["synthetic"]["ldm"]  # the generator at seconds-size
    ldm["n_samples"] = 4
    ldm["autoencoder"].update(channels=[8, 8], epochs=2, patch_size=[24, 24, 24])
    ldm["diffusion"].update(channels=[8, 16], epochs=3, num_inference_steps=4, batch_size=4)
    p["generator_sweep"]["n_training"] = [2]  # equal_steps: 4x the epochs on 2 of 8 scans
    aug = p["datasets"]["ncct_demo_aug"]["synthetic"]["spiked"]  # 8 training scans: 1 plain + 3 augmented replicas
    aug.update(n_replicas=1, n_nonreplicas=2)
    aug["augmented"]["n_per_kind"] = 1
    p["datasets"]["ncct_demo_aug"]["measures"] = ["rmse"]  # MAE's alignment: tests/test_alignment.py
    p["relict"]["alignment"].update(measures=["rmse"], candidates=4)
    p["relict"]["n_closest"] = 4
    p["relict"]["local"]["enabled"] = False  # the local level: test_workflow_demo's fixture switches it on
    p["relict"]["calibration"]["rate"] = 0.2  # 6 held-out NCCT scans (4 in a pool without a non-replica's own patient)
    # the feature-level study on one dataset: the configured network (its result must equal the
    # workflow's own feature level) and a small one, two grids
    configured = {k: p["relict"]["features"][k] for k in ("extractor", "seed", "smoothing_voxels")}
    p["feature_study"].update(datasets=["ncct_demo"], grids=[1, p["relict"]["features"]["grid"]],
                              scalings=[p["relict"]["features"]["scaling"]],
                              networks={"configured": configured,
                                        "r10": {"extractor": "medicalnet_resnet10", "seed": 0}})
    p["relict"]["review"]["top_k"] = 2  # rating-sheet pages (~1 s each)
    # FRD: PyRadiomics takes ~10 s a volume at FRD's 2 mm; tested against frd-score in test_frd.py, in the
    # audit in test_fidelity.py, and on the whole demo by CI (make demo-check)
    p["fidelity"]["frd"] = False
    p["relict"]["evaluation"]["bootstrap"]["n"] = 50
    priv = p["privacy"]  # image (4 mm / 4) and latent filters at seconds-size
    priv["image_downsample"] = 4
    priv["training"].update(epochs=2, patience=2)
    priv["consistency"]["n_filters"] = 2
    priv["verification"]["bootstrap"]["n"] = 100
    anon = p["anonymise"]  # 4 training patients (1 left, 3 right), 3 held out: k = 2 only
    anon.update(seeds=[0, 1], k_same=[2], sampling_variances=[1.0])
    anon["cvae"].update(max_epochs=200)
    anon["probe"].update(max_epochs=100)
    return p


def ncct_only(params: dict) -> dict:
    """The tiny configuration with the NCCT demo alone (faster, for tests about one dataset)."""
    params = copy.deepcopy(params)
    params["datasets"].pop("tof_demo")
    params["datasets"].pop("ncct_ldm")
    params["datasets"].pop("ncct_demo_aug", None)  # replicas under augmentation: tested in the full tiny demo
    params["relict"]["alignment"]["datasets"] = []
    params["generator_sweep"]["dataset"] = None
    params["privacy"]["training_sets"] = []  # tested in the full tiny demo
    params["anonymise"]["datasets"] = {}
    params["relict"]["review"]["filter_measures"] = ["rmse"]
    return params


def write_params(workdir: Path, params: dict) -> Path:
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "params.yaml"
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    return path


def env() -> dict:
    e = dict(os.environ)
    e["PATH"] = f"{BIN}{os.pathsep}{e.get('PATH', '')}"
    return e


def checkout_copy(dest: Path) -> Path:
    """The checkout's files as Git sees them (tracked and untracked-but-not-ignored), copied."""
    import shutil

    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True,
                           check=True).stdout.decode().split("\0")
    for rel in filter(None, files):
        src, dst = ROOT / rel, dest / rel
        if src.is_symlink():
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(os.readlink(src), dst)
        elif src.is_file():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    return dest


def installed_venv(checkout: Path, venv: Path) -> tuple[Path, dict]:
    """A fresh virtual environment with synthaudit installed from a wheel built out of
    ``checkout``, as a user installs it: (its bin folder, an environment to run it with).

    The third-party dependencies come from this test environment's site-packages (a .pth
    entry, after the venv's own), so no download is needed; synthaudit itself is only the
    wheel's: this environment's editable install (a .pth to src/) is not processed there."""
    dist = venv.parent / "dist"
    subprocess.run([str(BIN / "python"), "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "-w", str(dist), str(checkout)], check=True, capture_output=True)
    wheel = next(dist.glob("synthaudit-*.whl"))
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    subprocess.run([str(BIN / "python"), "-m", "pip", "--python", str(venv / "bin/python"), "install", "--quiet",
                    "--no-deps", "--no-index", str(wheel)], check=True, capture_output=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    deps = next(Path(p) for p in sys.path if p.endswith("site-packages") and Path(p).is_relative_to(BIN.parent))
    (site / "zz_test_dependencies.pth").write_text(f"{deps}\n")
    for tool in ("snakemake", "dvc"):  # what `pip install snakemake dvc` would put on the PATH
        script = venv / "bin" / tool
        script.write_text(f"#!/bin/sh\nexec {venv / 'bin/python'} -m {tool} \"$@\"\n")
        script.chmod(0o755)
    e = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    e["PATH"] = f"{venv / 'bin'}{os.pathsep}{e.get('PATH', '')}"
    return venv / "bin", e


def init_labelled_audit(workspace: Path, folders: Path, environ: dict, bin_dir: Path = BIN
                        ) -> subprocess.CompletedProcess:
    """`synthaudit init` as a user types it, on folders training/heldout/synthetic/labels/
    synthetic_labels of registered volumes named ``pat<k>_...`` with one label class."""
    return subprocess.run(
        [str(bin_dir / "synthaudit"), "init", str(workspace), "--training", str(folders / "training"),
         "--heldout", str(folders / "heldout"), "--synthetic", str(folders / "synthetic"), "--labels",
         str(folders / "labels"), "--synthetic-labels", str(folders / "synthetic_labels"), "--registered",
         "--patient-pattern", r"^(pat\d+)_", "--classes", "structure"],
        env=environ, capture_output=True, text=True)


def snakemake(workdir: Path, *targets: str, check: bool = True, extra=()) -> subprocess.CompletedProcess:
    """Run the repository's Snakefile in ``workdir`` (which holds its own params.yaml)."""
    cmd = [str(BIN / "snakemake"), "-s", str(ROOT / "Snakefile"), "-d", str(workdir),
           "--workflow-profile", str(ROOT / "workflow" / "profiles" / "default"), "--cores", "2",
           # tiny volumes gain nothing from a second thread; one thread per job lets two jobs
           # run side by side (rules asking for 2 threads otherwise ran alone most of the time)
           "--max-threads", "1", *extra, *targets]
    proc = subprocess.run(cmd, cwd=workdir, env=env(), capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}")
    return proc


def copy_params(params: dict) -> dict:
    return copy.deepcopy(params)


def image_level_only(params: dict) -> dict:
    """NCCT demo, image level only: enough for tests of workflow mechanics (DVC), and fast."""
    params = ncct_only(params)
    params["datasets"]["ncct_demo"].pop("segmentation")
    params["relict"]["measures"] = ["mae", "rmse", "ssim"]
    return params


def kill_group_when(proc: subprocess.Popen, ready, timeout_s: float, log: Path, what: str,
                    poll_s: float = 1.0) -> None:
    """Wait until ``ready()`` while the run goes on, then SIGKILL its whole process group (a crash,
    the OOM killer, a closed login session). The run must have been started with
    ``start_new_session=True``; it is killed even when the wait fails."""
    try:
        deadline = time.monotonic() + timeout_s
        while not ready():
            assert proc.poll() is None, f"the run ended before {what}:\n{log.read_text()[-4000:]}"
            assert time.monotonic() < deadline, f"{what}: not within {timeout_s:g} s:\n{log.read_text()[-4000:]}"
            time.sleep(poll_s)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
