"""How smooth and how noisy a synthetic set is, against the held-out scans that calibrate its calls.

Why: a generator's samples are smoother than scans (a decoder, a denoiser), while the held-out
scans whose distances set the calibrated thresholds are scans. A smooth sample is closer to
everything, new patients included, so calls calibrated on sharp scans can take new patients
(issue 29's real-anatomy benchmark: specificity 0.61 at blur 0.6 voxel); on other data the same
blur changed nothing (issue 43). The effect depends on the data, so every run measures it and
the verdict says it.

Two numbers per volume, on the voxels strictly inside its own intensity range (a window clips
air and bone to its ends, where differences are zero and would say nothing):

* ``noise_sd``: the robust SD of the second differences along each axis, 1.4826 MAD / sqrt(6)
  (for white noise of SD s, x[i-1] - 2 x[i] + x[i+1] has SD s sqrt 6; anatomy that is locally
  linear cancels, edges are outliers the MAD ignores), the median over the three axes;
* ``sharpness``: the mean squared first difference over the three axes, divided by the
  variance, a dimensionless 1 / (correlation length)^2 that blur lowers and noise raises.

And per set: where the synthetic volumes' median sharpness falls on the curve of the held-out
scans blurred by a Gaussian of sigma 0 ... 3 voxels: the **effective blur** of the samples
against the scans, estimated from the samples (never from how they were made). The set
differs from the held-out scans when its median noise or sharpness lies outside the held-out
scans' own range (``relict.calibration.texture_range_percentiles``, 5-95 %).
"""

from __future__ import annotations

import numpy as np
from scipy import ndimage

BLUR_SIGMAS_VOX = (0.0, 0.3, 0.6, 0.9, 1.2, 1.5, 2.0, 3.0)


# the part of a volume's intensity range left out at each end (as a fraction of the range)
RANGE_MARGIN = 0.02


def _inside(vol: np.ndarray) -> np.ndarray:
    """Voxels inside the volume's intensity range by more than RANGE_MARGIN of it at each end: not
    on a window's clipped plateaus (air, bone), nor in a sample's near-constant noise around them."""
    lo, hi = float(vol.min()), float(vol.max())
    margin = RANGE_MARGIN * (hi - lo)
    return (vol > lo + margin) & (vol < hi - margin)


def volume_texture(vol: np.ndarray) -> dict:
    """``{"noise_sd", "sharpness", "n_voxels"}`` of one volume (None where it has too few
    voxels inside its own range: a constant or a binary volume)."""
    v = np.asarray(vol, dtype=np.float64)
    inside = _inside(v)
    noise, grad = [], []
    for axis in range(v.ndim):
        if v.shape[axis] < 3:
            continue
        n = v.shape[axis]
        take = lambda a, s: np.take(a, range(s, n - 2 + s), axis=axis)  # noqa: E731
        ok = take(inside, 0) & take(inside, 1) & take(inside, 2)
        if ok.sum() < 100:
            continue
        second = (take(v, 0) - 2 * take(v, 1) + take(v, 2))[ok]
        noise.append(1.4826 * float(np.median(np.abs(second - np.median(second)))) / np.sqrt(6.0))
        grad.append(float(np.mean((take(v, 1) - take(v, 0))[ok] ** 2)))
    values = v[inside]
    if not noise or values.size < 100 or values.var() == 0:
        return {"noise_sd": None, "sharpness": None, "n_voxels": int(values.size)}
    return {"noise_sd": float(np.median(noise)), "sharpness": float(np.sum(grad) / values.var()),
            "n_voxels": int(values.size)}


def blur_curve(volumes: list[np.ndarray], sigmas=BLUR_SIGMAS_VOX) -> list[float | None]:
    """The median sharpness of ``volumes`` blurred by each Gaussian sigma (voxels)."""
    out = []
    for s in sigmas:
        values = [volume_texture(ndimage.gaussian_filter(np.asarray(v, np.float32), s) if s > 0 else v)["sharpness"]
                  for v in volumes]
        values = [x for x in values if x is not None]
        out.append(float(np.median(values)) if values else None)
    return out


def heldout_texture(volumes: list[np.ndarray], ids: list[str]) -> dict:
    """The held-out scans' side of the smoothness check: each scan's texture (rows as texture.tsv's)
    and their blur curve. Why apart: it depends on the training set's held-out scans only, and every
    synthetic set audited against that training set used to compute it again (the demo: six NCCT sets,
    about 8 s each, mostly the curve's 8 blurs of 22 scans)."""
    return {"rows": [{"id": i, "role": "heldout", **volume_texture(v)} for i, v in zip(ids, volumes, strict=True)],
            "heldout_blur_curve": blur_curve(volumes)}


