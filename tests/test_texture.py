"""The smoothness check (synthaudit.relict.texture): a synthetic set blurred like a generator's
samples is told apart from the held-out scans, with its blur estimated from the samples."""

import numpy as np
import pytest
from scipy import ndimage

from synthaudit.relict.texture import blur_curve, compare_sets, effective_blur, texture_line, volume_texture


def scan(seed, blur=0.0, noise=0.02, shape=(40, 44, 40)):
    """Smooth anatomy in a [0, 1] window with air clipped at 0, scanner noise, then (a generator's
    sample) a Gaussian blur of the windowed volume."""
    rng = np.random.default_rng(seed)
    body = ndimage.gaussian_filter(rng.normal(size=shape), 3) * 8 + 0.5
    body[:, :8] = -1.0  # air: the window's clipped plateau
    vol = np.clip(body + rng.normal(0, noise, shape), 0, 1)
    return (ndimage.gaussian_filter(vol, blur) if blur else vol).astype(np.float32)


def test_noise_sd_is_the_white_noise_sd_on_smooth_anatomy():
    low, high = (volume_texture(scan(1, noise=noise))["noise_sd"] for noise in (0.01, 0.03))
    assert high == pytest.approx(0.03, rel=0.1)  # at 0.01 the anatomy's own fine texture adds 30 %
    assert 0.01 < low < 0.015
    const = volume_texture(np.zeros((10, 10, 10), np.float32))
    assert const["noise_sd"] is None and const["sharpness"] is None


@pytest.fixture(scope="module")
def heldout():
    vols = [scan(s) for s in range(8)]
    return [volume_texture(v) for v in vols], blur_curve(vols)


def test_a_blurred_set_differs_and_its_blur_is_estimated_from_the_samples(heldout):
    held, curve = heldout
    found = {}
    for blur in (0.6, 0.8, 1.5):
        t = compare_sets([volume_texture(scan(100 + s, blur)) for s in range(8)], held, curve)
        assert set(t["differs"]) == ({"noise_sd"} if blur < 0.8 else {"noise_sd", "sharpness"}), blur
        assert t["noise_ratio"] < 0.6
        lines = texture_line(t)
        assert "smoothness check" in lines[0] and "WARNING" in lines[1]
        found[blur] = t["effective_blur_vox"]
    # from the samples alone: ordered, and close where blur dominates the noise (at 0.6 the noise
    # still holds most of the sharpness: about 0.25 on these 8 small volumes)
    assert 0.1 < found[0.6] < found[0.8] < found[1.5]
    assert found[0.8] == pytest.approx(0.8, abs=0.3) and found[1.5] == pytest.approx(1.5, abs=0.3)


def test_a_set_made_like_the_scans_does_not_differ(heldout):
    held, curve = heldout
    t = compare_sets([volume_texture(scan(200 + s)) for s in range(8)], held, curve)
    assert t["differs"] == [] and t["effective_blur_vox"] == pytest.approx(0.0, abs=0.15)
    assert len(texture_line(t)) == 1


def test_effective_blur_is_clamped_to_the_curve():
    sigmas, curve = [0.0, 1.0, 2.0], [1.0, 0.5, 0.25]
    assert effective_blur(1.2, sigmas, curve) == 0.0 and effective_blur(0.1, sigmas, curve) == 2.0
    assert effective_blur(0.75, sigmas, curve) == pytest.approx(0.5)
    assert effective_blur(None, sigmas, curve) is None
