"""Tests of the embedded TOF-MRA demo cohort (Circle of Willis, 7 artery classes)."""

from __future__ import annotations

import copy

import nibabel as nib
import numpy as np
import pytest

from synthaudit.demo import cohorts, tof
from synthaudit.io import load_volume, spacing_from_affine

CFG = copy.deepcopy(tof.DEFAULT_TOF_CFG) | {"n_subjects": 24, "n_heldout_subjects": 6, "seed": 4242}
NO_VARIANTS = copy.deepcopy(CFG)
NO_VARIANTS["anatomy"].update(p_missing_pcom=0.0, p_missing_acom=0.0, p_hypoplastic_a1=0.0)
THIN = ("Pcom", "Acom")  # about two voxels across: a 0.25 mm shift flips a quarter of their voxels


def _cfg(base: dict = CFG, **changes) -> dict:
    cfg = copy.deepcopy(base)
    cfg.update(changes)
    return cfg


def _simulate(folder, tag: str, make, *args) -> tuple[dict, np.ndarray, np.ndarray, np.ndarray]:
    """Run a writer (simulate_subject, anatomy_replica, ...); return (truth, image, label, affine)."""
    out = {"image": str(folder / f"{tag}_image.nii.gz"), "label": str(folder / f"{tag}_label.nii.gz")}
    truth = make(*args, out)
    image, affine = load_volume(out["image"])
    label, _ = load_volume(out["label"], np.uint8)
    return truth, image, label, affine


def _dice(a: np.ndarray, b: np.ndarray, label: int) -> float:
    x, y = a == label, b == label
    return float(2.0 * np.count_nonzero(x & y) / max(np.count_nonzero(x) + np.count_nonzero(y), 1))


def _rmse(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.sqrt(np.mean((a - b) ** 2)))


def _world_x(label: np.ndarray, affine: np.ndarray, value: int) -> np.ndarray:
    """World x (mm, + = right) of the voxels with this label."""
    i = np.argwhere(label == value)
    return (np.c_[i, np.ones(len(i))] @ affine.T)[:, 0]


def _first_subject(cfg: dict, wanted) -> str:
    """The first cohort subject whose anatomy satisfies ``wanted(tree)``."""
    for row in cohorts.tof_table(cfg):
        if wanted(tof.simulate_subject_anatomy(cfg, row["id"])):
            return row["id"]
    raise AssertionError("no subject of the test cohort has the wanted variant")


@pytest.fixture(scope="module")
def subjects(tmp_path_factory):
    """Five training subjects without variants: {id: (truth, image, label, affine)}."""
    folder = tmp_path_factory.mktemp("tof")
    ids = [r["id"] for r in cohorts.tof_table(NO_VARIANTS) if r["role"] == "train"][:5]
    return {s: _simulate(folder, s, tof.simulate_subject, NO_VARIANTS, s) for s in ids}


# --- cohort table -----------------------------------------------------------------


def test_cohort_table_rows_and_roles():
    rows = cohorts.tof_table(CFG)
    assert len(rows) == CFG["n_subjects"]
    assert [r["id"] for r in rows[:3]] == ["s001", "s002", "s003"]
    assert all(r["patient_id"] == r["id"] and r["session"] == "baseline" for r in rows)
    assert sum(r["role"] == "heldout" for r in rows) == CFG["n_heldout_subjects"]
    assert {r["role"] for r in rows} == {"train", "heldout"}


def test_cohort_table_deterministic_and_seeded():
    assert cohorts.tof_table(CFG) == cohorts.tof_table(copy.deepcopy(CFG))

    def heldout(seed):
        return {r["id"] for r in cohorts.tof_table(_cfg(seed=seed)) if r["role"] == "heldout"}

    assert heldout(1) == heldout(1)
    assert heldout(1) != heldout(2)


@pytest.mark.parametrize("n_heldout", [24, 30, -1])
def test_cohort_table_rejects_bad_split(n_heldout):
    with pytest.raises(ValueError, match="n_heldout_subjects"):
        cohorts.tof_table(_cfg(n_heldout_subjects=n_heldout))


