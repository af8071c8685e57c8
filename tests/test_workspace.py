"""`synthaudit init`: an audit folder made from folders of NIfTI, its refusals before any job,
and (end to end) one `snakemake` command in that folder, as a new user types it."""

import json
import os
import re
import subprocess

import nibabel as nib
import numpy as np
import pytest
import yaml
from scipy import ndimage

import synthaudit

from synthaudit.cli import main
from synthaudit.config import load_params
from synthaudit.io import read_tsv, save_volume
from synthaudit.sources import SourceError, plan_dataset, read_manifest
from synthaudit.workspace import Inputs, WorkspaceError, write_workspace
from workflow_helpers import ROOT, checkout_copy, init_labelled_audit, installed_venv

SHAPE = (20, 24, 18)
AFFINE = np.diag([2.0, 2.0, 2.0, 1.0])


def _folders(tmp_path, n_train_patients=5, n_heldout_patients=3, seed=0):
    """Two scans per patient (training and held-out folders), label maps for every scan, and
    five samples: near-copies of pat0_s1 and pat2_s0, three new volumes."""
    rng = np.random.default_rng(seed)
    vols = {}
    for p in range(n_train_patients + n_heldout_patients):
        base = ndimage.gaussian_filter(rng.random(SHAPE), 2.0).astype(np.float32) * 4
        for s in range(2):
            vols[f"pat{p}_s{s}"] = base + 0.05 * rng.standard_normal(SHAPE).astype(np.float32)
    for k, v in vols.items():
        role = "training" if int(k[3:].split("_")[0]) < n_train_patients else "heldout"
        save_volume(tmp_path / role / f"{k}.nii.gz", v, AFFINE)
        save_volume(tmp_path / "labels" / f"{k}.nii.gz", (v > v.mean()).astype(np.uint8), AFFINE)
    samples = {"gen_a": vols["pat0_s1"], "gen_b": vols["pat2_s0"]}
    samples.update({f"gen_{x}": ndimage.gaussian_filter(rng.random(SHAPE), 2.0).astype(np.float32) * 4 for x in "cde"})
    for name, v in samples.items():
        v = v + 0.01 * rng.standard_normal(SHAPE).astype(np.float32)
        save_volume(tmp_path / "synthetic" / f"{name}.nii.gz", v, AFFINE)
        save_volume(tmp_path / "synthetic_labels" / f"{name}.nii.gz", (v > v.mean()).astype(np.uint8), AFFINE)
    return tmp_path


def _inputs(d, **kw):
    base = dict(training=d / "training", synthetic=d / "synthetic", heldout=d / "heldout", labels=d / "labels",
                synthetic_labels=d / "synthetic_labels", patient_pattern=r"^(pat\d+)_", registered=True,
                classes=["structure"])
    base.update(kw)
    return Inputs(**base)


def _params(ws):
    cwd = os.getcwd()
    os.chdir(ws)
    try:
        p = load_params("params.yaml")  # the schema, as the workflow validates it
        return p, plan_dataset("audit", p["datasets"]["audit"])
    finally:
        os.chdir(cwd)


