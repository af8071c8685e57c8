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
    if "cv2" not in sys.modules and importlib.util.find_spec("cv2") is None:
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


@pytest.mark.slow
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
    settings = {"prdc_k": 3, "alpha_steps": 30, "frd_min_sd": 1e-6, "bootstrap": {"n": 10, "seed": 0, "level": 0.9},
                "c_t": {"cells": 1, "min_generated": 2, "pca_components": 2, "seed": 0, "copy_z": 2.0,
                        "power_copy_share": 0.2, "min_power": 0.8}}
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


@pytest.mark.slow
def test_frd_within_a_label_class_equals_frd_score_with_that_class_as_the_mask(two_sets, tmp_path):
    """FRD per label class (fidelity.frd_classes): each class's region of one label map is the mask, as
    frd-score computes FRD with a folder of masks; a class a volume lacks is NaN there (left out), and
    a label map on another grid is refused naming the file."""
    frd_score = _frd_score()
    root, paths = two_sets
    labels, masks = {}, {}
    for name in ("a", "b"):
        labels[name], masks[name] = [], tmp_path / f"mask_{name}"
        masks[name].mkdir()
        for i, p in enumerate(paths[name]):
            lab = np.zeros((14, 14, 13), np.uint8)
            lab[2:9, 3:10, 2:8] = 1  # class 1: a block
            lab[9:13, 2:12, 6:12] = 2  # class 2: another
            if name == "b" and i == 2:
                lab[lab == 2] = 0  # this volume lacks class 2
            q = tmp_path / f"labels_{name}{i}.nii.gz"
            nib.save(nib.Nifti1Image(lab, np.diag([4.0, 4.0, 4.0, 1.0])), q)
            labels[name].append(q)
            nib.save(nib.Nifti1Image((lab == 1).astype(np.uint8), np.diag([4.0, 4.0, 4.0, 1.0])),
                     masks[name] / f"v{i}.nii.gz")
    names, a = R.extract_classes(paths["a"], labels["a"], 2)
    names_b, b = R.extract_classes(paths["b"], labels["b"], 2, workers=2)
    assert names == names_b and a.shape == (3, 2, len(names)) and len(names) > 900
    assert np.isnan(b[2, 1]).all() and not np.isnan(b[:2, 1]).any() and not np.isnan(b[:, 0]).any()
    theirs = frd_score.compute_frd([str(root / "a"), str(root / "b")], paths_masks=[str(masks["a"]), str(masks["b"])],
                                   num_workers=1)
    assert R.frd(a[:, 0], b[:, 0]) == pytest.approx(theirs, abs=1e-4)
    # the whole-volume features are not a class's: the mask changes them
    assert not np.allclose(R.extract_many(paths["a"][:1])[1][0][:50], a[0, 0][:50], equal_nan=True)
    saved = tmp_path / "classes.npz"
    R.save_class_features(saved, ["v0", "v1", "v2"], ["one", "two"], names, b)
    classes, names_s, back = R.load_class_features(saved, ["v2", "v0"])
    assert classes == ["one", "two"] and names_s == names and np.array_equal(back, b[[2, 0]], equal_nan=True)
    with pytest.raises(ValueError, match="no per-class radiomics features for 1 volume"):
        R.load_class_features(saved, ["v9"])
    small = tmp_path / "small_labels.nii.gz"
    nib.save(nib.Nifti1Image(np.zeros((7, 7, 7), np.uint8), np.diag([4.0, 4.0, 4.0, 1.0])), small)
    with pytest.raises(ValueError, match="small_labels.nii.gz: label map of"):
        R.class_features_of(paths["a"][0], small, 2)


