"""`synthaudit init` derives RELICT's n, the alignment switch and the pre-selection blocks from
the user's data (issue 29: every default had been tuned on the demo's 3 mm cohorts)."""

import numpy as np
import pytest
import yaml

from synthaudit import workspace as ws
from synthaudit.io import save_volume
from synthaudit.review.verdict import verdict_lines
from synthaudit.workspace import Inputs, write_workspace

SHAPE = (12, 14, 10)


def _folders(tmp, n_train, n_synthetic=3, spacing=1.5):
    affine = np.diag([spacing, spacing, spacing, 1.0])
    rng = np.random.default_rng(0)
    for k in range(n_train):
        save_volume(tmp / "training" / f"p{k:03d}_s0.nii.gz", rng.random(SHAPE).astype(np.float32), affine)
    for k in range(n_synthetic):
        save_volume(tmp / "synthetic" / f"gen{k}.nii.gz", rng.random(SHAPE).astype(np.float32), affine)
    return Inputs(training=tmp / "training", synthetic=tmp / "synthetic", registered=True)


def _params(path):
    return yaml.safe_load((path / "params.yaml").read_text())


@pytest.mark.parametrize("n_train, n_expected", [(60, 50), (12, 12)])
def test_n_closest_is_relicts_50_where_the_training_set_allows(tmp_path, n_train, n_expected):
    plan = write_workspace(tmp_path / "ws", _folders(tmp_path / "in", n_train), progress=lambda m: None)
    p = _params(tmp_path / "ws")
    assert p["relict"]["n_closest"] == n_expected == plan["derived"]["n_closest"]
    # K = 2n candidates aligned, at most the training set (the recall bench: K = n missed some of the n closest)
    assert p["relict"]["alignment"]["candidates"] == min(2 * n_expected, n_train)
    assert p["relict"]["alignment"]["candidates"] >= p["relict"]["n_closest"]
    text = (tmp_path / "ws/params.yaml").read_text()
    assert f"{n_train} training scans" in text  # the comment says where the value came from
    if n_expected < 50:
        assert f"allow {n_expected} (all of them)" in text


@pytest.mark.parametrize("spacing, n_train, k, ranked", [(1.0, 200, 80, 150), (1.0, 90, 80, 90), (1.5, 200, 80, 150),
                                                       (2.0, 200, 100, None)])
def test_grids_with_a_coarse_stage_rank_3n_candidates_and_align_the_best(tmp_path, spacing, n_train, k, ranked):
    # coarse_mm 2: a 1 mm grid has 2 mm block means to rank on (the NCCT bench: the 4 mm pre-selection
    # needed up to 2.8n to hold the 50 closest, the 2 mm ranking up to 1.5n), a 1.5 mm grid 3 mm ones
    # (issue 47); a 2 mm grid has none
    write_workspace(tmp_path / "ws", _folders(tmp_path / "in", n_train, spacing=spacing), progress=lambda m: None)
    a = _params(tmp_path / "ws")["relict"]["alignment"]
    assert (a["candidates"], a["rank_candidates"]) == (k, ranked)
    if ranked:
        assert "pre-selected and ranked on coarse_mm block means" in (tmp_path / "ws/params.yaml").read_text()


def test_alignment_on_when_affordable_off_with_its_estimate_otherwise(tmp_path, monkeypatch):
    write_workspace(tmp_path / "small", _folders(tmp_path / "in", 20), progress=lambda m: None)
    p = _params(tmp_path / "small")
    assert p["relict"]["alignment"]["datasets"] == ["audit"]
    text = (tmp_path / "small/params.yaml").read_text()
    assert "on (init): augmented copies (flipped, shifted, rotated) searched; about" in text
    # the pre-selection blocks in mm, with the factor this grid gets (6 mm at 1.5 mm: 4 voxels)
    assert p["relict"]["alignment"]["preselect_block_mm"] == 6
    assert "4x4x4 voxels on your grid (6 x 6 x 6 mm)" in text
    # an audit whose alignment would take longer than the budget: off, the estimate in the comment
    monkeypatch.setattr(ws.estimate, "ALIGNMENT_BUDGET_HOURS", 1e-9)
    plan = write_workspace(tmp_path / "big", _folders(tmp_path / "in2", 20), progress=lambda m: None)
    assert _params(tmp_path / "big")["relict"]["alignment"]["datasets"] == []
    assert plan["derived"]["alignment_on"] is False
    assert "off (init): about" in (tmp_path / "big/params.yaml").read_text()


def test_a_path_with_spaces_and_hashes_stays_one_yaml_value(tmp_path):
    # a ratings path ran into its comment ("ratings: /data/x.tsv# a rating ...") and broke params.yaml
    inp = _folders(tmp_path / "in # odd: folder", 4)
    ratings = tmp_path / "in # odd: folder" / "a long folder name for the ratings table" / "ratings.tsv"
    ratings.parent.mkdir(parents=True)
    ratings.write_text("synthetic_id\trater\tscore\ngen0\tr1\t4\n")
    inp.ratings = ratings
    write_workspace(tmp_path / "ws", inp, progress=lambda m: None)
    ds = _params(tmp_path / "ws")["datasets"]["audit"]
    assert ds["ratings"] == str(ratings.resolve()) and ds["synthetic"]["folder"] == str(inp.synthetic.resolve())


def test_verdict_says_when_augmented_copies_were_not_searched():
    v = {"dataset": "audit", "n_synthetic": 3, "aligned": False,
         "measures": {"mae": {"most_likely": [("gen0", "p000_s0", 0.1)]}}}
    text = "\n".join(verdict_lines(v))
    assert "augmented copies (flipped, shifted, rotated) were not searched" in text
    v["aligned"] = True
    assert "not searched" not in "\n".join(verdict_lines(v))