def effective_blur(sharpness: float, sigmas, curve) -> float | None:
    """The sigma (voxels) at which the held-out curve reaches ``sharpness``: 0 when the samples are
    as sharp as the scans or sharper, the largest sigma when they are smoother than every step."""
    pts = [(s, c) for s, c in zip(sigmas, curve) if c is not None]
    if sharpness is None or len(pts) < 2:
        return None
    s, c = np.array(pts).T
    if sharpness >= c[0]:
        return 0.0
    if sharpness <= c[-1]:
        return float(s[-1])
    # blur lowers sharpness monotonically: interpolate on the decreasing curve
    return float(np.interp(sharpness, c[::-1], s[::-1]))


def _summary(rows: list[dict], key: str, percentiles) -> dict | None:
    values = np.array([r[key] for r in rows if r.get(key) is not None], dtype=np.float64)
    if values.size == 0:
        return None
    lo, hi = np.percentile(values, percentiles)
    return {"median": float(np.median(values)), "low": float(lo), "high": float(hi), "n": int(values.size)}


def compare_sets(synthetic: list[dict], heldout: list[dict], curve: list[float | None], percentiles,
                 sigmas=BLUR_SIGMAS_VOX) -> dict:
    """The set's texture against the held-out scans': medians, the held-out ranges (``percentiles``,
    relict.calibration.texture_range_percentiles), the effective blur, and which of noise and
    sharpness lie outside the held-out range."""
    out = {"synthetic": {k: _summary(synthetic, k, percentiles) for k in ("noise_sd", "sharpness")},
           "heldout": {k: _summary(heldout, k, percentiles) for k in ("noise_sd", "sharpness")},
           "range_percentiles": list(percentiles),
           "blur_sigmas_vox": list(sigmas), "heldout_blur_curve": curve, "differs": []}
    syn, held = out["synthetic"], out["heldout"]
    for key in ("noise_sd", "sharpness"):
        if syn[key] and held[key] and not held[key]["low"] <= syn[key]["median"] <= held[key]["high"]:
            out["differs"].append(key)
    out["effective_blur_vox"] = effective_blur(syn["sharpness"]["median"], sigmas, curve) if syn["sharpness"] else None
    if syn["noise_sd"] and held["noise_sd"] and held["noise_sd"]["median"] > 0:
        out["noise_ratio"] = syn["noise_sd"]["median"] / held["noise_sd"]["median"]
    return out


def texture_line(t: dict, matched: bool = False) -> list[str]:
    """The verdict's smoothness lines: the numbers, the blur and noise that make the held-out scans
    look like the samples, and a warning when the set differs and its calls were calibrated on the
    scans as they are (``matched``: against the scans degraded by that fit, the matched null)."""
    syn, held = t["synthetic"], t["heldout"]
    span = "-".join(f"{p:g}" for p in t["range_percentiles"]) + " %"
    if not (syn.get("sharpness") and held.get("sharpness")):
        return ["  smoothness check: not measured (too few voxels inside the intensity range)"]
    fit = t.get("degradation")
    fitted = bool(fit) and (fit["blur_vox"] > 0 or fit["noise_sd"] > 0)
    like = (f"like them blurred by {fit['blur_vox']:.2g} voxel with noise SD {fit['noise_sd']:.3g} added" if fitted
            else f"like them blurred by {t['effective_blur_vox']:.2g} voxel")
    line = (f"  smoothness check: sharpness {syn['sharpness']['median']:.3g} against the held-out scans' "
            f"{held['sharpness']['median']:.3g} ({span} {held['sharpness']['low']:.3g}-{held['sharpness']['high']:.3g})")
    if syn.get("noise_sd") and held.get("noise_sd"):
        line += (f"; noise SD {syn['noise_sd']['median']:.3g} against {held['noise_sd']['median']:.3g} "
                 f"({span} {held['noise_sd']['low']:.3g}-{held['noise_sd']['high']:.3g})")
    lines = [line + f"; {like}"]
    if matched and fitted:
        lines.append("    calls calibrated against the held-out scans degraded so (the matched null, "
                     "relict.calibration.matched_null)")
    elif t["differs"]:
        what = " and ".join({"noise_sd": "noise", "sharpness": "sharpness"}[k] for k in t["differs"])
        verb = "lie" if len(t["differs"]) > 1 else "lies"
        lines.append(f"    WARNING: the samples' {what} {verb} outside the held-out scans' range: the calibrated "
                     "thresholds come from scans unlike these samples, so the held-out false-positive rate may "
                     "not hold for them (smoother samples are closer to every training volume, new patients' "
                     "too); " + (f"the matched null was not used: {fit['reason']}" if matched and fit else
                                 "set relict.calibration.matched_null to calibrate against scans degraded to match"))
    return lines