def test_pyradiomics_without_its_repeated_work_gives_its_own_bits(two_sets, monkeypatch):
    """The hot spots synthaudit makes cheaper (bin edges without a Python loop over the voxels, one
    discretisation per image shared by the five feature classes and made from one gather of the region, the GLSZM's empty zone sizes dropped
    before its empty grey levels, the texture matrices in numba, the GLCM's marginals from one sort)
    change no bit of any feature, with the whole-image mask and with a
    region's; the work is shared (13 discretisations where PyRadiomics alone does 65), the GLSZM of
    each of the 13 images takes the new path, and PyRadiomics is left as shipped outside the extraction."""
    import contextlib

    from radiomics import base, cMatrices, glcm, glszm, imageoperations

    _, paths = two_sets
    shipped_matrices = {n: getattr(cMatrices, n) for n in ("calculate_glcm", "calculate_glrlm", "calculate_glszm",
                                                           "calculate_ngtdm")}
    shipped_glcm = glcm.RadiomicsGLCM._calculateCoefficients
    image = R._read(paths["b"][1])
    whole = np.ones(image.GetSize()[::-1], np.uint8)
    whole[0, 0, 0] = 0
    region = np.zeros_like(whole)
    region[2:10, 3:11, 1:9] = 1
    shipped_edges, shipped_binning = imageoperations.getBinEdges, base.RadiomicsFeaturesBase._applyBinning
    shipped_glszm = glszm.RadiomicsGLSZM._calculateMatrix, glszm.RadiomicsGLSZM._calculateCoefficients
    calls, zones, ours_binned = [], [], []
    ours_glszm = R._glszm_matrix
    monkeypatch.setattr(R, "_glszm_matrix", lambda self, shipped: (zones.append(1), ours_glszm(self, shipped))[1])
    from synthaudit.fidelity import binning as binning_fast
    fast_binned = binning_fast.binned
    monkeypatch.setattr(binning_fast, "binned", lambda *a: (ours_binned.append(1), fast_binned(*a))[1])

    def counted(self, matrix):
        calls.append(matrix.shape)
        return shipped_binning(self, matrix)

    monkeypatch.setattr(base.RadiomicsFeaturesBase, "_applyBinning", counted)
    for mask in (whole, region):
        calls.clear()
        zones.clear()
        ours_binned.clear()
        ours = R._execute(image, mask)
        shared, new_path, shipped_binned = len(ours_binned), len(zones), len(calls)
        calls.clear()
        with monkeypatch.context() as m:
            m.setattr(R, "_pyradiomics_without_repeated_work", contextlib.nullcontext)
            theirs = R._execute(image, mask)
        assert (shared, shipped_binned, len(calls), new_path, len(zones)) == (13, 0, 65, 13, 13)
        assert list(ours) == list(theirs) and len(ours) > 900
        assert np.array_equal(np.array(list(ours.values())), np.array(list(theirs.values())), equal_nan=True)
    assert imageoperations.getBinEdges is shipped_edges and base.RadiomicsFeaturesBase._applyBinning is counted
    assert (glszm.RadiomicsGLSZM._calculateMatrix, glszm.RadiomicsGLSZM._calculateCoefficients) == shipped_glszm
    assert {n: getattr(cMatrices, n) for n in shipped_matrices} == shipped_matrices
    assert glcm.RadiomicsGLCM._calculateCoefficients is shipped_glcm
    values = np.array([3.2, -7.9, 11.0, 0.5])  # the edges themselves, where PyRadiomics is its own reference
    with R._pyradiomics_without_repeated_work():
        fast = imageoperations.getBinEdges(values, binWidth=5)
        flat = imageoperations.getBinEdges(np.full(4, 10.0), binWidth=5)
    assert np.array_equal(fast, shipped_edges(values, binWidth=5))
    assert np.array_equal(flat, shipped_edges(np.full(4, 10.0), binWidth=5))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_binning_is_pyradiomics_own_matrix_grey_levels_and_ng(dtype):
    """fidelity.binning against PyRadiomics' ``_applyBinning`` on values that sit on the bin edges, next to
    them (one ulp either side), far out, negative, in a region and in a whole image; and PyRadiomics' own
    function for what the fast path leaves to it (a bin count, a NaN in the region, an empty region)."""
    from radiomics import base, imageoperations

    from synthaudit.fidelity import binning as binning_fast

    rng = np.random.default_rng(3)
    width = 5
    on_edges = np.arange(-40, 60, width, dtype=np.float64).astype(dtype)
    near = np.concatenate([np.nextafter(on_edges, np.inf), np.nextafter(on_edges, -np.inf)])
    values = np.concatenate([on_edges, near, (rng.standard_normal(4000) * 30).astype(dtype),
                             np.array([1e4, -3e3, 0.0, -0.0], dtype)])
    matrix = np.zeros(6 * 10 * 100, dtype)
    matrix[:values.size] = values
    matrix = rng.permutation(matrix).reshape(6, 10, 100)

    class Fake:  # what _applyBinning reads and writes of a feature class
        def __init__(self, mask, **settings):
            self.maskArray, self.settings, self.coefficients = mask, {"binWidth": width, **settings}, {}

    region = np.zeros(matrix.shape, bool)
    region[1:5, 2:9, 10:90] = True
    cases = [(matrix, np.ones(matrix.shape, bool), {}), (matrix, region, {}), (matrix, region, {"binCount": 16})]
    with_nan = matrix.copy()
    with_nan[2, 3, 40] = np.nan
    cases += [(with_nan, region, {}), (matrix, np.zeros(matrix.shape, bool), {})]
    for m, mask, settings in cases:
        ours, theirs = Fake(mask, **settings), Fake(mask, **settings)
        try:
            expected = base.RadiomicsFeaturesBase._applyBinning(theirs, m)
        except Exception as e:  # PyRadiomics' own error (an empty region), which ours must raise too
            with pytest.raises(type(e)):
                binning_fast.binned(ours, m, base.RadiomicsFeaturesBase._applyBinning,
                                    imageoperations.getBinEdges)
            continue
        got = binning_fast.binned(ours, m, base.RadiomicsFeaturesBase._applyBinning,
                                  imageoperations.getBinEdges)
        assert got.dtype == expected.dtype and np.array_equal(got, expected)
        assert ours.coefficients["grayLevels"].dtype == theirs.coefficients["grayLevels"].dtype
        assert np.array_equal(ours.coefficients["grayLevels"], theirs.coefficients["grayLevels"])
        assert ours.coefficients["Ng"] == theirs.coefficients["Ng"] and type(ours.coefficients["Ng"]) is int
    edges = np.array([-10.0, -5.0, 0.0, 5.0, 10.0])
    index = np.empty(7, np.intp)
    binning_fast._bins(np.array([-10.0, -10.000001, -4.999999, 0.0, 9.99, 10.0, 1e9]), edges, index)
    assert index.tolist() == [1, 0, 2, 3, 4, 5, 5] == np.digitize([-10.0, -10.000001, -4.999999, 0.0, 9.99, 10.0,
                                                                   1e9], edges).tolist()