def test_init_writes_a_workspace_holding_only_this_audit(tmp_path):
    d = _folders(tmp_path / "in")
    plan = write_workspace(tmp_path / "ws", _inputs(d), progress=lambda m: None)
    p, dataset = _params(tmp_path / "ws")
    assert list(p["datasets"]) == ["audit"]  # nothing of the demo
    assert (len(dataset.train), len(dataset.heldout), len(dataset.synthetic)) == (10, 6, 5)
    assert {s.patient_id for s in dataset.train} == {f"pat{k}" for k in range(5)}  # from the file names
    assert all(s.label for s in dataset.scans)
    ds = p["datasets"]["audit"]
    assert ds["preprocess"]["register"] is False and ds["segmentation"]["source"] == "labels"
    assert ds["segmentation"]["classes"] == ["structure"]
    # stages the data cannot support are off, and say why
    assert p["generator_sweep"]["dataset"] is None and p["privacy"]["latent_autoencoder"] is None
    assert p["anonymise"]["datasets"] == {}
    # derived from the data (tests/test_init_defaults.py): 10 training scans allow n = 10, and the
    # alignment of so small an audit is affordable, so augmented copies are searched
    assert p["relict"]["n_closest"] == 10 and p["relict"]["alignment"]["datasets"] == ["audit"]
    assert p["feature_study"]["datasets"] == []
    assert p["privacy"]["training_sets"] == ["audit"]  # held-out scans and patients with two scans
    text = (tmp_path / "ws/params.yaml").read_text()
    assert "off: needs a rating (--ratings)" in text and "off: needs a generator trained here" in text
    assert "6 held-out scans: calibrated calls need >= 19" in text
    assert plan["n_train"] == 10 and plan["n_patients"] == 5 and plan["pairs"] == (5 + 6) * 10
    assert plan["search"] == {"mode": "exhaustive", "pairs": 110, "threshold": 200_000}  # relict.search: small
    assert plan["summary"]["shape"] == list(SHAPE) and plan["warning"] is None
    for f in ("Snakefile", "dvc.yaml", ".dvc/config", "profiles/default/config.yaml", "profiles/slurm/config.yaml"):
        assert (tmp_path / "ws" / f).is_file(), f
    snakefile = (tmp_path / "ws/Snakefile").read_text()  # the installed workflow's, naming no checkout
    assert "synthaudit.resources.snakefile()" in snakefile and str(ROOT) not in snakefile


def test_init_turns_off_what_the_folders_cannot_support(tmp_path):
    d = _folders(tmp_path / "in")
    write_workspace(tmp_path / "ws", _inputs(d, heldout=None, synthetic_labels=None, patient_pattern=None),
                    progress=lambda m: None)
    p, dataset = _params(tmp_path / "ws")
    assert p["privacy"]["training_sets"] == []  # no held-out scans
    assert "off: no held-out scans" in (tmp_path / "ws/params.yaml").read_text()
    assert p["datasets"]["audit"]["segmentation"]["source"] == "unet"  # training labels only: the U-Net
    assert {s.patient_id for s in dataset.train} == {s.id for s in dataset.train}  # one patient per scan
    write_workspace(tmp_path / "ws2", _inputs(d, labels=None, synthetic_labels=None), progress=lambda m: None)
    p, _ = _params(tmp_path / "ws2")
    assert "segmentation" not in p["datasets"]["audit"]


def test_init_refuses_bad_folders_before_any_job_naming_the_file(init_says_only_its_own, tmp_path):
    d = _folders(tmp_path / "in")
    quiet = {"progress": lambda m: None}
    # a label map with a non-integer value
    bad = d / "labels" / "pat1_s0.nii.gz"
    save_volume(bad, np.full(SHAPE, 0.5, np.float32), AFFINE)
    with pytest.raises(WorkspaceError, match="pat1_s0.nii.gz: label map holds non-integer"):
        write_workspace(tmp_path / "ws1", _inputs(d), **quiet)
    save_volume(bad, np.zeros(SHAPE, np.uint8), AFFINE)
    # a sample off the training grid
    save_volume(d / "synthetic" / "gen_z.nii.gz", np.zeros((20, 24, 17), np.float32), AFFINE)
    save_volume(d / "synthetic_labels" / "gen_z.nii.gz", np.zeros((20, 24, 17), np.uint8), AFFINE)
    with pytest.raises(WorkspaceError, match=r"gen_z.nii.gz: shape \[20, 24, 17\], expected \[20, 24, 18\]"):
        write_workspace(tmp_path / "ws2", _inputs(d), **quiet)
    (d / "synthetic" / "gen_z.nii.gz").unlink()
    # ids that differ only in case collide on case-insensitive file systems
    (d / "training" / "pat1_s0.nii.gz").rename(d / "training" / "PAT1_s0.nii.gz")
    (d / "labels" / "pat1_s0.nii.gz").rename(d / "labels" / "PAT1_s0.nii.gz")
    save_volume(d / "training" / "pat1_S0.nii.gz", np.zeros(SHAPE, np.float32), AFFINE)
    save_volume(d / "labels" / "pat1_S0.nii.gz", np.zeros(SHAPE, np.uint8), AFFINE)
    with pytest.raises(WorkspaceError, match="differ only in case.*PAT1_s0 and pat1_S0"):
        write_workspace(tmp_path / "ws3", _inputs(d, patient_pattern=None), **quiet)
    # a training set of one scan: every ratio would be 1
    one = tmp_path / "one"
    save_volume(one / "a.nii.gz", np.ones(SHAPE, np.float32), AFFINE)
    with pytest.raises(WorkspaceError, match="1 training scan.*at least 2"):
        write_workspace(tmp_path / "ws4", _inputs(d, training=one, heldout=None, labels=None, synthetic_labels=None,
                                                  patient_pattern=None), **quiet)
    assert not any((tmp_path / f"ws{k}").exists() for k in range(1, 5))  # nothing written on refusal
    # an existing audit is never overwritten
    (tmp_path / "ws5").mkdir()
    (tmp_path / "ws5/params.yaml").write_text("x: 1\n")
    with pytest.raises(WorkspaceError, match="already holds a params.yaml"):
        write_workspace(tmp_path / "ws5", _inputs(d), **quiet)


