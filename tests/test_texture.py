"""The smoothness check (synthaudit.relict.texture): a synthetic set blurred like a generator's
samples is told apart from the held-out scans, with its blur estimated from the samples."""

import numpy as np
import pytest
from scipy import ndimage

from synthaudit.relict.texture import (blur_curve, compare_sets, degrade, effective_blur, fit_degradation,
                                      matched_degradation, texture_line, volume_texture)


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
        t = compare_sets([volume_texture(scan(100 + s, blur)) for s in range(8)], held, curve, (5, 95))
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
    t = compare_sets([volume_texture(scan(200 + s)) for s in range(8)], held, curve, (5, 95))
    assert t["differs"] == [] and t["effective_blur_vox"] == pytest.approx(0.0, abs=0.15)
    assert len(texture_line(t)) == 1


def test_effective_blur_is_clamped_to_the_curve():
    sigmas, curve = [0.0, 1.0, 2.0], [1.0, 0.5, 0.25]
    assert effective_blur(1.2, sigmas, curve) == 0.0 and effective_blur(0.1, sigmas, curve) == 2.0
    assert effective_blur(0.75, sigmas, curve) == pytest.approx(0.5)
    assert effective_blur(None, sigmas, curve) is None


# -- the matched null: held-out scans degraded like the samples ---------------------------------


def _fit(held_vols, samples):
    t = [volume_texture(v) for v in samples]
    noise = float(np.median([x["noise_sd"] for x in t]))
    sharp = float(np.median([x["sharpness"] for x in t]))
    return fit_degradation(held_vols, noise, sharp, seed=0), t


@pytest.mark.parametrize("blur", [0.6, 1.5])
def test_the_fitted_degradation_brings_held_out_scans_to_the_samples_texture(blur):
    """Samples blurred after the scanner's noise (a generator's decoder smooths its own noise): the
    fit finds the blur from the samples alone, and the degraded scans no longer differ from them."""
    held_vols = [scan(s) for s in range(8)]
    samples = [scan(100 + s, blur) for s in range(8)]
    fit, syn = _fit(held_vols, samples)
    assert fit["blur_vox"] == pytest.approx(blur, abs=0.25)
    degraded = [degrade(v, fit["blur_vox"], fit["noise_sd"], seed=i) for i, v in enumerate(held_vols)]
    t = compare_sets(syn, [volume_texture(v) for v in degraded], blur_curve(degraded[:4]), (5, 95))
    assert t["differs"] == [], t
    plain = compare_sets(syn, [volume_texture(v) for v in held_vols], blur_curve(held_vols[:4]), (5, 95))
    assert "sharpness" in plain["differs"] or "noise_sd" in plain["differs"]


def test_noise_added_after_the_blur_is_fitted_jointly():
    """Blur, then noise (the real-anatomy benchmark's generator): blur fitted alone reads the noise
    as sharpness; the joint fit finds both."""
    held_vols = [scan(s) for s in range(8)]
    rng = np.random.default_rng(5)
    samples = [np.clip(ndimage.gaussian_filter(scan(100 + s), 0.8) + rng.normal(0, 0.03, (40, 44, 40)), 0, 1)
               .astype(np.float32) for s in range(8)]
    fit, _ = _fit(held_vols, samples)
    assert fit["blur_vox"] == pytest.approx(0.8, abs=0.25)
    assert fit["noise_sd"] == pytest.approx(0.03, rel=0.35)
    assert len(fit["sharpness"]) == len(fit["sigmas"]) == len(fit["added_noise"])


def test_samples_like_the_scans_leave_them_as_they_are():
    """Where noise dominates sharpness the fit alone is ill-posed (blur and re-added noise trade
    off): a set inside the held-out range is matched to the scans as they are."""
    held_vols = [scan(s) for s in range(8)]
    held = [volume_texture(v) for v in held_vols]
    same = compare_sets([volume_texture(scan(200 + s)) for s in range(8)], held, blur_curve(held_vols[:4]), (5, 95))
    fit = matched_degradation(same, held_vols, seed=0)
    assert fit["blur_vox"] == 0.0 and fit["noise_sd"] == 0.0 and "inside" in fit["reason"]
    smooth = compare_sets([volume_texture(scan(100 + s, 1.5)) for s in range(8)], held, blur_curve(held_vols[:4]), (5, 95))
    assert matched_degradation(smooth, held_vols, seed=0)["blur_vox"] == pytest.approx(1.5, abs=0.25)
    assert fit_degradation(held_vols, None, None, 0)["blur_vox"] == 0.0  # nothing measured: nothing done


