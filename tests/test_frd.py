"""FRD (synthaudit.fidelity.radiomics) against frd-score 1.0.1, the authors' package (issue 45)."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
from scipy.ndimage import gaussian_filter

from synthaudit.fidelity import radiomics as R

pytest.importorskip("radiomics")


def _frd_score():
    """frd-score imports OpenCV for its 2D resize only (not installed: make install adds frd-score
    without dependencies); a stand-in with the one constant its signatures read."""
    if importlib.util.find_spec("frd_score") is None:
        pytest.skip("frd-score is not installed (make install adds it)")
    if importlib.util.find_spec("cv2") is None:
        sys.modules.setdefault("cv2", types.SimpleNamespace(INTER_LINEAR=1))
    import frd_score

    return frd_score


def test_the_extraction_settings_are_frd_scores_own():
    spec = importlib.util.find_spec("frd_score")
    if spec is None:
        pytest.skip("frd-score is not installed (make install adds it)")
    theirs = Path(spec.origin).parent / "configs" / "extraction_3d.yaml"
    ours = R.CONFIG.read_text().splitlines(keepends=True)
    assert all(line.startswith("# ") for line in ours[:4])  # our four lines saying where it comes from
    assert "".join(ours[4:]) == theirs.read_text()


@pytest.fixture(scope="module")
def two_sets(tmp_path_factory):
    """Two sets of three small textured volumes (4 mm voxels, resampled to FRD's 2 mm) that differ in contrast."""
    root = tmp_path_factory.mktemp("frd")
    rng = np.random.default_rng(0)
    paths = {}
    for name, scale in (("a", 1.0), ("b", 1.4)):
        (root / name).mkdir()
        paths[name] = []
        for i in range(3):
            v = gaussian_filter(rng.normal(size=(14, 14, 13)), 1.0) * 100 * scale + 40
            p = root / name / f"v{i}.nii.gz"
            nib.save(nib.Nifti1Image(v.astype(np.float32), np.diag([4.0, 4.0, 4.0, 1.0])), p)
            paths[name].append(p)
    return root, paths


def test_frd_equals_frd_score_on_the_same_volumes(two_sets):
    frd_score = _frd_score()
    root, paths = two_sets
    names, a = R.extract_many(paths["a"])
    names_b, b = R.extract_many(paths["b"], workers=2)  # the pool gives the same numbers, in order
    assert names == names_b and a.shape == (3, len(names)) and len(names) > 900
    theirs = frd_score.compute_frd([str(root / "a"), str(root / "b")], num_workers=1)
    ours = R.frd(a, b)
    # the same features and normalisation; the Fréchet distance exact here, frd-score's through a
    # matrix square root of a rank-deficient product: measured 7e-7 on the log scale
    assert ours == pytest.approx(theirs, abs=1e-4)
    assert R.frd(a, a) < ours - 10  # a set against itself: ~0 distance, log far below
    # FRD normalises by the reference set (v1's "d1"): not symmetric
    assert R.frd(b, a) != pytest.approx(ours, abs=1e-6)


def test_normalisation_drops_nan_volumes_and_constant_features():
    rng = np.random.default_rng(1)
    ref, other = rng.normal(size=(6, 4)), rng.normal(size=(5, 4))
    ref[:, 2] = 7.0  # SD 0 in the reference: inf after z-scoring, so the column goes
    other[1, 0] = np.nan  # a volume with a NaN feature goes
    a, b = R.normalised(ref, other)
    assert a.shape == (6, 3) and b.shape == (4, 3) and a.dtype == np.float32
    np.testing.assert_allclose(a.mean(axis=0), 0, atol=1e-6)
    np.testing.assert_allclose(a.std(axis=0), 1, atol=1e-5)
    with pytest.raises(ValueError, match="at least 2 volumes"):
        R.normalised(ref, np.full((3, 4), np.nan))


def test_features_round_trip_in_the_embeddings_order(tmp_path):
    x = np.arange(6.0).reshape(3, 2)
    x[1, 1] = np.nan
    R.save_features(tmp_path / "f.npz", ["s1", "s2", "s3"], ["f_a", "f_b"], x)
    names, y = R.load_features(tmp_path / "f.npz", ["s3", "s1", "s2"])
    assert names == ["f_a", "f_b"]
    np.testing.assert_array_equal(y, x[[2, 0, 1]])
    with pytest.raises(ValueError, match="f.npz: no radiomics features for 1 volume"):
        R.load_features(tmp_path / "f.npz", ["s1", "s9"])


def test_unreadable_volume_is_named(tmp_path):
    bad = tmp_path / "broken.nii.gz"
    bad.write_bytes(b"not a volume")
    with pytest.raises(ValueError, match="broken.nii.gz: SimpleITK cannot read it"):
        R.features_of(bad)


def test_a_feature_constant_up_to_rounding_in_the_training_scans_is_named_as_frds_driver():
    """frd-score's z-scoring by the reference magnifies a feature that is ~0 there (a wavelet band's median
    over empty background: SD 1e-14 on the demo): FRD explodes, and the audit says which feature did it."""
    from synthaudit.fidelity.audit import Embedded, audit, summary_lines

    rng = np.random.default_rng(3)
    ref, other = rng.normal(size=(20, 6)), rng.normal(size=(20, 6))
    ref[:, 4] = rng.normal(scale=1e-14, size=20)  # zero up to rounding
    other[:, 4] = 1e-3  # the samples' background is not empty
    top = R.dominant_features(ref, other, [f"f{k}" for k in range(6)])
    assert top[0]["feature"] == "f4" and top[0]["share"] > 0.99 and top[0]["reference_sd"] < 1e-13
    assert R.frd(ref, other) > 30  # log d^2: the 1e-3 offset is ~1e11 SDs
    x = rng.normal(size=(20, 3))
    ids = [f"v{k}" for k in range(20)]
    train = Embedded(ids, x, x, ids, ref, [f"f{k}" for k in range(6)])
    held = Embedded(ids, x + 0.1, x + 0.1, ids, rng.normal(size=(20, 6)))
    syn = Embedded(ids, x + 0.2, x + 0.2, ids, other)
    settings = {"prdc_k": 3, "alpha_steps": 30, "bootstrap": {"n": 10, "seed": 0, "level": 0.9},
                "c_t": {"cells": 1, "min_generated": 2, "pca_components": 2, "seed": 0, "copy_z": 2.0}}
    lines = summary_lines(audit(train, held, syn, settings, "test", "none"))
    assert any("of it from one feature, f4" in line for line in lines)


def test_a_constant_volume_is_left_out_of_frd_with_its_name(tmp_path):
    """PyRadiomics cannot describe a constant volume (its z-scoring divides by 0): the volume gets a row
    of NaN, which FRD drops as frd-score's v1 does, and the warning names the file."""
    rng = np.random.default_rng(2)
    paths = []
    for k, v in enumerate([np.full((12, 12, 11), 1.5, np.float32),
                           gaussian_filter(rng.normal(size=(12, 12, 11)), 1.0).astype(np.float32)]):
        paths.append(tmp_path / f"v{k}.nii.gz")
        nib.save(nib.Nifti1Image(v, np.diag([4.0, 4.0, 4.0, 1.0])), paths[-1])
    warnings = []
    names, x = R.extract_many(paths, warn=warnings.append)
    assert np.isnan(x[0]).all() and np.isfinite(x[1]).all() and len(names) > 900
    assert len(warnings) == 1 and "v0.nii.gz" in warnings[0]
    with pytest.raises(ValueError, match="described none of the 1 volume"):
        R.extract_many(paths[:1])