def test_the_first_order_features_without_repeats_are_pyradiomics_own_bits():
    """synthaudit.fidelity.first_order against PyRadiomics' own first-order getters, feature by feature, on
    regions that take each branch: continuous values, whole numbers with many ties, a zero (the percentiles'
    ±0 guard), both signed zeros, a flat region (skewness' and kurtosis' guard), one voxel, and a NaN (the
    fallback to PyRadiomics). The same 64 bits, and the memo's arrays are not shared with the caller."""
    from radiomics.firstorder import RadiomicsFirstOrder

    from synthaudit.fidelity import first_order

    fast = first_order.getters(RadiomicsFirstOrder)
    rng = np.random.default_rng(3)
    with_zero = rng.normal(0, 50, 4001)
    with_zero[[7, 900]] = 0.0
    signed_zeros = np.round(rng.normal(0, 2, 3000)) * 1.0
    signed_zeros[signed_zeros == 0] = np.where(rng.random(int((signed_zeros == 0).sum())) < 0.5, 0.0, -0.0)
    with_nan = rng.normal(size=500)
    with_nan[3] = np.nan
    regions = {"continuous": rng.normal(0, 100, 50_001), "ties": rng.integers(-20, 20, 10_000) * 5.0,
               "a zero": with_zero, "signed zeros": signed_zeros, "flat": np.full(300, 12.5),
               "one voxel": np.array([3.25]), "a NaN": with_nan}
    for kind, values in regions.items():
        def region(getter_set):
            obj = types.SimpleNamespace(targetVoxelArray=values.reshape(1, -1).copy(), voxelArrayShift=300,
                                        pixelSpacing=(2.0, 2.0, 1.5), voxelBased=False,
                                        _moment=RadiomicsFirstOrder._moment)
            for name, fn in getter_set.items():
                setattr(obj, name, types.MethodType(fn, obj))
            return obj

        shipped = region({name: getattr(RadiomicsFirstOrder, name) for name in fast})
        ours = region(fast)
        for name in fast:
            expected = np.asarray(getattr(shipped, name)())
            got = np.asarray(getattr(ours, name)())
            again = np.asarray(getattr(ours, name)())  # from the memo
            assert got.tobytes() == expected.tobytes() == again.tobytes(), (kind, name, got, expected)
        if kind != "a NaN":
            p10 = ours.get10PercentileFeatureValue()
            p10[...] = 1e9  # a caller that writes into a value does not change the next feature
            assert ours.get10PercentileFeatureValue().tobytes() == shipped.get10PercentileFeatureValue().tobytes()


def test_the_feature_caches_recipe_covers_every_module_the_extraction_imports():
    """A cached row is reused while its recipe is the same: every module of the fidelity folder that the
    extraction (radiomics.py) imports must be in it, or a change there would be read back from old rows
    (first_order.py was missing until issue 62's binning change)."""
    import ast

    from synthaudit.fidelity import radiomics_cache as C

    tree = ast.parse(Path(R.__file__).read_text())
    imported = {f"{a.name}.py" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 1
                and not n.module for a in n.names}
    imported |= {f"{n.module}.py" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 1
                 and n.module}
    imported -= {"measures.py", "radiomics_cache.py"}  # the Fréchet distance, and the cache itself: not features
    assert imported and imported <= set(C._CODE), imported - set(C._CODE)


