"""synthaudit.fidelity.texture_matrices against PyRadiomics' C (radiomics.cMatrices): the same arrays,
bit for bit (values, dtype, shape, C order; the GLCM's and GLRLM's angles), and the C itself for every
call outside the case computed in numba."""

import multiprocessing as mp

import numpy as np
import pytest
from scipy import ndimage

from synthaudit.fidelity import texture_matrices as tm

cm = pytest.importorskip("radiomics").cMatrices
NAMES = ("calculate_glcm", "calculate_glrlm", "calculate_glszm", "calculate_ngtdm")


def binned(shape, ng, seed=0, sigma=1.5):
    """Gaussian-smoothed noise digitised to 1..ng (int64, as PyRadiomics' binning returns)."""
    a = ndimage.gaussian_filter(np.random.default_rng(seed).standard_normal(shape), sigma)
    edges = np.quantile(a, np.linspace(0, 1, ng + 1)[1:-1])
    return np.digitize(a, edges) + 1


def masks(shape, seed=0):
    rng = np.random.default_rng(seed)
    out = {}
    m = np.ones(shape, bool)
    m[0, 0, 0] = False
    out["whole_minus_corner"] = m
    blob = ndimage.gaussian_filter(rng.standard_normal(shape), 2) > 0
    inner = np.zeros(shape, bool)
    inner[2:-2, 2:-2, 2:-2] = True
    blob &= inner
    blob[shape[0] // 2, shape[1] // 2, shape[2] // 2] = True
    out["blob_inside"] = blob
    holes = np.ones(shape, bool)
    holes[1:-1, 1:-1, 1:-1] = rng.random(tuple(s - 2 for s in shape)) > 0.3
    holes[shape[0] // 2, 2:-2, 2:-2] = False
    out["holes"] = holes
    plane = np.zeros(shape, bool)
    plane[shape[0] // 2, 1:-1, 2:] = True
    out["single_plane"] = plane
    planes = np.zeros(shape, bool)  # lines across the planes hold two voxels, none consecutive
    planes[1, :, :] = planes[4, 2:, 1:-1] = True
    out["two_planes"] = planes
    one = np.zeros(shape, bool)
    one[shape[0] // 3, shape[1] // 2, 1] = True
    out["one_voxel"] = one
    return out


def same(got, want):
    """The same result as the C: arrays (and tuples of them) equal in values, dtype, shape and order."""
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want):
            same(g, w)
        return
    assert isinstance(got, np.ndarray)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.flags.c_contiguous == want.flags.c_contiguous and got.flags.f_contiguous == want.flags.f_contiguous
    assert np.array_equal(got, want)


def outcome(fn, *args):
    try:
        return fn(*args)
    except Exception as e:  # the C's errors: the same type and message
        return (type(e), str(e))


def all_args(image, mask, ng, distances=(1,), force2D=False, dim=0):
    d = np.array(distances)
    return {
        "calculate_glcm": (image, mask, d, ng, force2D, dim),
        "calculate_glrlm": (image, mask, ng, max(image.shape), force2D, dim),
        "calculate_glszm": (image, mask, ng, int(mask.sum()), force2D, dim),
        "calculate_ngtdm": (image, mask, d, ng, force2D, dim),
    }


def check(name, args):
    same(getattr(tm, name)(*args), getattr(cm, name)(*args))


@pytest.fixture
def computed(monkeypatch):
    """Fails a test whose call went to the C instead of numba."""
    calls = []
    for name in NAMES:
        original = tm.ORIGINALS[name]
        monkeypatch.setitem(tm.ORIGINALS, name, lambda *a, _o=original, _n=name: calls.append(_n) or _o(*a))
    yield
    assert not calls, f"delegated to the C: {calls}"


@pytest.mark.parametrize("shape,ng", [((9, 13, 11), 7), ((60, 70, 50), 40)])
def test_same_as_c(shape, ng, computed):
    image = binned(shape, ng)
    for mask in masks(shape).values():
        for name, args in all_args(image, mask, ng).items():
            check(name, args)
        check("calculate_glcm", (image, mask, np.array([1, 2]), ng, False, 0))


def test_glcm_ngtdm_other_distances_force2d_and_2d(computed):
    image = binned((9, 13, 11), 6, seed=3)
    for mask in masks(image.shape, seed=3).values():
        for dist in ([2], [1, 3]):
            check("calculate_glcm", (image, mask, np.array(dist), 6, False, 0))
            check("calculate_ngtdm", (image, mask, np.array(dist), 6, False, 0))
        for dim in (0, 1, 2):
            for name, args in all_args(image, mask, 6, force2D=True, dim=dim).items():
                check(name, args)
    image2 = binned((15, 17, 1), 5, seed=4)[..., 0]
    for mask2 in (np.ones(image2.shape, bool), image2 > 2, image2 == 3):
        if mask2.any():
            for name, args in all_args(image2, mask2, 5, distances=(1, 2)).items():
                check(name, args)
    flat = binned((1, 12, 14), 5, seed=5)  # 3D with one plane: no angles through it
    for name, args in all_args(flat, flat > 1, 5).items():
        check(name, args)


def test_dtypes_layouts_and_unused_levels(computed):
    image = binned((10, 12, 9), 5, seed=7)
    mask = masks(image.shape, seed=7)["holes"]
    for im in (image.astype(np.int32), np.asfortranarray(image), image.astype(np.uint16)):
        for name, args in all_args(im, mask, 5).items():
            check(name, args)
    for name, args in all_args(image, mask, 9).items():  # Ng above the levels present
        check(name, args)
    outside = image.copy()
    outside[~mask] = -5  # grey levels outside the mask are never read
    for name, args in all_args(outside, mask, 5).items():
        check(name, args)
    glrlm = all_args(image, mask, 5)["calculate_glrlm"]
    check("calculate_glrlm", glrlm[:3] + (glrlm[3] + 7,) + glrlm[4:])  # a wider Nr


def test_large_background_zone(computed):
    image = binned((30, 40, 35), 20, seed=9)
    image[:, :25] = 1  # one zone of 30 x 25 x 35 voxels
    mask = np.ones(image.shape, bool)
    p = tm.calculate_glszm(image, mask, 20, int(mask.sum()), False, 0)
    assert p.shape[2] >= 30 * 25 * 35
    for name, args in all_args(image, mask, 20).items():
        check(name, args)


def test_delegates_to_c(monkeypatch):
    calls = []
    for name in NAMES:
        original = tm.ORIGINALS[name]
        monkeypatch.setitem(tm.ORIGINALS, name, lambda *a, _o=original, _n=name: calls.append(_n) or _o(*a))
    image = binned((8, 9, 10), 5, seed=11)
    mask = masks(image.shape, seed=11)["blob_inside"]
    # voxel-based: kernelRadius and the voxels' coordinates
    voxels = np.array(np.nonzero(mask))[:, :5]
    for name, args in all_args(image, mask, 5).items():
        calls.clear()
        same(getattr(tm, name)(*args, 1, voxels), getattr(cm, name)(*args, 1, voxels))
        assert calls == [name]
    # a grey level <= 0 or above Ng inside the mask, an empty mask, a float image, a bool-less mask, an
    # Nr below the longest run (a GLSZM's Ns below the mask's voxels is delegated too, but crashes the C)
    zero = image.copy()
    zero[tuple(np.argwhere(mask)[0])] = 0
    above = image.copy()
    above[tuple(np.argwhere(mask)[-1])] = 6
    cases = [all_args(zero, mask, 5), all_args(above, mask, 5),
             all_args(image, np.zeros(image.shape, bool), 5), all_args(image.astype(float), mask, 5),
             all_args(image, mask.astype(np.uint8), 5)]
    short = all_args(image, mask, 5)
    cases.append({"calculate_glrlm": short["calculate_glrlm"][:3] + (3,) + short["calculate_glrlm"][4:]})
    for case in cases:
        for name, args in case.items():
            calls.clear()
            got, want = outcome(getattr(tm, name), *args), outcome(getattr(cm, name), *args)
            assert calls == [name]
            if isinstance(want, tuple) and isinstance(want[0], type):
                assert got == want
            else:
                same(got, want)


def _in_worker(seed):
    image = binned((11, 12, 13), 6, seed=seed)
    mask = masks(image.shape, seed=seed)["holes"]
    return {name: getattr(tm, name)(*args) for name, args in all_args(image, mask, 6).items()}


def test_forked_worker():
    with mp.get_context("fork").Pool(1) as pool:
        results = pool.map(_in_worker, [21])[0]
    image = binned((11, 12, 13), 6, seed=21)
    mask = masks(image.shape, seed=21)["holes"]
    for name, args in all_args(image, mask, 6).items():
        same(results[name], getattr(cm, name)(*args))


def test_replacements():
    assert set(tm.REPLACEMENTS) == set(NAMES)
    for name, fn in tm.REPLACEMENTS.items():
        assert fn is getattr(tm, name) and tm.ORIGINALS[name] is getattr(cm, name)


def test_the_glcm_coefficients_from_one_sort_are_pyradiomics_own_bits():
    """pxAddy and pxSuby (and every other coefficient) as PyRadiomics' boolean-mask loop gives them, with
    many grey levels, some absent (the grey-level vector skips values) and two angles."""
    import logging
    import types

    from radiomics import glcm

    rng = np.random.default_rng(3)
    levels = np.unique(rng.integers(1, 400, 250)).astype(np.int64)
    ng = len(levels)
    P = rng.poisson(0.3, (1, ng, ng, 2)).astype(np.float64) / 7.0

    def fresh():
        return types.SimpleNamespace(P_glcm=P.copy(), coefficients={"Ng": int(levels.max()), "grayLevels": levels},
                                     logger=logging.getLogger("radiomics.glcm"))

    theirs, ours = fresh(), fresh()
    glcm.RadiomicsGLCM._calculateCoefficients(theirs)
    tm.glcm_coefficients(ours)
    assert sorted(ours.coefficients) == sorted(theirs.coefficients)
    for name, value in theirs.coefficients.items():
        mine = ours.coefficients[name]
        assert np.shape(mine) == np.shape(value) and np.asarray(mine).dtype == np.asarray(value).dtype, name
        assert np.asarray(mine).tobytes() == np.asarray(value).tobytes(), name


@pytest.mark.parametrize("shape", [(1, 2, 1), (3, 4, 1), (5, 1, 1), (1, 1, 6), (2, 1, 5), (4, 3, 1), (1, 5, 4)])
def test_images_one_voxel_wide_along_an_axis_give_the_cs_matrices(shape):
    """A small label-class region after PyRadiomics' crop is often one voxel wide along x: a flat offset of 1
    is then the next row, not the next voxel of the row (a GLRLM run along y was split into single voxels)."""
    rng = np.random.default_rng(sum(shape))
    image = rng.integers(1, 3, shape).astype(np.int64)
    for mask in (np.ones(shape, bool), rng.random(shape) < 0.7):
        if not mask.any():
            continue
        ng = int(image.max())
        for name, args in (("calculate_glcm", (image, mask, np.array([1]), ng, False, 0)),
                           ("calculate_glrlm", (image, mask, ng, max(shape), False, 0)),
                           ("calculate_glszm", (image, mask, ng, int(mask.sum()), False, 0)),
                           ("calculate_ngtdm", (image, mask, np.array([1]), ng, False, 0))):
            want, got = tm.ORIGINALS[name](*args), tm.REPLACEMENTS[name](*args)
            for w, g in zip(want if isinstance(want, tuple) else (want,), got if isinstance(got, tuple) else (got,)):
                assert w.dtype == g.dtype and w.shape == g.shape and np.array_equal(w, g), (name, shape)
