"""Tests of the MNI tissue maps and the embedded NCCT demo cohort (small, coarse grids)."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from synthaudit import anatomy
from synthaudit.demo import cohorts, ncct
from synthaudit.io import load_volume, spacing_from_affine

CFG = {
    "n_patients": 4,
    "n_heldout_patients": 1,
    "seed": 123,
    "anatomy": {"deformation_mm": 3.0, "deformation_smoothness_mm": 20.0, "scale_range": [0.92, 1.08]},
    "lesion": {"radius_mm": [10.0, 14.0], "hu": [55.0, 80.0], "followup_growth": [-0.1, 0.25]},
    "acquisition": {
        "spacing_mm": [[3.0, 3.0, 3.0]],
        "fov_mm": [180.0, 210.0, 170.0],
        "fov_shift_mm": 10.0,
        "rotation_deg": 10.0,
        "translation_mm": 10.0,
        "noise_hu": [3.0, 8.0],
    },
}


def _cfg(**changes) -> dict:
    cfg = copy.deepcopy(CFG)
    cfg.update(changes)
    return cfg


def _outputs(folder, tag: str) -> dict[str, str]:
    return {
        f"{session}_{kind}": str(folder / f"{tag}_{session}_{kind}.nii.gz")
        for session in ncct.SESSIONS
        for kind in ("image", "label")
    }


@pytest.fixture(scope="module")
def patient(tmp_path_factory):
    """p002 simulated once: (truth, {session: (image, label, affine)})."""
    out = _outputs(tmp_path_factory.mktemp("demo"), "a")
    truth = ncct.simulate_patient(CFG, "p002", out)
    scans = {}
    for session in ncct.SESSIONS:
        image, affine = load_volume(out[f"{session}_image"])
        label, _ = load_volume(out[f"{session}_label"])
        scans[session] = (image, label, affine)
    return truth, scans


# --- cohort table -----------------------------------------------------------------


def test_cohort_table_rows_and_roles():
    rows = cohorts.ncct_table(CFG)
    assert len(rows) == 2 * CFG["n_patients"]
    assert [r["id"] for r in rows[:2]] == ["p001_bl", "p001_fu"]
    assert {r["session"] for r in rows} == {"baseline", "followup"}
    roles = {r["patient_id"]: r["role"] for r in rows}
    assert sorted(roles) == ["p001", "p002", "p003", "p004"]
    assert sum(role == "heldout" for role in roles.values()) == CFG["n_heldout_patients"]
    for r in rows:  # both scans of a patient share the role
        assert r["role"] == roles[r["patient_id"]]
        assert r["id"].startswith(r["patient_id"] + "_")


def test_cohort_table_deterministic_and_seeded():
    cfg = _cfg(n_patients=30, n_heldout_patients=10)
    assert cohorts.ncct_table(cfg) == cohorts.ncct_table(copy.deepcopy(cfg))

    def heldout(seed):
        return {r["patient_id"] for r in cohorts.ncct_table({**cfg, "seed": seed}) if r["role"] == "heldout"}

    assert len(heldout(1)) == 10
    assert heldout(1) != heldout(2)


@pytest.mark.parametrize("n_heldout", [-1, 4, 5])
def test_cohort_table_rejects_bad_heldout_count(n_heldout):
    with pytest.raises(ValueError, match="n_heldout_patients"):
        cohorts.ncct_table(_cfg(n_heldout_patients=n_heldout))


def test_unknown_patient_is_rejected(tmp_path):
    for patient_id in ("p005", "p000", "patient1"):
        with pytest.raises(ValueError, match="unknown patient"):
            ncct.simulate_patient(CFG, patient_id, _outputs(tmp_path, "x"))


# --- tissue maps --------------------------------------------------------------------


def test_tissue_maps_partition_and_masks():
    maps = anatomy.tissue_maps(1.0)
    total = sum(getattr(maps, t) for t in anatomy.TISSUES)
    np.testing.assert_allclose(total, 1.0, atol=1e-5)
    for t in anatomy.TISSUES:
        assert getattr(maps, t).dtype == np.float32
        assert getattr(maps, t).min() >= 0.0
    assert maps.brain.any() and not (maps.brain & ~maps.head).any()
    ml = {t: float(getattr(maps, t).sum()) / 1000.0 for t in anatomy.TISSUES}  # 1 mm voxels
    assert 1200 < ml["gm"] + ml["wm"] < 2000  # adult brain parenchyma
    assert 100 < ml["csf"] < 600
    assert ml["bone"] > 300 and ml["soft"] > 200
    with pytest.raises(ValueError):
        maps.gm[0, 0, 0] = 1.0  # read-only: shared through the cache


def test_templates_are_nilearns_maps_read_without_importing_nilearn():
    """The maps are read with nibabel (nilearn.datasets costs ~4 s per job to import):
    they must equal what nilearn's own loaders return, padded below."""
    from nilearn import datasets

    maps = anatomy.tissue_maps(1.0)
    pad = ((0, 0), (0, 0), (anatomy._BOTTOM_PAD_MM, 0))
    t1 = datasets.load_mni152_template(resolution=1)
    np.testing.assert_array_equal(maps.t1, np.pad(t1.get_fdata().astype(np.float32), pad))
    mask = datasets.load_mni152_brain_mask(resolution=1).get_fdata() > 0.5
    np.testing.assert_array_equal(maps.brain, np.pad(mask, pad))
    expected = t1.affine.copy()
    expected[2, 3] -= anatomy._BOTTOM_PAD_MM
    np.testing.assert_array_equal(maps.affine, expected)