def test_the_feature_cache_extracts_each_content_once_and_gives_its_bits(two_sets, tmp_path, monkeypatch):
    """A volume whose bytes repeat under another name (a replica; a new gzip header) is extracted once,
    a second job reads every row from the cache without PyRadiomics, and the features are the same bits
    as without the cache, NaN's sign bit included (JSON has no NaN); per class, keyed by the label map."""
    import gzip
    import shutil

    from synthaudit.fidelity import radiomics_cache as C

    _, paths = two_sets
    copy = tmp_path / "replica.nii.gz"
    with gzip.open(paths["a"][0], "rb") as src, open(copy, "wb") as raw:
        with gzip.GzipFile(fileobj=raw, mode="wb", mtime=12345) as dst:
            shutil.copyfileobj(src, dst)
    assert copy.read_bytes() != Path(paths["a"][0]).read_bytes()
    volumes = [paths["a"][0], paths["a"][1], copy]
    names, plain = R.extract_many(volumes)
    notes, extracted = [], []
    real = R.features_of
    monkeypatch.setattr(R, "features_of", lambda p, ex=None: (extracted.append(str(p)), real(p, ex))[1])
    cache = tmp_path / "cache"
    names_c, cached = R.extract_many(volumes, cache=cache, note=notes.append)
    assert names_c == names and cached.tobytes() == plain.tobytes()
    assert extracted == [str(paths["a"][0]), str(paths["a"][1])]
    assert "3 volume(s), 2 distinct by content: 2 extracted, 0 from the feature cache" in notes[0]
    monkeypatch.setattr(R, "features_of", lambda p, ex=None: pytest.fail("extracted again"))
    names_r, again = R.extract_many([copy, paths["a"][1]], cache=cache, note=notes.append)
    assert names_r == names and again.tobytes() == plain[[2, 1]].tobytes()
    assert "2 extracted" not in notes[1] and "2 from the feature cache" in notes[1]
    # a NaN with its sign bit set (NumPy's 0/0) and infinities come back as the same 64 bits
    with np.errstate(invalid="ignore", divide="ignore"):
        odd = {"nan": float(np.float64(0) / np.float64(0)), "inf": float(np.float64(1) / np.float64(0)), "x": 0.1}
    store = C.FeatureCache(cache)
    store.put("ab" * 32, [odd, None])
    back = store.get("ab" * 32)
    assert back[1] is None and list(back[0]) == list(odd)
    assert np.array(list(back[0].values())).tobytes() == np.array(list(odd.values())).tobytes()
    # per class: the key holds the label map, so another label map is extracted anew
    labels = tmp_path / "labels.nii.gz"
    lab = np.zeros((14, 14, 13), np.uint8)
    lab[2:9, 3:10, 2:8] = 1
    nib.save(nib.Nifti1Image(lab, np.diag([4.0, 4.0, 4.0, 1.0])), labels)
    monkeypatch.setattr(R, "features_of", real)
    names_k, per_class = R.extract_classes([paths["a"][0]], [labels], 2)
    names_kc, per_class_c = R.extract_classes([paths["a"][0], copy], [labels, labels], 2, cache=cache)
    assert names_kc == names_k and per_class_c[0].tobytes() == per_class[0].tobytes()
    assert per_class_c[1].tobytes() == per_class[0].tobytes() and np.isnan(per_class[0, 1]).all()
    assert store.key(paths["a"][0], labels, 2) != store.key(paths["a"][0], labels, 3) != store.key(paths["a"][0])


def test_the_radiomics_benchs_table_in_benchmarks_md_is_its_committed_result():
    """docs/benchmarks_levels.md's FRD table is generated from results/bench/radiomics_cost.json (never typed in),
    and the committed result shows what the page says: every feature of every volume the same bits as
    PyRadiomics as shipped, and the demo's NCCT volume at least 2x faster."""
    import importlib.util
    import json

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("radiomics_cost", root / "bench" / "fidelity" / "radiomics_cost.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.main(["doc"]) == 0, "run `.venv/bin/python bench/fidelity/radiomics_cost.py doc --write`"
    result = json.loads((root / bench.RESULT).read_text())
    assert result["rows"] and all(r["same_bits"] for r in result["rows"])
    demo = [r for r in result["rows"] if r["volume"].endswith("p002_bl.nii.gz")]
    assert demo and demo[0]["speedup"] >= 2.0
