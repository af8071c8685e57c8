"""The full run on every odd input `synthaudit init` accepts (issue 29): a constant training
scan as the grid reference, an empty sample, volumes with one bright voxel, a constant sample
and one in a wider intensity spread go through `init`, `snakemake --cores 2` and the report,
with defined numbers everywhere a number is defined and the oddities said where they matter."""

import json
import math
import subprocess

import numpy as np
import pytest
from scipy import ndimage

from synthaudit.io import read_tsv, save_volume
from synthaudit.workspace import set_value
from workflow_helpers import BIN, init_labelled_audit
from workflow_helpers import env as helper_env

SHAPE = (20, 24, 18)
AFFINE = np.diag([2.0, 2.0, 2.0, 1.0])


def _odd_folders(root):
    """Five training patients with two scans each (pat0_s0 constant: the first by sort order, so
    the grid reference and QC template of a registered audit), two held-out patients (pat6_s1:
    one bright voxel) and seven samples: two near-copies, one new volume, an empty one, a
    constant one, one with one bright voxel and one spread 10 times as wide as the scans."""
    rng = np.random.default_rng(0)
    vols = {}
    for p in range(7):
        base = ndimage.gaussian_filter(rng.random(SHAPE), 2.0).astype(np.float32) * 4
        for s in range(2):
            vols[f"pat{p}_s{s}"] = base + 0.05 * rng.standard_normal(SHAPE).astype(np.float32)
    spot = np.zeros(SHAPE, np.float32)
    spot[10, 12, 9] = 4.0
    vols["pat0_s0"] = np.full(SHAPE, 2.0, np.float32)
    vols["pat6_s1"] = spot
    for k, v in vols.items():
        role = "training" if int(k[3]) < 5 else "heldout"
        save_volume(root / role / f"{k}.nii.gz", v, AFFINE)
        save_volume(root / "labels" / f"{k}.nii.gz", (v > v.mean()).astype(np.uint8), AFFINE)
    noise = lambda: 0.01 * rng.standard_normal(SHAPE).astype(np.float32)  # noqa: E731
    new = ndimage.gaussian_filter(rng.random(SHAPE), 2.0).astype(np.float32) * 4
    samples = {"gen_a": vols["pat0_s1"] + noise(), "gen_b": vols["pat2_s0"] + noise(), "gen_c": new + noise(),
               "gen_zero": np.zeros(SHAPE, np.float32), "gen_const": np.full(SHAPE, 1.5, np.float32),
               "gen_spot": spot, "gen_wide": (vols["pat3_s1"] - 2.0) * 10 + 2.0}
    for name, v in samples.items():
        save_volume(root / "synthetic" / f"{name}.nii.gz", v, AFFINE)
        save_volume(root / "synthetic_labels" / f"{name}.nii.gz", (v > v.mean()).astype(np.uint8), AFFINE)
    return root


def _numbers(obj, where=""):
    """(path, value) of every number (and None) in a JSON document."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _numbers(v, f"{where}.{k}")
    elif isinstance(obj, list):
        for k, v in enumerate(obj):
            yield from _numbers(v, f"{where}[{k}]")
    elif obj is None or (isinstance(obj, (int, float)) and not isinstance(obj, bool)):
        yield where, obj


def _finite(value) -> bool:
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


@pytest.mark.workflow
@pytest.mark.e2e
def test_every_input_init_accepts_completes_the_full_run_without_nan(tmp_path):
    d = _odd_folders(tmp_path / "in")
    ws = tmp_path / "odd_audit"
    env = helper_env()
    init = init_labelled_audit(ws, d, env)
    assert init.returncode == 0, init.stderr
    warned = {r["id"]: r["warning"] for r in read_tsv(ws / "data/input_warnings.tsv")}
    assert set(warned) == {"pat0_s0", "pat6_s1", "gen_zero", "gen_const", "gen_spot", "gen_wide"}, warned
    assert "WARNING: 6 input volume(s) accepted with a warning" in init.stdout
    # the privacy filters run (held-out scans, patients with two scans), shortened to keep the test short
    text = (ws / "params.yaml").read_text()
    text = set_value(text, "privacy.training.epochs", 1, "test: one epoch")
    text = set_value(text, "privacy.consistency.n_filters", 1, "test: one filter")
    (ws / "params.yaml").write_text(text)

    run = subprocess.run([str(BIN / "snakemake"), "--cores", "2"], cwd=ws, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-6000:]
    report = subprocess.run([str(BIN / "snakemake"), "--cores", "2", "--report", "results/report.html"], cwd=ws,
                            env=env, capture_output=True, text=True)
    assert report.returncode == 0, report.stderr[-3000:]
    assert (ws / "results/report.html").stat().st_size > 10_000

    # every ranking: each sample, a finite distance, ratio, score and (held-out scans exist) calibrated rate
    rankings = sorted((ws / "results/relict/audit").glob("ranking_*.tsv"))  # and the aligned ones where init turns
    assert {"ranking_mae.tsv", "ranking_ssim.tsv", "ranking_ncc.tsv", "ranking_emb_cosine.tsv",  # alignment on
            "ranking_dice_binary.tsv", "ranking_asd_binary.tsv"} <= {p.name for p in rankings}
    for path in rankings:
        rows = read_tsv(path)
        assert {r["synthetic_id"] for r in rows} == {f"gen_{x}" for x in ("a", "b", "c", "zero", "const", "spot",
                                                                           "wide")}, path.name
        for r in rows:
            for col in ("distance", "mean_n_closest", "ratio", "score", "fpr"):
                assert _finite(r[col]), (path.name, r["synthetic_id"], col, r[col])
    calls = read_tsv(ws / "results/relict/audit/calibrated_calls.tsv")
    assert all(_finite(r[c]) for r in calls for c in r if c.endswith("_fpr")), calls
    for name in ("relict", "copies"):
        doc = json.loads((ws / f"results/metrics/{name}.json").read_text())
        bad = [(k, v) for k, v in _numbers(doc) if not _finite(v)]
        assert not bad, (name, bad)
    privacy = json.loads((ws / "results/metrics/privacy.json").read_text())["audit"]["image"]
    assert _finite(privacy["verification_auc"]) and _finite(privacy["specificity"])
    assert all(_finite(e["flag_rate"]) for e in privacy["synthetic"].values())

    # the QC table says why the correlations are NA: the grid reference (the template) is constant
    qc = {r["id"]: r for r in read_tsv(ws / "results/preprocessed/audit/qc.tsv")}
    assert qc["pat0_s0"]["correlation_to_template"] == "NA"
    assert qc["pat0_s0"]["note"].startswith("constant volume (every voxel 2): no correlation")
    assert all("the template (grid reference) is constant" in r["note"] for r in qc.values())
    # the verdict repeats init's warnings beside the answer
    verdict = (ws / "results/verdict.rst").read_text()
    assert "6 input volume(s) accepted with a warning" in verdict
    assert "gen_zero (synthetic): empty volume: every voxel is 0" in verdict
    assert "pat0_s0 (train): constant volume: every voxel is 2" in verdict