# -- the matched null: held-out scans degraded like the samples --------------------------------

MATCH_SIGMAS_VOX = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0, 1.3, 1.6, 2.0, 2.5, 3.0)
MATCH_SCANS = 8  # held-out scans the fit degrades at each sigma (the first ones, in order)


def degrade(vol: np.ndarray, blur_vox: float, noise_sd: float, seed: int) -> np.ndarray:
    """A held-out scan made to look like the samples: a Gaussian blur of ``blur_vox`` voxels, then
    white noise of SD ``noise_sd`` (seeded) where the blurred scan lies strictly inside its own
    intensity range, clipped to that range. A window's clipped air and bone stay flat, as the
    preprocessing leaves them in the samples: noise there, half of it clipped away, would add a
    one-sided error over the whole background to every distance of the null and none of the
    samples'."""
    v = np.asarray(vol, dtype=np.float32)
    lo, hi = v.min(), v.max()
    out = ndimage.gaussian_filter(v, float(blur_vox)) if blur_vox > 0 else v.copy()
    if noise_sd > 0:
        noise = np.random.default_rng(seed).normal(0.0, float(noise_sd), out.shape).astype(np.float32)
        out = np.where((out > lo) & (out < hi), out + noise, out)
    return np.clip(out, lo, hi).astype(np.float32)


def fit_degradation(heldout: list[np.ndarray], noise_sd: float | None, sharpness: float | None, seed: int,
                    sigmas=MATCH_SIGMAS_VOX, n_scans: int = MATCH_SCANS) -> dict:
    """The blur and noise that bring the held-out scans to the samples' median noise SD and sharpness.

    Why jointly: noise raises sharpness, so a noisy smooth sample reads as less blurred than it is
    when blur alone is fitted. For each sigma the blurred scans get the white noise that lifts their
    median noise SD to the samples' (none when they are already noisier), and the sigma where the
    degraded scans' median sharpness meets the samples' is interpolated. Only the samples' own
    texture is used, never how they were made. Samples sharper and less noisy than the scans leave
    the scans as they are (a scan cannot be sharpened): ``{"blur_vox": 0, "noise_sd": 0}``.

    Returns ``{"blur_vox", "noise_sd", "sigmas", "added_noise", "sharpness", "n_scans"}``: the fit
    and its curve (per sigma: the noise added and the degraded scans' median sharpness).
    """
    scans = [np.asarray(v, np.float32) for v in heldout[:n_scans]]
    out = {"sigmas": list(sigmas), "added_noise": [], "sharpness": [], "n_scans": len(scans),
           "blur_vox": 0.0, "noise_sd": 0.0}
    if not scans or noise_sd is None or sharpness is None:
        return out
    for s in sigmas:
        blurred = [ndimage.gaussian_filter(v, s) if s > 0 else v for v in scans]
        noise = [t["noise_sd"] for t in map(volume_texture, blurred) if t["noise_sd"] is not None]
        add = float(np.sqrt(max(noise_sd ** 2 - float(np.median(noise)) ** 2, 0.0))) if noise else 0.0
        sharp = [volume_texture(degrade(v, s, add, seed + i))["sharpness"] for i, v in enumerate(scans)]
        sharp = [x for x in sharp if x is not None]
        out["added_noise"].append(add)
        out["sharpness"].append(float(np.median(sharp)) if sharp else None)
    pts = [(s, a, c) for s, a, c in zip(sigmas, out["added_noise"], out["sharpness"]) if c is not None]
    if not pts:
        return out
    s, a, c = (np.array(x) for x in zip(*pts))
    if sharpness >= c[0]:
        blur = 0.0
    elif sharpness <= c.min():
        blur = float(s[int(np.argmin(c))])
        out["clamped"] = True  # smoother than the scans blurred by the largest sigma: no fit on the grid
    else:  # sharpness falls with sigma; the first crossing
        k = int(np.flatnonzero(c <= sharpness)[0])
        blur = float(np.interp(sharpness, [c[k], c[k - 1]], [s[k], s[k - 1]]))
    out["blur_vox"], out["noise_sd"] = blur, float(np.interp(blur, s, a))
    return out