def test_degrade_is_seeded_and_stays_in_the_scans_range():
    v = scan(3)
    a, b = degrade(v, 0.7, 0.05, seed=4), degrade(v, 0.7, 0.05, seed=4)
    assert np.array_equal(a, b) and not np.array_equal(a, degrade(v, 0.7, 0.05, seed=5))
    assert a.dtype == np.float32 and a.min() >= v.min() and a.max() <= v.max()
    assert np.array_equal(degrade(v, 0.0, 0.0, seed=0), v)
    assert np.abs(a - v).mean() > 0.01


def test_the_verdict_says_when_calls_were_calibrated_against_the_matched_null():
    held_vols = [scan(s) for s in range(8)]
    samples = [scan(100 + s, 1.5) for s in range(8)]
    fit, syn = _fit(held_vols, samples)
    t = compare_sets(syn, [volume_texture(v) for v in held_vols], blur_curve(held_vols[:4]), (5, 95))
    t["degradation"] = fit
    off, on = texture_line(t), texture_line(t, matched=True)
    assert "WARNING" in off[1] and "matched_null" in off[1]
    assert "WARNING" not in " ".join(on) and "matched null" in on[1]
    assert f"{fit['blur_vox']:.2g} voxel" in on[0]


def test_a_mixed_set_is_not_matched_and_the_verdict_says_why():
    """Half the samples like the scans, half blurred (the demo's spiked sets): the median lies
    outside the held-out range, but one degradation fitted to it fits neither half."""
    held_vols = [scan(s) for s in range(8)]
    held = [volume_texture(v) for v in held_vols]
    rows = [volume_texture(scan(300 + s, 1.5 if s % 2 else 0.0)) for s in range(9)]
    t = compare_sets(rows, held, blur_curve(held_vols[:4]), (5, 95))
    assert t["differs"], t
    fit = matched_degradation(t, held_vols, seed=0)
    assert fit["blur_vox"] == 0.0 and fit["noise_sd"] == 0.0 and "mixture" in fit["reason"]
    t["degradation"] = fit
    lines = texture_line(t, matched=True)
    assert "WARNING" in lines[1] and "matched null was not used" in lines[1] and "mixture" in lines[1]
    uniform = [volume_texture(scan(300 + s, 1.5)) for s in range(9)]
    t2 = compare_sets(uniform, held, blur_curve(held_vols[:4]), (5, 95))
    assert matched_degradation(t2, held_vols, seed=0)["blur_vox"] > 1.0


def test_degrade_leaves_a_windows_clipped_plateaus_flat():
    """Noise on the air clipped at the window's floor would survive only where positive: a one-sided
    error over the whole background in every distance of the null."""
    v = scan(4)
    assert (v == 0).mean() > 0.1  # the air plateau
    d = degrade(v, 0.0, 0.05, seed=1)
    assert np.all(d[v == 0] == 0) and np.all(d[v == 1] == 1)
    inside = (v > 0) & (v < 1)
    assert np.std(d[inside] - v[inside]) > 0.03


def test_samples_smoother_than_the_largest_blur_are_not_matched():
    """A fit clamped at the grid's largest sigma is an extrapolation (the demo's latent diffusion
    samples, sharpness 0.08 against the scans' 1.05, were matched to scans blurred by 3 voxels
    and half of them called copies at ratios of 0.99)."""
    held_vols = [scan(s) for s in range(8)]
    held = [volume_texture(v) for v in held_vols]
    blobs = [volume_texture(ndimage.gaussian_filter(scan(400 + s), 6.0)) for s in range(8)]
    t = compare_sets(blobs, held, blur_curve(held_vols[:4]), (5, 95))
    fit = matched_degradation(t, held_vols, seed=0)
    assert fit["blur_vox"] == 0.0 and fit["noise_sd"] == 0.0 and "smoother than" in fit["reason"]
    # past the blur-only curve's end: refused before any fit; between the two curves' ends: by the fit
    mild = [volume_texture(ndimage.gaussian_filter(scan(400 + s), 2.8)) for s in range(8)]
    t = compare_sets(mild, held, blur_curve(held_vols[:4]), (5, 95))
    fit = fit_degradation(held_vols, t["synthetic"]["noise_sd"]["median"], 0.5 * min(
        x for x in t["heldout_blur_curve"] if x is not None), seed=0)
    assert fit["clamped"] and fit["blur_vox"] == max(fit["sigmas"])