def _hu(d):
    """The folders' volumes in CT-like units (about -300 to 300, float32) instead of ~2 +- 0.2."""
    for role in ("training", "heldout", "synthetic"):
        for f in (d / role).glob("*.nii.gz"):
            save_volume(f, (nib.load(f).get_fdata() - 2.0) * 1000, AFFINE, dtype=np.float32)


def test_init_refuses_single_files_in_other_units_naming_each(init_says_only_its_own, tmp_path):
    """One training scan scaled by 10^6 (int32) and one sample exported as 8-bit among volumes in
    HU-like units: each named with the likely cause, nothing written (every distance to them
    would compare units, not anatomy)."""
    d = _folders(tmp_path / "in")
    _hu(d)
    scan = d / "training" / "pat1_s0.nii.gz"
    save_volume(scan, nib.load(scan).get_fdata() * 1e6, AFFINE, dtype=np.int32)
    sample = d / "synthetic" / "gen_c.nii.gz"
    x = nib.load(sample).get_fdata()
    save_volume(sample, np.round(np.clip((x + 300) / 600 * 255, 0, 255)), AFFINE, dtype=np.uint8)
    with pytest.raises(WorkspaceError) as e:
        write_workspace(tmp_path / "ws", _inputs(d), progress=lambda m: None)
    msg = str(e.value)
    assert "2 problem(s)" in msg
    assert re.search(r"pat1_s0.nii.gz: intensities about 10\^6 times the training scans' range .*stored as int32", msg)
    assert re.search(r"gen_c.nii.gz: 8-bit intensities \(values \d+ to \d+, stored as uint8\) beside 1st-99th "
                     r"percentiles of the training scans' -2\d\d(\.\d)? to 2\d\d", msg)
    assert not (tmp_path / "ws").exists()


def test_init_refuses_a_whole_sample_set_in_other_units(init_says_only_its_own, tmp_path):
    """Samples left in a generator's [0, 1] range beside scans in HU-like units: each refused."""
    d = _folders(tmp_path / "in")
    _hu(d)
    for f in (d / "synthetic").glob("*.nii.gz"):
        save_volume(f, (nib.load(f).get_fdata() + 300) / 600, AFFINE)
    with pytest.raises(WorkspaceError, match=r"5 problem\(s\)(.|\n)*gen_a.nii.gz: intensities about 10\^-3 times"):
        write_workspace(tmp_path / "ws", _inputs(d), progress=lambda m: None)