def test_tissue_maps_resampled_grid():
    fine, coarse = anatomy.tissue_maps(1.0), anatomy.tissue_maps(4.0)
    assert coarse.shape == tuple(int(np.ceil(n / 4)) for n in fine.shape)
    np.testing.assert_allclose(spacing_from_affine(coarse.affine), 4.0)
    # same first voxel corner: centre moves by (4 - 1) / 2 mm
    np.testing.assert_allclose(coarse.affine[:3, 3], fine.affine[:3, 3] + 1.5)
    total = sum(getattr(coarse, t) for t in anatomy.TISSUES)
    np.testing.assert_allclose(total, 1.0, atol=1e-5)
    assert not (coarse.brain & ~coarse.head).any()


def test_mni_ct_template_values_and_determinism():
    ct, affine = anatomy.mni_ct_template(4.0)
    ct2, affine2 = anatomy.mni_ct_template(4.0)
    np.testing.assert_array_equal(ct, ct2)
    np.testing.assert_array_equal(affine, affine2)
    maps = anatomy.tissue_maps(4.0)
    assert ct.dtype == np.float32 and ct.shape == maps.shape
    assert ct.min() == pytest.approx(-1000.0)
    assert 900 < ct.max() <= 1100.0 + 1e-3
    deep = (maps.gm + maps.wm) > 0.9
    assert 25.0 < np.median(ct[deep]) < 42.0


# --- simulated patient ----------------------------------------------------------------


def test_simulation_is_deterministic(patient, tmp_path):
    """The same patient again, from the atlas file the workflow builds once (save_atlas) instead
    of the in-process atlas: identical scans and truth."""
    truth, scans = patient
    out = _outputs(tmp_path, "b")
    ncct.save_atlas(str(tmp_path / "atlas.npz"))
    # more patients in the cohort must not change this one
    assert ncct.simulate_patient(_cfg(n_patients=9), "p002", out, str(tmp_path / "atlas.npz")) == truth
    for session in ncct.SESSIONS:
        image, affine = load_volume(out[f"{session}_image"])
        label, _ = load_volume(out[f"{session}_label"])
        np.testing.assert_array_equal(image, scans[session][0])
        np.testing.assert_array_equal(label, scans[session][1])
        np.testing.assert_array_equal(affine, scans[session][2])


def test_patients_differ(patient, tmp_path):
    truth, _ = patient
    other = ncct.simulate_patient(CFG, "p003", _outputs(tmp_path, "c"))
    assert other["lesion"]["centre_patient_mm"] != truth["lesion"]["centre_patient_mm"]
    assert other["anatomy"]["scale"] != truth["anatomy"]["scale"]


def test_scan_grid_matches_drawn_acquisition(patient):
    truth, scans = patient
    poses = []
    for session, (image, label, affine) in scans.items():
        scan = truth["scans"][session]
        assert image.shape == label.shape == tuple(scan["shape"]) == (60, 70, 57)
        np.testing.assert_allclose(spacing_from_affine(affine), scan["spacing_mm"], atol=1e-5)
        np.testing.assert_allclose(np.abs(affine[:3, :3] - np.diag(scan["spacing_mm"])), 0, atol=1e-5)
        # the lesion lies where the truth says, in world coordinates
        lesion_world = affine[:3, :3] @ np.argwhere(label > 0).mean(axis=0) + affine[:3, 3]
        np.testing.assert_allclose(lesion_world, scan["lesion_centre_world_mm"], atol=4.0)
        assert np.all(np.abs(scan["rotation_deg"]) <= CFG["acquisition"]["rotation_deg"])
        poses.append(scan["rotation_deg"] + scan["translation_mm"])
    assert poses[0] != poses[1]  # each scan has its own pose


def test_hu_statistics(patient):
    _, scans = patient
    for image, label, _ in scans.values():
        assert image.min() >= -1024 and image.max() <= 3071
        assert np.mean(image == -1000) > 0.3  # air around the head, exactly -1000 HU
        assert np.sum(image > 700) > 1000  # skull
        brain = (image > 15) & (image < 50)
        assert brain.sum() > 10_000
        assert 25 < np.median(image[brain & (label == 0)]) < 42


def test_lesion_label_and_blood_hu(patient):
    truth, scans = patient
    hu = truth["lesion"]["hu"]
    assert CFG["lesion"]["hu"][0] <= hu <= CFG["lesion"]["hu"][1]
    for session, (image, label, affine) in scans.items():
        assert set(np.unique(label)) == {0, 1}
        assert label.sum() == truth["scans"][session]["lesion_voxels"]
        blood = np.median(image[label > 0])
        assert hu - 8 < blood < hu + 3  # edge voxels mix with brain, hence lower
        radius = truth["lesion"]["radius_mm"][session]
        volume = label.sum() * np.prod(spacing_from_affine(affine))
        assert volume == pytest.approx(4 / 3 * np.pi * radius**3, rel=0.2)


def test_followup_lesion_growth(patient):
    truth, scans = patient
    growth = truth["lesion"]["growth"]
    low, high = CFG["lesion"]["followup_growth"]
    assert low <= growth <= high

    def equivalent_radius(session):
        _, label, affine = scans[session]
        return np.cbrt(3 * label.sum() * np.prod(spacing_from_affine(affine)) / (4 * np.pi))

    measured = equivalent_radius("followup") / equivalent_radius("baseline") - 1
    assert measured == pytest.approx(growth, abs=0.06)
    assert low - 0.06 <= measured <= high + 0.06