def test_unknown_subjects_are_refused(tmp_path):
    out = {"image": str(tmp_path / "i.nii.gz"), "label": str(tmp_path / "l.nii.gz")}
    for bad in ("s000", "s025", "p001", "s1x"):
        with pytest.raises(ValueError, match="unknown subject"):
            tof.simulate_subject_anatomy(CFG, bad)
    with pytest.raises(ValueError, match="cohort subject"):
        tof.novel_subject(CFG, CFG["n_subjects"], out)
    with pytest.raises(ValueError, match="strength"):
        tof.anatomy_replica(CFG, "s001", 0, -0.1, out)


# --- subjects -----------------------------------------------------------------------


def test_grid_shape_affine_and_dtypes(subjects, tmp_path):
    _, image, label, affine = next(iter(subjects.values()))
    grid = CFG["grid"]
    assert image.shape == label.shape == tuple(grid["size_vox"])
    np.testing.assert_allclose(affine, tof.grid_affine(grid), atol=1e-5)
    np.testing.assert_allclose(spacing_from_affine(affine), [grid["spacing_mm"]] * 3, atol=1e-6)
    centre = affine @ np.r_[(np.array(grid["size_vox"]) - 1) / 2.0, 1.0]
    np.testing.assert_allclose(centre[:3], grid["center_mm"], atol=1e-5)
    assert np.allclose(affine[:3, :3], np.diag(np.diag(affine[:3, :3])))  # RAS, axis-aligned
    assert 0.0 <= image.min() and image.max() <= 1.0
    assert set(np.unique(label)) <= set(range(8))

    shifted = tof.grid_affine({**grid, "center_mm": [1.0, -2.0, 3.0]})
    np.testing.assert_allclose(shifted[:3, 3] - tof.grid_affine(grid)[:3, 3], [1.0, -2.0, 3.0])

    _simulate(tmp_path, "d", tof.simulate_subject, CFG, "s001")
    assert nib.load(str(tmp_path / "d_image.nii.gz")).get_data_dtype() == np.float32
    assert nib.load(str(tmp_path / "d_label.nii.gz")).get_data_dtype() == np.uint8


def test_all_classes_present_without_variants(subjects):
    for subject, (truth, image, label, _) in subjects.items():
        assert not any(truth["variants"].values()), subject
        assert set(np.unique(label)) == set(range(8)), subject
        # TOF contrast: vessels bright, background dim
        assert np.median(image[label == 1]) > 0.7
        assert 0.1 < np.median(image[label == 0]) < 0.4


def test_missing_pcom_removes_class_3_on_that_side_only(tmp_path):
    subject = _first_subject(CFG, lambda t: t.variants["missing_pcom_L"] != t.variants["missing_pcom_R"])
    truth, _, label, affine = _simulate(tmp_path, "v", tof.simulate_subject, CFG, subject)
    missing = "L" if truth["variants"]["missing_pcom_L"] else "R"
    assert f"Pcom_{missing}" not in truth["radii_mm"]
    x = _world_x(label, affine, 3)
    left, right = np.count_nonzero(x < 0), np.count_nonzero(x > 0)
    assert (left, right)[missing == "R"] == 0
    assert (left, right)[missing == "L"] > 20

    # Variant probabilities never change geometry: with Pcoms always present, the same
    # subject differs only where its missing Pcom now runs.
    with_pcoms = _cfg(anatomy={**CFG["anatomy"], "p_missing_pcom": 0.0})
    _, _, full, _ = _simulate(tmp_path, "f", tof.simulate_subject, with_pcoms, subject)
    differ = full != label
    assert np.all(full[differ] == 3)
    assert np.all(np.sign(_world_x(differ.astype(np.uint8), affine, 1)) == (-1 if missing == "L" else 1))


def test_missing_acom_and_hypoplastic_a1(tmp_path):
    subject = _first_subject(CFG, lambda t: t.variants["missing_acom"])
    truth, _, label, _ = _simulate(tmp_path, "a", tof.simulate_subject, CFG, subject)
    assert "Acom" not in truth["radii_mm"] and not np.any(label == 4)

    thin = _cfg(NO_VARIANTS, anatomy={**NO_VARIANTS["anatomy"], "p_hypoplastic_a1": 1.0})
    normal = tof.simulate_subject_anatomy(NO_VARIANTS, "s001").truth()["radii_mm"]
    hypoplastic = tof.simulate_subject_anatomy(thin, "s001").truth()["radii_mm"]
    for side in "LR":
        assert hypoplastic[f"A1_{side}"] < 0.6 * normal[f"A1_{side}"]
        assert hypoplastic[f"A2_{side}"] == normal[f"A2_{side}"]