def test_init_warns_per_file_prints_writes_and_accepts_legal_oddities(tmp_path, capsys):
    """A constant training scan, an empty sample, a sample with one bright voxel and a sample
    spread 5 times as wide: accepted (their distances are defined), each warning printed, written
    to data/input_warnings.tsv with the file's id and role, and nothing said of the others."""
    d = _folders(tmp_path / "in")
    save_volume(d / "training" / "pat0_s0.nii.gz", np.full(SHAPE, 2.0, np.float32), AFFINE)
    save_volume(d / "synthetic" / "gen_c.nii.gz", np.zeros(SHAPE, np.float32), AFFINE)
    spot = np.zeros(SHAPE, np.float32)
    spot[3, 4, 5] = 9.0
    save_volume(d / "synthetic" / "gen_d.nii.gz", spot, AFFINE)
    e = d / "synthetic" / "gen_e.nii.gz"
    save_volume(e, (nib.load(e).get_fdata() - 2.0) * 10 + 2.0, AFFINE)
    assert main(["init", str(tmp_path / "ws"), "--training", str(d / "training"), "--synthetic",
                 str(d / "synthetic"), "--heldout", str(d / "heldout"), "--registered", "--no-timing"]) == 0
    out = capsys.readouterr().out
    assert "WARNING: 4 input volume(s) accepted with a warning" in out
    expected = {"pat0_s0": ("train", "constant volume: every voxel is 2"),
                "gen_c": ("synthetic", "empty volume: every voxel is 0"),
                "gen_d": ("synthetic", "nearly constant volume: 1 voxel(s) differ from 0 (values 0 to 9)"),
                "gen_e": ("synthetic", "intensities spread ")}
    rows = read_tsv(tmp_path / "ws/data/input_warnings.tsv")
    assert {r["id"]: (r["role"], r["warning"][:len(expected[r["id"]][1])]) for r in rows} == expected
    spread = re.match(r"intensities spread ([\d.]+) times as wide as the training scans'", rows[-1]["warning"])
    factor = float(spread[1])
    assert 3 < factor < 100  # 10 times the deviations from the mean: warned, not refused
    assert all(r["dataset"] == "audit" and r["file"] == str(d / ("training" if r["role"] == "train" else
                                                                  "synthetic") / f"{r['id']}.nii.gz") for r in rows)
    for i, (_, text) in expected.items():
        assert f"{i}.nii.gz: {text}" in out


def test_init_compares_samples_with_the_windowed_scans_without_registered(tmp_path):
    """Without --registered (CT), the scans are windowed to [0, 1] by preprocessing, so samples in
    [0, 1] beside raw scans in HU are right (no word), and samples in HU are refused; a scan
    constant in the registration's range cannot be registered: refused, naming it."""
    d = _folders(tmp_path / "in")
    _hu(d)
    grid = (91, 109, 91)  # the output grid the samples must be on
    rng = np.random.default_rng(1)
    syn = tmp_path / "syn"
    for k in range(2):
        x = ndimage.gaussian_filter(rng.random(grid), 2.0)
        save_volume(syn / f"s{k}.nii.gz", ((x - x.min()) / (x.max() - x.min())).astype(np.float32), AFFINE)
    inp = dict(heldout=None, labels=None, synthetic_labels=None, registered=False, synthetic=syn)
    plan = write_workspace(tmp_path / "ws1", _inputs(d, **inp), progress=lambda m: None)
    assert plan["warning"] is None and not (tmp_path / "ws1/data/input_warnings.tsv").exists()
    save_volume(syn / "s0.nii.gz", ndimage.gaussian_filter(rng.random(grid), 2.0).astype(np.float32) * 2000 - 1000,
                AFFINE)
    save_volume(d / "training" / "pat3_s1.nii.gz", np.full(SHAPE, -1000.0, np.float32), AFFINE)
    with pytest.raises(WorkspaceError) as e:
        write_workspace(tmp_path / "ws2", _inputs(d, **inp), progress=lambda m: None)
    assert re.search(r"s0.nii.gz: intensities about 10\^2 times .*after the window -100 to 200 mapped to \[0, 1\]",
                     str(e.value))
    assert "pat3_s1.nii.gz: constant within the registration's intensity range -200 to 1500 (values -1000 to " \
           "-1000): nothing to register" in str(e.value)
    assert not (tmp_path / "ws2").exists()


def test_init_refuses_all_constant_training_scans(init_says_only_its_own, tmp_path):
    d = _folders(tmp_path / "in")
    for k, f in enumerate(sorted((d / "training").glob("*.nii.gz"))):
        save_volume(f, np.full(SHAPE, float(k), np.float32), AFFINE)
    with pytest.raises(WorkspaceError, match="every training scan is constant or nearly constant"):
        write_workspace(tmp_path / "ws", _inputs(d), progress=lambda m: None)


