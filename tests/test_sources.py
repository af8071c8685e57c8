"""Dataset sources: manifests, nnU-Net raw layout, synthetic folders, and the spiked-set plan."""

import json

import numpy as np
import pytest

from synthaudit.sources import (SourceError, nnunet_dataset, plan_dataset, read_manifest, read_nnunet,
                                read_synthetic_folder, read_synthetic_manifest, spiked_plan)


@pytest.fixture
def vol():
    return np.zeros((4, 4, 4), np.float32)


def test_manifest_relative_paths_roles_and_patients(tmp_path, nifti, vol):
    (tmp_path / "img").mkdir()
    for i in range(3):
        nifti(f"img/s{i}.nii.gz", vol)
    nifti("img/s0_seg.nii.gz", vol)
    (tmp_path / "m.tsv").write_text(
        "id\timage\tlabel\tpatient_id\trole\n"
        "s0\timg/s0.nii.gz\timg/s0_seg.nii.gz\tpA\ttrain\n"
        "s1\timg/s1.nii.gz\t\tpA\ttrain\n"
        "s2\timg/s2.nii.gz\tNA\t\theldout\n"
    )
    scans = read_manifest(tmp_path / "m.tsv")
    assert [s.id for s in scans] == ["s0", "s1", "s2"]
    assert scans[0].image == str(tmp_path / "img/s0.nii.gz") and scans[0].label.endswith("s0_seg.nii.gz")
    assert scans[1].label is None and scans[1].patient_id == "pA"
    assert scans[2].role == "heldout" and scans[2].patient_id == "s2"


@pytest.mark.parametrize(
    "row, message",
    [
        ("s0\tmissing.nii.gz\ttrain", "m.tsv:2: image .*missing.nii.gz not found"),
        ("s0\tv.nii.gz\ttest", "m.tsv:2: role 'test'"),
        ("s/0\tv.nii.gz\ttrain", "m.tsv:2: id 's/0'"),
    ],
)
def test_manifest_errors_name_file_and_line(tmp_path, nifti, vol, row, message):
    nifti("v.nii.gz", vol)
    (tmp_path / "m.tsv").write_text("id\timage\trole\n" + row + "\n")
    with pytest.raises(SourceError, match=message):
        read_manifest(tmp_path / "m.tsv")


def test_manifest_duplicate_ids(tmp_path, nifti, vol):
    nifti("v.nii.gz", vol)
    (tmp_path / "m.tsv").write_text("id\timage\na\tv.nii.gz\na\tv.nii.gz\n")
    with pytest.raises(SourceError, match="duplicate id"):
        read_manifest(tmp_path / "m.tsv")


def test_nnunet_layout(tmp_path, nifti, vol):
    for case in ("case_001", "case_002"):
        nifti(f"Dataset001_X/imagesTr/{case}_0000.nii.gz", vol)
    nifti("Dataset001_X/labelsTr/case_001.nii.gz", vol)
    nifti("Dataset001_X/imagesTs/case_101_0000.nii.gz", vol)
    nifti("Dataset001_X/labelsTs/case_101.nii.gz", vol)
    scans = read_nnunet(tmp_path / "Dataset001_X")
    assert [(s.id, s.role) for s in scans] == [("case_001", "train"), ("case_002", "train"),
                                               ("case_101", "heldout")]
    assert scans[0].label.endswith("labelsTr/case_001.nii.gz") and scans[1].label is None
    assert scans[2].label.endswith("labelsTs/case_101.nii.gz")
    with pytest.raises(SourceError, match="no imagesTr"):
        read_nnunet(tmp_path)


def test_nnunet_dataset_json_names_the_classes_v2_v1_and_regions(tmp_path, nifti, vol):
    d = tmp_path / "Dataset002_Y"
    nifti("Dataset002_Y/imagesTr/a_0000.nii.gz", vol)
    (d / "dataset.json").write_text(json.dumps({"channel_names": {"0": "CT"}, "file_ending": ".nii.gz",
                                                "labels": {"background": 0, "liver": 1, "tumour": 3}}))
    meta = nnunet_dataset(d)
    assert meta.channels == {"0": "CT"} and meta.classes == ["liver", "class2", "tumour"]
    (d / "dataset.json").write_text(json.dumps({"modality": {"0": "MRI"}, "labels": {"0": "background", "1": "wm"}}))
    assert nnunet_dataset(d).classes == ["wm"]  # nnU-Net v1: value -> name
    (d / "dataset.json").write_text(json.dumps({"channel_names": {"0": "T1"}, "regions_class_order": [1, 2],
                                                "labels": {"background": 0, "whole": [1, 2], "core": 2}}))
    meta = nnunet_dataset(d)
    assert meta.classes is None and "region-based labels" in meta.note


def test_nnunet_refuses_several_channels_other_file_endings_and_bad_json(tmp_path, nifti, vol):
    d = tmp_path / "Dataset003_Z"
    for c in ("0000", "0001"):
        nifti(f"Dataset003_Z/imagesTr/a_{c}.nii.gz", vol)
    with pytest.raises(SourceError, match=r"Dataset003_Z: an nnU-Net dataset of 2 channels \(_0000, _0001\)"):
        read_nnunet(d)
    (d / "dataset.json").write_text(json.dumps({"channel_names": {"0": "T2", "1": "ADC"}}))
    with pytest.raises(SourceError, match=r"2 channels \(0 \(T2\), 1 \(ADC\)\)"):
        read_nnunet(d)
    (d / "imagesTr" / "a_0001.nii.gz").unlink()
    (d / "dataset.json").write_text(json.dumps({"channel_names": {"0": "CT"}, "file_ending": ".mha"}))
    with pytest.raises(SourceError, match=r"dataset.json: file_ending '.mha'"):
        read_nnunet(d)
    (d / "dataset.json").write_text("{not json")
    with pytest.raises(SourceError, match=r"dataset.json: not readable JSON"):
        read_nnunet(d)