def test_subjects_are_deterministic(tmp_path):
    _, image_a, label_a, _ = _simulate(tmp_path, "a", tof.simulate_subject, CFG, "s002")
    _, image_b, label_b, _ = _simulate(tmp_path, "b", tof.simulate_subject, CFG, "s002")
    np.testing.assert_array_equal(image_a, image_b)
    np.testing.assert_array_equal(label_a, label_b)
    # a subject does not depend on the cohort size
    _, image_c, _, _ = _simulate(tmp_path, "c", tof.simulate_subject, _cfg(n_subjects=40), "s002")
    np.testing.assert_array_equal(image_a, image_c)


def test_render_background_comes_from_the_rng():
    tree = tof.simulate_subject_anatomy(CFG, "s003")
    a = tof.render(tree, CFG["grid"], CFG["background"], np.random.default_rng(1))
    b = tof.render(tree, CFG["grid"], CFG["background"], np.random.default_rng(2))
    np.testing.assert_array_equal(a[1], b[1])
    assert a[0].dtype == np.float32 and a[1].dtype == np.uint8
    assert _rmse(a[0], b[0]) > 0.03


def test_novel_subject_is_nobody_in_the_cohort(tmp_path, subjects):
    number = NO_VARIANTS["n_subjects"] + 1
    truth, _, label, _ = _simulate(tmp_path, "n", tof.novel_subject, NO_VARIANTS, number)
    assert truth["subject_id"] == "s025"
    for _, _, cohort_label, _ in subjects.values():
        assert _dice(label > 0, cohort_label > 0, True) < 0.8


# --- anatomy replicas ---------------------------------------------------------------


def test_exact_anatomy_replica_keeps_labels_changes_image(tmp_path, subjects):
    source, (_, image, label, _) = next(iter(subjects.items()))
    truth, replica_image, replica_label, _ = _simulate(
        tmp_path, "r0", tof.anatomy_replica, NO_VARIANTS, source, 11, 0.0
    )
    assert truth["max_displacement_mm"] == 0.0
    np.testing.assert_array_equal(replica_label, label)
    assert _rmse(replica_image, image) > 0.03


def test_anatomy_replica_same_anatomy_new_background(tmp_path, subjects):
    """RELICT's TOF-MRA situation: labels nearly identical, image no closer than another subject."""
    ids = list(subjects)
    source = ids[0]
    _, image, label, _ = subjects[source]
    truth, replica_image, replica_label, _ = _simulate(
        tmp_path, "r", tof.anatomy_replica, NO_VARIANTS, source, 5, 0.5
    )
    assert truth["source_subject_id"] == source
    assert 0.0 < truth["max_displacement_mm"] <= 0.25
    assert all(abs(f - 1.0) <= 0.025 for f in truth["radius_factors"].values())

    dice = {tof.CLASSES[k]: _dice(replica_label, label, k) for k in tof.CLASSES}
    dice_other = {
        tof.CLASSES[k]: max(_dice(replica_label, subjects[s][2], k) for s in ids[1:]) for k in tof.CLASSES
    }
    print("\nper-class Dice replica vs source:", {k: round(v, 3) for k, v in dice.items()})
    print("best per-class Dice replica vs other subjects:", {k: round(v, 3) for k, v in dice_other.items()})
    for name, value in dice.items():
        assert value >= (0.75 if name in THIN else 0.9), name
        assert value > dice_other[name] + 0.3, name
    assert np.mean(list(dice.values())) >= 0.9

    images = [s[1] for s in subjects.values()]
    inter = [_rmse(a, b) for i, a in enumerate(images) for b in images[i + 1 :]]
    replica_rmse = _rmse(replica_image, image)
    print(
        f"image RMSE replica vs source {replica_rmse:.4f}; between subjects median "
        f"{np.median(inter):.4f} (min {min(inter):.4f}, max {max(inter):.4f})"
    )
    assert replica_rmse >= 0.5 * np.median(inter)

    _, again, _, _ = _simulate(tmp_path, "r2", tof.anatomy_replica, NO_VARIANTS, source, 5, 0.5)
    np.testing.assert_array_equal(again, replica_image)
