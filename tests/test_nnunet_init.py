"""`synthaudit init` on an nnU-Net raw dataset (issue 48): the same manifest and params as the same
volumes given as folders of NIfTI, class names from dataset.json, and refusals naming the folder."""

import json
import shutil

import pytest

from synthaudit.cli import main
from synthaudit.io import read_tsv
from synthaudit.workspace import Inputs, WorkspaceError, write_workspace
from test_workspace import _folders


def _as_nnunet(d, root, channels=("0000",), labels=None):
    """The folders of test_workspace._folders as an nnU-Net raw dataset: training -> imagesTr
    (``<case>_0000.nii.gz``), held-out -> imagesTs, label maps -> labelsTr / labelsTs."""
    for role, images in (("training", "imagesTr"), ("heldout", "imagesTs")):
        for f in sorted((d / role).glob("*.nii.gz")):
            case = f.name[: -len(".nii.gz")]
            for c in channels:
                (root / images).mkdir(parents=True, exist_ok=True)
                shutil.copy(f, root / images / f"{case}_{c}.nii.gz")
            (root / images.replace("images", "labels")).mkdir(parents=True, exist_ok=True)
            shutil.copy(d / "labels" / f.name, root / images.replace("images", "labels") / f.name)
    meta = {"channel_names": {str(int(c)): f"CH{c}" for c in channels}, "file_ending": ".nii.gz",
            "numTraining": len(list((root / "imagesTr").glob("*_0000.nii.gz")))}
    meta["labels"] = labels or {"background": 0, "structure": 1}
    (root / "dataset.json").write_text(json.dumps(meta))
    return root


def _without_paths(rows):
    return [{k: (bool(v) if k in ("image", "label") else v) for k, v in r.items()} for r in rows]


def test_an_nnunet_dataset_gives_the_manifest_and_params_of_the_same_nifti_folders(tmp_path):
    d = _folders(tmp_path / "in")
    nn = _as_nnunet(d, tmp_path / "Dataset001_Heads")
    pattern = r"^(pat\d+)_"
    write_workspace(tmp_path / "ws_nifti", Inputs(training=d / "training", heldout=d / "heldout", labels=d / "labels",
                                                  synthetic=d / "synthetic", patient_pattern=pattern, registered=True,
                                                  classes=["structure"]), progress=lambda m: None)
    said = []
    write_workspace(tmp_path / "ws_nnunet", Inputs(training=nn, synthetic=d / "synthetic", patient_pattern=pattern,
                                                   registered=True), progress=said.append)
    a = read_tsv(tmp_path / "ws_nifti/data/manifest.tsv")
    b = read_tsv(tmp_path / "ws_nnunet/data/manifest.tsv")
    assert _without_paths(sorted(a, key=lambda r: r["id"])) == _without_paths(sorted(b, key=lambda r: r["id"]))
    assert {r["role"] for r in b} == {"train", "heldout"} and all(r["label"] for r in b)
    by_id = {r["id"]: r for r in b}  # the _0000 channel suffix dropped; the images are the nnU-Net files
    assert by_id["pat0_s0"]["image"] == str((nn / "imagesTr/pat0_s0_0000.nii.gz").resolve())
    assert by_id["pat6_s1"]["label"] == str((nn / "labelsTs/pat6_s1.nii.gz").resolve())
    pa, pb = ((tmp_path / ws / "params.yaml").read_text().splitlines() for ws in ("ws_nifti", "ws_nnunet"))
    differ = [(x, y) for x, y in zip(pa, pb) if x != y]
    assert len(pa) == len(pb) and not differ, differ  # classes from dataset.json, labels from labelsTr/
    assert any("an nnU-Net raw dataset" in m and "classes structure from dataset.json" in m
               and "held-out scans from imagesTs/" in m for m in said), said


def test_init_nnunet_option_names_classes_and_takes_heldout_from_a_folder_given(tmp_path, capsys):
    d = _folders(tmp_path / "in")
    nn = _as_nnunet(d, tmp_path / "Dataset002_X", labels={"background": 0, "brain": 1})
    assert main(["init", str(tmp_path / "ws"), "--nnunet", str(nn), "--synthetic", str(d / "synthetic"),
                 "--heldout", str(d / "heldout"), "--patient-pattern", r"^(pat\d+)_", "--registered", "--no-timing"]) == 0
    out = capsys.readouterr().out
    assert "held-out scans from" in out and "imagesTs/ not used" in out
    rows = read_tsv(tmp_path / "ws/data/manifest.tsv")
    held = [r for r in rows if r["role"] == "heldout"]
    assert held and all(r["image"].startswith(str((d / "heldout").resolve())) for r in held)
    assert "classes: [brain]" in (tmp_path / "ws/params.yaml").read_text()


def test_init_refuses_a_multi_channel_nnunet_dataset_naming_its_channels(init_says_only_its_own, tmp_path, capfd):
    d = _folders(tmp_path / "in")
    nn = _as_nnunet(d, tmp_path / "Dataset003_Prostate", channels=("0000", "0001"))
    assert main(["init", str(tmp_path / "ws"), "--nnunet", str(nn), "--synthetic", str(d / "synthetic"),
                 "--registered"]) == 2
    err = capfd.readouterr().err
    assert f"{nn}: an nnU-Net dataset of 2 channels (0 (CH0000), 1 (CH0001))" in err
    assert not (tmp_path / "ws").exists()
    assert main(["init", str(tmp_path / "ws3"), "--nnunet", str(d), "--synthetic", str(d / "synthetic")]) == 2
    assert "not an nnU-Net raw dataset (no imagesTr/ folder)" in capfd.readouterr().err


def test_the_committed_layout_equivalence_supports_what_input_layouts_md_says():
    """docs/input_layouts.md states the result of bench/layout_equivalence.py; the committed result must hold it."""
    from workflow_helpers import ROOT

    got = json.loads((ROOT / "results/bench/layout_equivalence.json").read_text())
    assert all(r["init_rc"] == 0 and r["snakemake_rc"] == 0 for r in got["runs"].values()), got["runs"]
    pairs = got["pairs"]
    assert [len(pairs[p]["rankings_identical"]) for p in ("nifti vs dicom", "nifti_labelled vs nnunet")] == [8, 10]
    for pair in pairs.values():
        assert all(pair["rankings_identical"].values()) and not pair["rankings_in_one_only"]
        assert pair["metrics_equal"] == {"relict": True, "copies": True, "fidelity": True, "privacy": True}
    text = (ROOT / "docs/input_layouts.md").read_text()
    assert "8 of 8 rankings byte-identical" in text and "10 of 10" in text