def test_scans_that_differ_in_sharpness_themselves_do_not_make_a_uniform_set_a_mixture():
    """Held-out heads of different sharpness (scanners, resolutions) and samples all blurred alike:
    the samples spread like the scans, so the set is matched (a rule on the share of samples
    outside the held-out range called the real-anatomy cohort at 0.8 voxel a mixture)."""
    own = [0.0, 0.2, 0.4]  # each head's own smoothness
    held_vols = [scan(s, own[s % 3]) for s in range(9)]
    held = [volume_texture(v) for v in held_vols]
    samples = [ndimage.gaussian_filter(scan(500 + s, own[s % 3]), 1.2).astype(np.float32) for s in range(9)]
    rows = [volume_texture(v) for v in samples]
    t = compare_sets(rows, held, blur_curve(held_vols[:4]), (5, 95))
    assert "sharpness" in t["differs"]
    fit = matched_degradation(t, held_vols, seed=0)
    assert fit["blur_vox"] > 0.3 and fit["spread_ratio"]["sharpness"] < 3, fit


def _matched_files(tmp_path, degradation, *, changed=None):
    """Held-out scans, the matched null's copies of them (one changed if asked), their texture and the
    held-out embeddings, as the workflow writes them."""
    import json

    from synthaudit.features.compare import save_embeddings
    from synthaudit.io import save_volume

    rng = np.random.default_rng(0)
    ids, held, matched = ["h1", "h2", "h3"], [], []
    for k, i in enumerate(ids):
        vol = rng.random((6, 7, 5)).astype(np.float32)
        held.append(str(tmp_path / f"held_{i}.nii.gz"))
        matched.append(str(tmp_path / f"matched_{i}.nii.gz"))
        save_volume(held[-1], vol, np.eye(4))
        out = degrade(vol, degradation["blur_vox"], degradation["noise_sd"], k)
        if changed == k:
            out = out.copy()
            out[0, 0, 0] += 1e-6
        save_volume(matched[-1], out, np.eye(4))
    texture = tmp_path / "texture.json"
    texture.write_text(json.dumps({"degradation": degradation}))
    emb = rng.normal(size=(3, 4)).astype(np.float32)
    save_embeddings(tmp_path / "heldout.npz", ids, emb, {"name": "x", "grid_used": [1, 1, 1]})
    return str(texture), str(tmp_path / "heldout.npz"), held, matched, ids, emb


def test_the_matched_null_reads_the_held_out_embeddings_only_where_it_left_the_scans_as_they_are(tmp_path):
    from synthaudit.features.compare import undegraded_embeddings
    from synthaudit.relict.texture import leaves_unchanged

    none = {"blur_vox": 0.0, "noise_sd": 0.0}
    texture, held_npz, held, matched, ids, emb = _matched_files(tmp_path / "a", none)
    assert leaves_unchanged(none) and not leaves_unchanged({"blur_vox": 0.4, "noise_sd": 0.0})
    assert not leaves_unchanged({"blur_vox": 0.0, "noise_sd": 0.01})
    got, meta = undegraded_embeddings(texture, held_npz, held, matched, ids)
    assert np.array_equal(got, emb) and meta == {"name": "x", "grid_used": [1, 1, 1]}
    # ids in another order: the encoder's batches would differ, so they are computed
    assert undegraded_embeddings(texture, held_npz, held[::-1], matched[::-1], ids[::-1]) is None
    # a degraded null, and a copy that is not its scan (one voxel), are computed
    blurred = _matched_files(tmp_path / "b", {"blur_vox": 0.5, "noise_sd": 0.0})
    assert undegraded_embeddings(*blurred[:5]) is None
    changed = _matched_files(tmp_path / "c", none, changed=1)
    assert undegraded_embeddings(*changed[:5]) is None


def test_the_held_out_side_is_each_scans_texture_and_the_blur_curve():
    from synthaudit.relict.texture import heldout_texture

    vols = [scan(s, shape=(20, 22, 20)) for s in range(3)]
    ids = ["h0", "h1", "h2"]
    out = heldout_texture(vols, ids)
    assert out["rows"] == [{"id": i, "role": "heldout", **volume_texture(v)} for i, v in zip(ids, vols)]
    assert out["heldout_blur_curve"] == blur_curve(vols) and None not in out["heldout_blur_curve"]
