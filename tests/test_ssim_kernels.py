"""The numba SSIM kernels: the 11-tap fast path against skimage and the generic kernel."""

import numpy as np
import pytest
from scipy import ndimage as ndi
from skimage.metrics import structural_similarity

from synthaudit.relict import image_measures, kernels
from synthaudit.relict.image_measures import all_pairs_image_measures


def _volumes(rng, shape, n):
    out = []
    for _ in range(n):
        v = ndi.gaussian_filter(rng.standard_normal(shape), 1.0)
        v = (v - v.min()) / (v.max() - v.min())
        v[: shape[0] // 3] = 0  # flat background
        out.append(v)
    return np.stack(out).astype(np.float32)


def _skimage(a, b):
    return structural_similarity(a.astype(np.float64), b.astype(np.float64), gaussian_weights=True, sigma=1.5,
                                 data_range=1.0, use_sample_covariance=True)


@pytest.mark.parametrize("shape", [(11, 11, 11), (11, 13, 12), (17, 11, 23), (14, 19, 16)])
def test_fast_kernel_matches_skimage_on_small_and_odd_shapes(shape):
    rng = np.random.default_rng(7)
    syn, train = _volumes(rng, shape, 2), _volumes(rng, shape, 3)
    train[1] = syn[0]
    out = all_pairs_image_measures(syn, train, ["ssim"], data_range=1.0, backend="kernels")["ssim"]
    expected = np.array([[_skimage(s, t) for t in train] for s in syn])
    np.testing.assert_allclose(out, expected, rtol=0, atol=1e-5)
    assert abs(out[0, 1] - 1.0) < 1e-6


def _maps(shape, n_syn, n_train, seed=3):
    rng = np.random.default_rng(seed)
    ssim = image_measures._SSIM(shape, data_range=1.0, sigma=1.5, truncate=3.5, use_sample_covariance=True,
                                device=image_measures.torch.device("cpu"), use_kernels=True)
    vols = _volumes(rng, shape, n_syn + n_train)
    maps = ssim.moments(image_measures.torch.from_numpy(vols)).arrays()
    return ssim, [m[:n_syn] for m in maps], [m[n_syn:] for m in maps]


def test_fast_kernel_equals_generic_kernel():
    ssim, x, y = _maps((15, 18, 21), 3, 5)
    weights = ssim.filter.weights.astype(np.float32)
    fast, generic = np.zeros((3, 5)), np.zeros((3, 5))
    kernels.ssim_sums(*x, *y, weights, ssim.c1, ssim.c2 / ssim.k, fast)
    kernels._ssim_sums_generic(*x, *y, weights, ssim.c1, ssim.c2 / ssim.k, generic, np.ones((3, 5), np.uint8))
    np.testing.assert_allclose(fast, generic, rtol=1e-6, atol=0)
    # the shortlist's pair mask: skipped pairs untouched (the kernels add to ``out``), the others the
    # same sums bit for bit
    wanted = np.array([[1, 0, 0, 1, 0], [0, 0, 0, 0, 0], [1, 1, 1, 1, 1]], np.uint8)
    for run, reference in ((kernels.ssim_sums, fast), (kernels._ssim_sums_generic, generic)):
        masked = np.full((3, 5), -7.0)
        run(*x, *y, weights, ssim.c1, ssim.c2 / ssim.k, masked, wanted)
        assert np.array_equal(masked[wanted == 1], reference[wanted == 1] - 7.0)
        assert np.all(masked[wanted == 0] == -7.0)


@pytest.mark.parametrize("block", [1, 3, 4, 7])
def test_result_does_not_depend_on_block_size_or_threads(monkeypatch, block):
    rng = np.random.default_rng(11)
    syn, train = _volumes(rng, (13, 15, 12), 3), _volumes(rng, (13, 15, 12), 5)
    reference = all_pairs_image_measures(syn, train, ["ssim"], data_range=1.0, backend="kernels", threads=1)["ssim"]
    monkeypatch.setattr(image_measures, "_CPU_SSIM_BLOCK", block)
    for threads in (1, 2):
        out = all_pairs_image_measures(syn, train, ["ssim"], data_range=1.0, backend="kernels",
                                       threads=threads)["ssim"]
        np.testing.assert_array_equal(out, reference)


def test_other_window_uses_generic_kernel_and_matches_skimage():
    rng = np.random.default_rng(5)
    syn, train = _volumes(rng, (12, 13, 14), 2), _volumes(rng, (12, 13, 14), 2)
    out = all_pairs_image_measures(syn, train, ["ssim"], data_range=1.0, ssim_sigma=1.0, backend="kernels")["ssim"]
    expected = np.array([[structural_similarity(s.astype(np.float64), t.astype(np.float64), gaussian_weights=True,
                                                sigma=1.0, data_range=1.0) for t in train] for s in syn])
    np.testing.assert_allclose(out, expected, rtol=0, atol=1e-5)


def test_minority_flat_background_is_shifted_to_zero_and_matches_skimage():
    # 37 % of each volume is a flat zero slab thicker than the window, so the median lies in
    # the foreground: shifted by it, the slab would be a non-zero constant whose rounding is
    # the same at every voxel and does not average out (2.6e-5 from skimage here)
    rng = np.random.default_rng(5)
    shape = (64, 56, 48)
    vols = []
    for _ in range(4):
        v = np.clip(0.5 + 0.9 * ndi.gaussian_filter(rng.standard_normal(shape), 1.0), 0, 1)
        v[:24] = 0
        vols.append(v.astype(np.float32))
    syn, train = np.stack(vols[:2]), np.stack(vols[2:])
    assert float(image_measures._shift_of(image_measures.torch.from_numpy(syn[0]))) == 0.0
    out = all_pairs_image_measures(syn, train, ["ssim"], data_range=1.0, device="cpu", threads=1)["ssim"]
    expected = np.array([[_skimage(a, b) for b in train] for a in syn])
    np.testing.assert_allclose(out, expected, rtol=0, atol=1e-5)


def test_without_a_flat_region_the_shift_is_the_median():
    v = np.random.default_rng(6).random((20, 20, 20)).astype(np.float32)
    shift = float(image_measures._shift_of(image_measures.torch.from_numpy(v)))
    assert shift == pytest.approx(float(np.median(v)), abs=1e-3)


@pytest.mark.parametrize("use_kernels", [True, False])
def test_maps_written_into_reused_buffers_equal_fresh_maps(use_kernels):
    shape = (13, 14, 12)
    ssim = image_measures._SSIM(shape, data_range=1.0, sigma=1.5, truncate=3.5, use_sample_covariance=True,
                                device=image_measures.torch.device("cpu"), use_kernels=use_kernels)
    rng = np.random.default_rng(4)
    buffer = ssim.empty_moments(3, shape)
    for n in (3, 2):  # a last, shorter block uses the first n slots
        vols = image_measures.torch.from_numpy(_volumes(rng, shape, n))
        reused, fresh = ssim.moments(vols, out=buffer), ssim.moments(vols)
        for a, b in zip(reused.arrays(), fresh.arrays()):
            assert np.array_equal(a, b)
    with pytest.raises(ValueError, match="cannot hold"):
        ssim.moments(image_measures.torch.from_numpy(_volumes(rng, shape, 4)), out=buffer)