def test_init_names_empty_and_unreadable_files_before_matching_label_maps(init_says_only_its_own, tmp_path):
    """A 0-byte sample has no label map either; the cause is the empty file, said first."""
    d = _folders(tmp_path / "in")
    (d / "synthetic" / "zz_empty.nii.gz").write_bytes(b"")
    (d / "synthetic" / "zz_junk.nii.gz").write_bytes(b"not a NIfTI file at all")
    with pytest.raises(WorkspaceError) as e:
        write_workspace(tmp_path / "ws", _inputs(d), progress=lambda m: None)
    msg = str(e.value)
    assert "2 unreadable file(s) in the synthetic folder" in msg and "no label map" not in msg
    assert f"{d / 'synthetic' / 'zz_empty.nii.gz'}: empty file (0 bytes)" in msg
    assert f"{d / 'synthetic' / 'zz_junk.nii.gz'}: not a readable NIfTI (" in msg
    assert not (tmp_path / "ws").exists()


def test_init_names_the_label_maps_beyond_the_declared_classes(init_says_only_its_own, tmp_path):
    d = _folders(tmp_path / "in")
    for name in ("labels/pat2_s1", "synthetic_labels/gen_b"):
        lab = np.asarray(nib.load(d / f"{name}.nii.gz").dataobj).copy()
        lab[0, 0, 0] = 7
        save_volume(d / f"{name}.nii.gz", lab, AFFINE)
    with pytest.raises(WorkspaceError) as e:
        write_workspace(tmp_path / "ws", _inputs(d), progress=lambda m: None)
    for name in ("labels/pat2_s1", "synthetic_labels/gen_b"):
        assert f"{name}.nii.gz: label values up to 7, --classes names 1 (structure) for the values 1 to 1" \
            in str(e.value)
    assert "pat1_s0" not in str(e.value) and not (tmp_path / "ws").exists()


def test_manifest_and_plan_refuse_case_collisions_and_a_single_training_scan(init_says_only_its_own, tmp_path):
    for name in ("a", "A"):
        save_volume(tmp_path / f"{name}.nii.gz", np.ones(SHAPE, np.float32), AFFINE)
    (tmp_path / "m.tsv").write_text("id\timage\nscan_a\ta.nii.gz\nSCAN_A\tA.nii.gz\n")
    with pytest.raises(SourceError, match="differ only in case"):
        read_manifest(tmp_path / "m.tsv")
    (tmp_path / "one.tsv").write_text("id\timage\nscan_a\ta.nii.gz\n")
    save_volume(tmp_path / "syn" / "s1.nii.gz", np.ones(SHAPE, np.float32), AFFINE)
    ds = {"source": "manifest", "manifest": str(tmp_path / "one.tsv"),
          "synthetic": {"source": "folder", "folder": str(tmp_path / "syn")}}
    with pytest.raises(SourceError, match="1 training volume.*at least 2"):
        plan_dataset("mine", ds)