def test_unet_patch_fits_a_small_registered_grid(tmp_path):
    inp = _folders(tmp_path / "in", 4)
    affine = np.diag([1.5, 1.5, 1.5, 1.0])
    for f in (tmp_path / "in/training").glob("*.nii.gz"):
        save_volume(tmp_path / "in/labels" / f.name, np.ones(SHAPE, np.uint8), affine)
    inp.labels = tmp_path / "in/labels"
    write_workspace(tmp_path / "ws", inp, progress=lambda m: None)
    seg = _params(tmp_path / "ws")["datasets"]["audit"]["segmentation"]
    assert seg["source"] == "unet" and seg["unet"]["patch_size"] == [8, 8, 8]  # 12 x 14 x 10: 48 would not fit


def test_feature_encoder_is_the_pretrained_ct_encoder_where_installed(tmp_path, monkeypatch):
    # real heads (docs/real_anatomy.md): the pretrained encoder separated copies by both embedding
    # measures; without its weights package the workspace keeps the repository's extractor
    monkeypatch.setattr(ws.estimate, "astra_installed", lambda: True)
    plan = write_workspace(tmp_path / "with", _folders(tmp_path / "in", 6), progress=lambda m: None)
    assert _params(tmp_path / "with")["relict"]["features"]["extractor"] == "astra_resnet152"
    assert "pretrained 3D CT encoder" in plan["levels"][1]
    assert "docs/real_anatomy.md" in (tmp_path / "with/params.yaml").read_text()
    monkeypatch.setattr(ws.estimate, "astra_installed", lambda: False)
    plan = write_workspace(tmp_path / "without", _folders(tmp_path / "in2", 6), progress=lambda m: None)
    repo = yaml.safe_load(ws.resources.default_params().read_text())["relict"]["features"]["extractor"]
    assert _params(tmp_path / "without")["relict"]["features"]["extractor"] == repo
    assert plan["estimate_cpu_minutes"] >= 0 and "ResNet-50" in plan["levels"][1]


def test_local_level_on_with_held_out_scans_when_its_volumes_fit_in_memory(tmp_path, monkeypatch):
    # relict.local is one key; init turns it on where held-out scans calibrate it and the job's
    # volumes (synthetic, held-out, controls; raw and smoothed) fit, and says why otherwise
    write_workspace(tmp_path / "none", _folders(tmp_path / "in", 6), progress=lambda m: None)
    assert _params(tmp_path / "none")["relict"]["local"]["enabled"] is False
    assert "off (init): needs held-out scans (--heldout)" in (tmp_path / "none/params.yaml").read_text()
    inp = _folders(tmp_path / "in2", 6)
    rng = np.random.default_rng(1)
    for k in range(4):
        save_volume(tmp_path / "in2" / "heldout" / f"h{k:03d}_s0.nii.gz", rng.random(SHAPE).astype(np.float32),
                    np.diag([1.5, 1.5, 1.5, 1.0]))
    inp.heldout = tmp_path / "in2" / "heldout"
    plan = write_workspace(tmp_path / "with", inp, progress=lambda m: None)
    p = _params(tmp_path / "with")
    assert p["relict"]["local"]["enabled"] is True and plan["derived"]["local_on"] is True
    # 3 synthetic + 4 held-out + 4 x 3 controls, twice, float32, on the 12 x 14 x 10 grid, and their
    # n closest distances in the one 18 mm block the 1.5 mm grid holds (cells of 6, 6, 5 voxels)
    n = plan["derived"]["n_closest"]
    assert n == 6
    assert plan["derived"]["local_memory_gb"] == pytest.approx((3 + 4 + 12) * 4 * (2 * 12 * 14 * 10 + n * 1) / 2 ** 30)
    assert "on (init): regions copied into new volumes" in (tmp_path / "with/params.yaml").read_text()
    monkeypatch.setattr(ws.estimate, "LOCAL_MEMORY_GB", 1e-9)
    write_workspace(tmp_path / "big", inp, progress=lambda m: None)
    assert _params(tmp_path / "big")["relict"]["local"]["enabled"] is False
    assert "the job would hold about 0 GB of volumes, above 1e-09" in (tmp_path / "big/params.yaml").read_text()


def test_frd_on_when_its_radiomics_fit_the_budget_off_with_its_estimate_otherwise(tmp_path, monkeypatch):
    # fidelity.frd: PyRadiomics reads every volume again (seconds each); init prices it on the user's grid
    plan = write_workspace(tmp_path / "small", _folders(tmp_path / "in", 6), progress=lambda m: None)
    assert _params(tmp_path / "small")["fidelity"]["frd"] is True and plan["derived"]["frd_on"] is True
    text = (tmp_path / "small/params.yaml").read_text()
    assert "on (init): FRD beside the embeddings' measures; about" in text and "for the PyRadiomics features of 9 volumes" in text
    # the estimate grows with the extent at FRD's 2 mm: a 1 mm head costs more than a 0.62 mm TOF slab
    assert ws.estimate.radiomics_seconds([182, 218, 182], [1, 1, 1]) > ws.estimate.radiomics_seconds([128, 128, 32], [0.62, 0.62, 0.62])
    monkeypatch.setattr(ws.estimate, "FRD_BUDGET_HOURS", 1e-9)
    plan = write_workspace(tmp_path / "big", _folders(tmp_path / "in2", 6), progress=lambda m: None)
    assert _params(tmp_path / "big")["fidelity"]["frd"] is False and plan["derived"]["frd_on"] is False
    assert "true computes FRD (docs/fidelity.md)" in (tmp_path / "big/params.yaml").read_text()