def test_synthetic_folder_and_manifest(tmp_path, nifti, vol):
    nifti("syn/a.nii.gz", vol)
    nifti("syn/b.nii", vol)
    (tmp_path / "syn" / "notes.txt").write_text("not a volume")
    assert [v.id for v in read_synthetic_folder(tmp_path / "syn")] == ["a", "b"]
    with pytest.raises(SourceError, match="no NIfTI files"):
        (tmp_path / "empty").mkdir()
        read_synthetic_folder(tmp_path / "empty")
    (tmp_path / "all.tsv").write_text("id\timage\trole\nr1\tsyn/a.nii.gz\ttrain\nq1\tsyn/b.nii\tsynthetic\n")
    assert [v.id for v in read_synthetic_manifest(tmp_path / "all.tsv")] == ["q1"]


SPIKED = {"n_replicas": 4, "n_nonreplicas": 2, "seed": 3,
          "levels": [{"strength": 0.5, "likert": 4}, {"strength": 5.0, "likert": 2}]}


def test_spiked_plan_is_deterministic_and_complete():
    train = [f"t{i}" for i in range(6)]
    held = ["h0", "h1", "h2"]
    a, b = spiked_plan(SPIKED, train, held), spiked_plan(SPIKED, train, held)
    assert a == b
    assert [r["id"] for r in a] == [f"syn{i:03d}" for i in range(6)]
    reps = [r for r in a if r["kind"] == "replica"]
    assert len(reps) == 4 and len({r["source_id"] for r in reps}) == 4
    assert sorted(r["likert"] for r in reps) == [2, 2, 4, 4]
    assert all(r["source_id"] in held and r["likert"] == 1 for r in a if r["kind"] == "heldout")


def test_spiked_plan_refuses_too_many():
    with pytest.raises(SourceError, match="n_nonreplicas=2 exceeds the 1 held-out"):
        spiked_plan(SPIKED, ["t0", "t1", "t2", "t3"], ["h0"])
    with pytest.raises(SourceError, match="n_replicas=4 exceeds"):
        spiked_plan(SPIKED, ["t0"], ["h0", "h1"])


def test_plan_dataset_with_injected_demo_table():
    table = lambda cfg: [{"id": f"p{i}_bl", "patient_id": f"p{i}", "session": "baseline",
                          "role": "heldout" if i < 2 else "train"} for i in range(6)]
    ds = {"source": "demo_ncct", "demo": {}, "synthetic": {"source": "spiked", "spiked": SPIKED}}
    p = plan_dataset("d", ds, demo_table=table)
    assert len(p.train) == 4 and len(p.heldout) == 2 and len(p.synthetic) == 6
    assert p.scan("p3_bl").role == "train"


def test_imported_sample_off_grid_is_refused_or_resampled(caplog):
    import logging

    from synthaudit.io import VolumeError
    from synthaudit.synthetic.imported import onto_grid

    grid_affine = np.diag([2.0, 2.0, 2.0, 1.0])
    grid = {"shape": [10, 12, 8], "affine": grid_affine.tolist()}
    x, y, z = np.meshgrid(np.arange(20), np.arange(24), np.arange(16), indexing="ij")
    fine = (0.5 * x + 0.25 * y).astype(np.float32)  # linear in world: value = x_mm/2 + y_mm/4 at 1 mm
    fine_affine = np.diag([1.0, 1.0, 1.0, 1.0])
    with pytest.raises(VolumeError, match=r"s\.nii\.gz: synthetic volume has shape \[20, 24, 16\]"):
        onto_grid("s.nii.gz", fine, fine_affine, grid)
    with caplog.at_level(logging.WARNING):
        out = onto_grid("s.nii.gz", fine, fine_affine, grid, off_grid="resample")
    assert "resampled onto the grid" in caplog.text and out.shape == (10, 12, 8)
    # grid voxel (i, j, k) lies at world (2i, 2j, 2k) mm: a linear image resamples exactly
    i, j, _ = np.meshgrid(np.arange(10), np.arange(12), np.arange(8), indexing="ij")
    inside = (i < 9) & (j < 11)
    assert np.allclose(out[inside], (0.5 * 2 * i + 0.25 * 2 * j)[inside], atol=1e-4)
    same = np.ones((10, 12, 8), np.float32)
    assert onto_grid("t.nii.gz", same, grid_affine, grid, off_grid="resample") is same


def test_generator_training_subsets_are_nested_and_checked():
    from synthaudit.sources import generator_training_subset

    ids = [f"s{i:02d}" for i in range(10)]
    assert generator_training_subset(ids, None, 3) == ids
    small, large = generator_training_subset(ids, 2, 3), generator_training_subset(ids, 6, 3)
    assert len(small) == 2 and len(large) == 6 and set(small) <= set(large)
    assert generator_training_subset(ids, 6, 3) == large  # seeded
    with pytest.raises(SourceError, match="n_training=11: must be between 1 and the 10 training volumes"):
        generator_training_subset(ids, 11, 3)