MIX_SPREAD = 3.0  # a set whose spread is this many times the held-out scans' is a mixture
SPREAD_FLOOR = 0.2  # the least held-out spread (log units, about 22 %) a set's is compared with: below it,
# ~20 scans' 5-95 % range is estimation noise (at 0.1 the real-anatomy cohort at 0.3 voxel, uniformly
# blurred, was called a mixture by its noise SD: 0.31 against the held-out scans' 0.065)


def log_spread(summary: dict | None) -> float | None:
    """log(high / low) of a texture summary (5-95 % by default): its spread, free of the unit."""
    if not summary or summary["low"] <= 0:
        return None
    return float(np.log(summary["high"] / summary["low"]))


def spread_ratio(summary: dict, key: str) -> float | None:
    """How much wider the samples' ``key`` (noise_sd, sharpness) spreads than the held-out scans'."""
    syn, held = log_spread(summary["synthetic"][key]), log_spread(summary["heldout"][key])
    return None if syn is None or held is None else syn / max(held, SPREAD_FLOOR)


def matched_degradation(summary: dict, heldout: list[np.ndarray], seed: int) -> dict:
    """The matched null's degradation for a set whose texture ``summary`` (:func:`compare_sets`) is
    known: the joint fit when the samples' noise or sharpness lies outside the held-out scans'
    range, none when both lie inside it. Why not always fit: where noise dominates sharpness,
    blur and re-added noise trade off along a flat curve, and samples that already look like the
    scans would be matched to scans blurred for nothing.

    A set that is a mixture, whose noise or sharpness (where it differs) spreads over more than
    ``MIX_SPREAD`` times the held-out scans' range (log units, 5-95 %), is not matched either: one
    degradation fitted to its median fits none of its parts (the demo's spiked sets, half scans as
    they are and half noisy, spread 7-8 times wider in sharpness; matched to scans blurred by 0.8
    voxel plus noise, every new patient was called). A uniformly blurred set spreads like the
    scans (0.9 times on the real-anatomy cohort at 0.8 voxel, whose five heads differ in
    sharpness themselves: a rule on the share of samples outside the held-out range mistook it
    for a mixture).
    """
    syn = summary["synthetic"]

    def as_they_are(reason: str, **extra) -> dict:  # no degradation: the held-out scans as they are
        out = fit_degradation([], None, None, seed)
        out.update(extra, reason=reason)
        return out

    if not summary["differs"]:
        return as_they_are("the samples' noise and sharpness lie inside the held-out scans' range: scans as they are")
    curve = [c for c in summary.get("heldout_blur_curve") or [] if c is not None]
    sharp = (syn["sharpness"] or {}).get("median")
    if curve and sharp is not None and sharp <= curve[-1]:  # beyond the blur-only curve: beyond the joint one too
        return as_they_are(f"the samples are smoother than the held-out scans blurred by "
                           f"{summary['blur_sigmas_vox'][-1]:g} voxels (sharpness {sharp:.3g}): no degradation on "
                           "the grid matches them, scans as they are")
    spreads = {k: spread_ratio(summary, k) for k in summary["differs"]}
    mixed = {k: v for k, v in spreads.items() if v is not None and v > MIX_SPREAD}
    if mixed:
        return as_they_are("the samples are a mixture: their " + ", ".join(
            f"{k} spreads {v:.1f} times as wide as the held-out scans'" for k, v in mixed.items())
            + ": no one degradation matches them, scans as they are", spread_ratio=spreads)
    out = fit_degradation(heldout, (syn["noise_sd"] or {}).get("median"), (syn["sharpness"] or {}).get("median"),
                          seed)
    out["spread_ratio"] = spreads
    if out.get("clamped"):  # an extrapolation: calls against it would mean nothing
        return as_they_are(f"the samples are smoother than the held-out scans blurred by {max(out['sigmas']):g} "
                           f"voxels (sharpness {syn['sharpness']['median']:.3g}): no degradation on the grid matches "
                           "them, scans as they are", spread_ratio=spreads, fit=out)
    out["reason"] = "the samples' " + " and ".join(summary["differs"]) + " lie outside the held-out scans' range"
    return out


def leaves_unchanged(degradation: dict) -> bool:
    """Whether :func:`degrade` with this fit (texture.json's ``degradation``) returns every held-out
    scan as it is: no blur and no noise. The matched null's volumes are then the held-out scans, and
    what was computed on those (their embeddings) holds for them bit for bit."""
    return float(degradation.get("blur_vox") or 0.0) <= 0.0 and float(degradation.get("noise_sd") or 0.0) <= 0.0