@pytest.mark.workflow
@pytest.mark.e2e
def test_init_then_one_snakemake_command_audits_the_folders(tmp_path):
    """As a new user, from the wheel in a fresh environment outside any checkout: `synthaudit
    init`, then `snakemake` in the new folder; results, metrics and the report land there,
    nothing of the demo runs, every all-pairs RELICT job starts before any privacy filter trains
    (rule priorities); the checkout the wheel was built from is then moved, and the workspace
    still runs (`dvc repro`, `synthaudit where`)."""
    checkout = checkout_copy(tmp_path / "checkout")
    venv_bin, env = installed_venv(checkout, tmp_path / "venv")
    d = _folders(tmp_path / "in")
    ws = tmp_path / "my_audit"
    init = init_labelled_audit(ws, d, env, venv_bin)
    assert init.returncode == 0, init.stderr
    assert "10 training scans of 5 patients" in init.stdout and "snakemake --cores all" in init.stdout
    # One job at a time: priority orders the *ready* jobs, so with a free second core a filter may
    # start while the only ready RELICT job runs on the first (Snakemake 9.27 does, 9.15 did not
    # by chance). With one, the RELICT jobs' frontier always holds a ready job of priority 0 until
    # they are done, so `priority: LATER` must put every filter training after them.
    run = subprocess.run([str(venv_bin / "snakemake"), "--cores", "1"], cwd=ws, env=env,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-6000:]
    log = run.stdout + run.stderr
    for stage in ("cohort", "preprocessed", "synthetic", "relict"):  # this audit's folders only: no demo
        assert {p.name for p in (ws / "results" / stage).iterdir()} <= {"audit", "features", "segmentation"}, stage
    assert {p.name for p in (ws / "results/relict/features").iterdir()} == {"audit"}
    rankings = sorted(p.name for p in (ws / "results/relict/audit").glob("ranking_*.tsv"))
    assert rankings == [f"ranking_{m}.tsv" for m in sorted(
        ["mae", "rmse", "ssim", "ncc", "emb_rmse", "emb_cosine", "dice_binary", "asd_binary", "mae_aligned",
         "rmse_aligned"])]
    rows = {r["synthetic_id"]: r for r in read_tsv(ws / "results/relict/audit/ranking_rmse.tsv")}
    assert rows["gen_a"]["closest_training_id"] == "pat0_s1" and rows["gen_b"]["closest_training_id"] == "pat2_s0"
    relict = json.loads((ws / "results/metrics/relict.json").read_text())
    assert set(relict) == {"audit"}
    prov = json.loads((ws / "results/provenance.json").read_text())  # the wheel's version, the params' hash
    assert prov["version"] == synthaudit.__version__ and len(prov["params_sha256"]) == 64
    # fidelity beside privacy (issue 45), on by default in an init workspace with held-out scans
    fid = json.loads((ws / "results/metrics/fidelity.json").read_text())["audit"]
    assert fid["frechet_distance"]["floor"] is not None and "authenticity" in fid and "c_t" in fid
    assert "prdc" not in fid and "precision" not in fid  # 5 samples: k = 5 needs more, so PRDC is left out
    assert fid["frd"]["floor"] is not None  # FRD: init's estimate fits, so fidelity.frd is on
    workflow = subprocess.run([str(venv_bin / "python"), "-c", "import synthaudit.resources as r; print(r.snakefile())"],
                              env=env, capture_output=True, text=True, cwd=tmp_path).stdout.strip()
    assert workflow.startswith(str(tmp_path / "venv")) and str(checkout) not in (ws / "Snakefile").read_text()
    lines = log.splitlines()
    starts = {i: line.split()[-1].rstrip(":") for i, line in enumerate(lines)
              if line.startswith(("rule ", "localrule "))}
    pairs = [i for i, r in starts.items() if r in ("relict_measure", "relict_feature_measure",
                                                     "relict_segmentation_measure", "embed")]
    filters = [i for i, r in starts.items() if r == "privacy_train"]
    assert pairs and filters and max(pairs) < min(filters), "a privacy filter trained before the RELICT measures"
    report = subprocess.run([str(venv_bin / "snakemake"), "--cores", "1", "--report", "results/report.html"], cwd=ws,
                            env=env, capture_output=True, text=True)
    assert report.returncode == 0, report.stderr[-3000:]
    assert (ws / "results/report.html").stat().st_size > 10_000
    # the verdict is the report's first page (and its figure shows the top pairs)
    verdict = (ws / "results/verdict.rst").read_text()
    assert verdict.startswith("Verdict") and "volumes called copies" in verdict and "most likely replicas" in verdict
    assert "data:image/png;base64," in verdict and (ws / "results/figures/audit/verdict.png").is_file()
    html = (ws / "results/report.html").read_text()
    assert "most likely replicas (mae)" in html and f"synthaudit {synthaudit.__version__}" in html
    checkout.rename(tmp_path / "moved_checkout")  # nothing of the workspace names it
    # dvc repro in the same folder: Snakemake finds everything done, the report is made, the lock written
    dvc = subprocess.run([str(venv_bin / "dvc"), "repro"], cwd=ws, env=env, capture_output=True, text=True)
    assert dvc.returncode == 0, dvc.stdout[-2000:] + dvc.stderr[-2000:]
    assert (ws / "dvc.lock").is_file() and "results/metrics/copies.json" in (ws / "dvc.lock").read_text()
    where = subprocess.run([str(venv_bin / "python"), "-m", "synthaudit", "where"], cwd=ws, env=env,
                           capture_output=True, text=True)
    assert where.returncode == 0, where.stderr
    assert where.stdout.index("verdict") < where.stdout.index("synthaudit results")
    assert "most likely replicas (mae): gen_a ~ pat0_s1" in where.stdout or \
           "most likely replicas (mae): gen_b ~ pat2_s0" in where.stdout
    assert yaml.safe_load((ws / "params.yaml").read_text())["datasets"]["audit"]["manifest"] == "data/manifest.tsv"
    # the decision and the card from the wheel (issue 46); 6 held-out scans cannot calibrate at 5 %, so the
    # result is whatever the metrics say, and the exit status says the same
    gate = subprocess.run([str(venv_bin / "synthaudit"), "gate"], cwd=ws, env=env, capture_output=True, text=True)
    result = json.loads((ws / "results/gate.json").read_text())["result"]
    assert gate.returncode == {"pass": 0, "fail": 1, "inconclusive": 2}[result], gate.stdout + gate.stderr
    assert "gate: " + result.upper() in gate.stdout
    card = subprocess.run([str(venv_bin / "synthaudit"), "card"], cwd=ws, env=env, capture_output=True, text=True)
    assert card.returncode == 0, card.stderr
    check = subprocess.run([str(venv_bin / "synthaudit"), "verify-card", "results/audit_card.json", str(d / "synthetic")],
                           cwd=ws, env=env, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout


# ---- init writes valid params for any path and option, and never leaves a half-written folder ----

ODD = "folder with spaces #1: ünïcödé — 'quotes' \"double\" [brackets] {braces} & amp; %percent"


def _odd_root(tmp_path):
    """A folder name of about 150 characters with spaces, YAML's special characters and unicode."""
    root = tmp_path / (ODD + " " + "x" * (150 - len(ODD) - 1))
    assert len(root.name) == 150
    return root


def test_init_writes_valid_yaml_for_a_150_character_ratings_path_with_spaces(tmp_path, capsys):
    d = _folders(_odd_root(tmp_path) / "in")
    ratings = d / "ratings of the two raters.tsv"
    ratings.write_text("synthetic_id\trater\tscore\n" + "".join(f"gen_{x}\tr1\t{4 if x in 'ab' else 1}\n"
                                                                for x in "abcde"))
    ws = _odd_root(tmp_path) / "my audit ü"
    code = main(["init", str(ws), "--training", str(d / "training"), "--synthetic", str(d / "synthetic"),
                 "--heldout", str(d / "heldout"), "--labels", str(d / "labels"), "--synthetic-labels",
                 str(d / "synthetic_labels"), "--registered", "--patient-pattern", r"^(pat\d+)_", "--modality", "mri",
                 "--ratings", str(ratings), "--classes", "structure", "--name", "odd_audit", "--no-timing"])
    assert code == 0, capsys.readouterr().err
    text = (ws / "params.yaml").read_text()
    raw = yaml.safe_load(text)  # valid YAML, every value whole
    ds = raw["datasets"]["odd_audit"]
    assert ds["ratings"] == str(ratings.resolve()) and ds["synthetic"]["folder"] == str((d / "synthetic").resolve())
    assert ds["segmentation"]["synthetic_labels"] == str((d / "synthetic_labels").resolve())
    assert raw["feature_study"]["datasets"] == ["odd_audit"]  # --ratings switches the study on
    # the comments of the shipped params.yaml are kept (round-trip), the demo's datasets are gone
    assert "# RELICT" in text and "ncct_demo:" not in text
    p = load_params(ws / "params.yaml")
    assert p["datasets"]["odd_audit"]["ratings"] == ds["ratings"]
    assert not [x for x in ws.parent.iterdir() if x.name.startswith(".tmp-")]


def test_init_with_a_patient_table_at_a_unicode_path_and_a_unet(tmp_path):
    d = _folders(tmp_path / "in")
    table = tmp_path / "patients of ünïcode.tsv"
    table.write_text("id\tpatient_id\n" + "".join(f"pat{p}_s{s}\tP{p}\n" for p in range(8) for s in range(2)))
    ws = tmp_path / "ws"
    write_workspace(ws, _inputs(d, patient_pattern=None, patient_ids=table, synthetic_labels=None, classes=[]),
                    progress=lambda m: None)
    raw = yaml.safe_load((ws / "params.yaml").read_text())
    seg = raw["datasets"]["audit"]["segmentation"]
    assert seg["source"] == "unet" and seg["classes"] == ["class1"] and seg["unet"]["patch_size"] == [16, 24, 16]
    assert {r["patient_id"] for r in read_tsv(ws / "data/manifest.tsv")} == {f"P{p}" for p in range(8)}


def test_a_failing_init_leaves_nothing_and_can_be_run_again(tmp_path, monkeypatch):
    import synthaudit.workspace as ws_module

    d = _folders(tmp_path / "in")
    target = tmp_path / "ws"

    def broken(folder, *a, **kw):
        (folder / "params.yaml").write_text("half written")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ws_module.write, "_write_files", broken)
    with pytest.raises(OSError):
        write_workspace(target, _inputs(d), progress=lambda m: None)
    assert not target.exists() and list(tmp_path.iterdir()) == [tmp_path / "in"]  # no temporary left either
    monkeypatch.undo()
    write_workspace(target, _inputs(d), progress=lambda m: None)  # the second try is not refused
    assert (target / "params.yaml").is_file()
    with pytest.raises(WorkspaceError, match="already holds a params.yaml"):
        write_workspace(target, _inputs(d), progress=lambda m: None)
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(WorkspaceError, match="not an empty folder"):
        write_workspace(tmp_path / "busy", _inputs(d), progress=lambda m: None)
    assert (tmp_path / "busy" / "notes.txt").read_text() == "mine"


def test_init_plans_the_search_the_workflow_will_choose():
    """relict.search: exhaustive up to auto_above_pairs, the shortlist above it, with the pairs it computes
    (K = 4n candidates per volume and the sampled rows' every pair), as the plan (workflow_plan) decides."""
    from synthaudit.config import object_defaults
    from synthaudit.relict import search
    from synthaudit.workspace import _search_plan

    small = _search_plan(50, 20, 774, 50)
    assert small == {"mode": "exhaustive", "pairs": 70 * 774, "threshold": 200_000}
    big = _search_plan(5000, 100, 10_000, 50)
    assert big["mode"] == "shortlist" and big["k"] == 200 and big["sample"] == 40
    assert big["pairs"] == 5100 * 200 + 40 * (10_000 - 200)
    assert search.choose_mode(5100, 10_000, object_defaults("relict.search")) == "shortlist"


@pytest.mark.parametrize("case", ["empty", "nested", "other_files", "subfolders_only"])
def test_a_synthetic_folder_without_volumes_is_refused_saying_what_it_holds_and_nothing_else_is_printed(
        tmp_path, capfd, case):
    """init on a synthetic folder that holds no volume (issue 66): the refusal says what init reads (NIfTI
    files and DICOM series) and what the folder holds instead; stderr holds synthaudit's lines only, not
    ITK's GDCM warnings (they named the folder SimpleITK was built in)."""
    from synthaudit.cli import main

    d = _folders(tmp_path / "in")
    syn = tmp_path / "odd_synthetic"
    syn.mkdir()
    expected = {"empty": "the folder is empty",
                "nested": "it holds 5 NIfTI file(s) in sub-folders (3 in batch_a/, 2 in batch_b/): give the folder "
                          "that holds the files themselves",
                "other_files": "it holds 3 other file(s) (2 .png, 1 .zip), e.g. a.png",
                "subfolders_only": "it holds only sub-folders, and no volume within two levels"}[case]
    if case == "nested":
        for k, f in enumerate(sorted((d / "synthetic").iterdir())):
            (syn / ("batch_a" if k < 3 else "batch_b")).mkdir(exist_ok=True)
            (syn / ("batch_a" if k < 3 else "batch_b") / f.name).write_bytes(f.read_bytes())
    elif case == "other_files":
        for name in ("a.png", "b.png", "c.nii.zip"):
            (syn / name).write_bytes(b"x")
    elif case == "subfolders_only":
        (syn / "empty_batch" / "deeper").mkdir(parents=True)
    capfd.readouterr()
    status = main(["init", str(tmp_path / "ws"), "--training", str(d / "training"), "--heldout", str(d / "heldout"),
                   "--synthetic", str(syn), "--registered", "--patient-pattern", r"^(pat\d+)_"])
    out, err = capfd.readouterr()
    assert status != 0 and not (tmp_path / "ws").exists()
    assert f"{syn}: no volumes in the synthetic folder: init reads NIfTI files (*.nii, *.nii.gz) and DICOM " \
           "series, and found neither; " + expected in err, err
    assert "GDCM" not in out + err and "WARNING: In" not in out + err, err
    assert all(line.startswith("synthaudit init: ") for line in err.splitlines() if line.strip()), err
