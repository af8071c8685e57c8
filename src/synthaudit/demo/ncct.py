"""Embedded NCCT-like demo cohort: head CT with intracerebral haemorrhage (ICH).

Like RELICT use case 1, each patient has a baseline and a follow-up non-contrast CT
within 24 h. Why simulate it this way: replica detection is only a fair test when the
two scans of one patient share anatomy but differ in everything a second acquisition
changes (head pose, voxel grid, field of view, noise, lesion size), and when patients
differ in anatomy. Each patient is the MNI152 head (``synthaudit.anatomy``) under a smooth
random deformation and scaling, with a haemorrhage; each scan samples that patient in
its own pose and grid with a single interpolation.

Spaces: *atlas* (MNI mm) -> *patient* (atlas scaled about the head centre and warped)
-> *world* (patient rotated about the head centre and translated, i.e. the scanner).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass

import numpy as np
from scipy import ndimage as ndi

from .. import anatomy
from ..io import atomic_path, save_volume
from .cohorts import SESSIONS
from .cohorts import patient_id as _patient_id


_IRREGULARITY = 0.2  # lesion outline modulation (relative radius change, at most)
_TEXTURE_SCALE = 0.4  # lesion outline modulation wavelength, relative to its radius
_ELONGATION = (0.8, 1.25)  # lesion ellipsoid axis ratios (before volume normalisation)
_FOLLOWUP_SHIFT_MM = 1.0  # the follow-up lesion centre moves at most this much
_OEDEMA_HU = 5.0  # perihaematomal oedema: tissue this much darker at the lesion edge...
_OEDEMA_MM = 4.0  # ...fading to nothing over this distance
_BRAIN_MARGIN_MM = 5.0  # lesion and oedema stay this far inside the brain mask
_CENTRE_TRIES = 64  # lesion centre candidates tested per batch...
_CENTRE_BATCHES = 20  # ...and batches before giving up
_PROBE_DIRECTIONS = 64  # directions in which a candidate's clearance is tested
_HU_RANGE = (-1024, 3071)  # 12-bit CT range stored in int16


def class_table(truths: list[dict]) -> list[dict]:
    """Clinical classes of every scan, from the simulation truth of each patient.

    ``haemorrhage_side``: ``left`` or ``right`` by the lesion centre in MNI space (RAS:
    negative x is the patient's left), one class per patient; ``haemorrhage_volume_ml``:
    the scan's lesion volume (it grows at follow-up), for users who prefer size classes.
    """
    rows = []
    for truth in truths:
        side = "left" if truth["lesion"]["centre_atlas_mm"][0] < 0 else "right"
        for session, suffix in SESSIONS.items():
            rows.append({"id": f"{truth['patient_id']}_{suffix}", "patient_id": truth["patient_id"],
                         "haemorrhage_side": side,
                         "haemorrhage_volume_ml": round(float(truth["scans"][session]["lesion_volume_ml"]), 3)})
    return rows


def simulate_patient(cfg: dict, patient_id: str, out: dict[str, str], atlas_file: str | None = None) -> dict:
    """Simulate one patient's baseline and follow-up scans and write them as NIfTI.

    The random stream is ``default_rng([seed, patient number])``, so a patient does not
    change when ``n_patients`` changes.

    Args:
        cfg: The ``datasets.<name>.demo`` section of params.yaml.
        patient_id: A patient of ``cohorts.ncct_table(cfg)``, e.g. ``p003``.
        out: Output paths under the keys ``baseline_image``, ``baseline_label``,
            ``followup_image`` and ``followup_label``. Images are int16 HU, labels
            uint8 (1 = haemorrhage), each with the scan's true world affine.

    Returns:
        The simulation truth (JSON-serialisable): patient anatomy, lesion and, per
        session, pose, grid, noise and lesion volume.

    Raises:
        ValueError: If ``patient_id`` is not a patient of this cohort, or the follow-up
            growth would make the lesion vanish.
        atlas_file: The atlas written by :func:`save_atlas` (the workflow builds it once for
            all patients); None builds it here.
    """
    index = _patient_index(patient_id, int(cfg["n_patients"]))
    rng = np.random.default_rng([int(cfg["seed"]), index])
    atlas = _atlas() if atlas_file is None else _load_atlas(atlas_file)
    patient = _Patient.draw(rng, cfg["anatomy"], atlas)
    lesion = _Lesion.draw(rng, cfg["lesion"], atlas, patient)
    truth = {
        "patient_id": patient_id,
        "anatomy": {"scale": patient.scale, "max_deformation_mm": patient.max_deformation_mm},
        "lesion": lesion.truth(patient),
        "scans": {},
    }
    for session in SESSIONS:
        image, label, affine, scan_truth = _scan(
            rng, cfg["acquisition"], atlas, patient, lesion, followup=session == "followup"
        )
        save_volume(out[f"{session}_image"], image, affine, np.int16)
        save_volume(out[f"{session}_label"], label, affine, np.uint8)
        truth["scans"][session] = scan_truth
    return truth


def _patient_index(patient_id: str, n_patients: int) -> int:
    """The patient number in ``pNNN`` (1-based), checked against the cohort size."""
    match = re.fullmatch(r"p(\d+)", patient_id)
    if match is None or not 1 <= int(match.group(1)) <= n_patients:
        expected = f"p001 .. {_patient_id(n_patients)}"
        raise ValueError(f"demo: unknown patient {patient_id!r} (expected {expected})")
    return int(match.group(1))


@dataclass(frozen=True, eq=False)
class _Atlas:
    """The 1 mm MNI head as the simulation samples it (axis-aligned, 1 mm voxels)."""

    ct: np.ndarray  # noise-free HU
    air: np.ndarray  # air fraction: noise is added to the rest only
    brain: np.ndarray  # brain mask as float32, for interpolation
    parenchyma: np.ndarray  # grey + white matter fraction
    origin: np.ndarray  # world mm of voxel (0, 0, 0)
    centre: np.ndarray  # head bounding-box centre (mm): the centre of scaling and rotation
    candidates: np.ndarray  # flat indices of parenchyma voxels: lesion centre candidates

    def index(self, world: np.ndarray) -> np.ndarray:
        """Atlas voxel coordinates of world points (3, ...) mm."""
        return world - self.origin.reshape((3,) + (1,) * (world.ndim - 1))


@functools.lru_cache(maxsize=1)
def _atlas() -> _Atlas:
    """The 1 mm atlas, built once per process (about 2 s after nilearn's import)."""
    maps = anatomy.tissue_maps(1.0)
    if not np.allclose(maps.affine[:3, :3], np.eye(3)):
        raise RuntimeError("the 1 mm tissue maps must be axis-aligned with 1 mm voxels")
    origin = maps.affine[:3, 3].astype(np.float32)
    extent = [np.flatnonzero(maps.head.any(axis=tuple(a for a in range(3) if a != k))) for k in range(3)]
    centre = origin + np.array([(e[0] + e[-1]) / 2.0 for e in extent])
    parenchyma = maps.gm + maps.wm
    return _Atlas(
        ct=anatomy.ct_image(maps),
        air=maps.air,
        brain=maps.brain.astype(np.float32),
        parenchyma=parenchyma,
        origin=origin,
        centre=centre.astype(np.float32),
        candidates=np.flatnonzero((parenchyma > 0.9) & maps.brain),
    )


def save_atlas(path: str) -> None:
    """Write the 1 mm atlas (uncompressed npz, about 170 MB) so that every patient's job reads it
    in a fraction of a second instead of building it (1.8 s of each 2.4 s job on 2 cores)."""
    atlas = _atlas()
    with atomic_path(path, suffix=".npz") as tmp:
        np.savez(tmp, **{f.name: getattr(atlas, f.name) for f in dataclasses.fields(_Atlas)})


@functools.lru_cache(maxsize=1)
def _load_atlas(path: str) -> _Atlas:
    """The atlas :func:`save_atlas` wrote (equal to :func:`_atlas`, array for array)."""
    with np.load(path) as data:
        return _Atlas(**{f.name: data[f.name] for f in dataclasses.fields(_Atlas)})


@dataclass(frozen=True, eq=False)
class _Patient:
    """A patient's head: the atlas scaled about its centre and smoothly deformed."""

    scale: float
    centre: np.ndarray
    field: np.ndarray  # (3, ...) displacement (mm) on a coarse grid over the atlas
    field_origin: np.ndarray
    field_step: float

    @property
    def max_deformation_mm(self) -> float:
        return float(np.sqrt((self.field**2).sum(axis=0)).max())

    @classmethod
    def draw(cls, rng: np.random.Generator, cfg: dict, atlas: _Atlas) -> _Patient:
        """Random scale; displacement = smoothed noise scaled to max amplitude ``deformation_mm``."""
        scale = float(rng.uniform(*cfg["scale_range"]))
        smoothness = float(cfg["deformation_smoothness_mm"])
        step = max(2.0, smoothness / 4.0)  # the field is smooth: a coarse grid is exact enough
        shape = tuple(int(np.ceil(n / step)) + 1 for n in atlas.ct.shape)
        noise = rng.standard_normal((3, *shape), dtype=np.float32)
        field = np.stack([ndi.gaussian_filter(c, smoothness / step) for c in noise])
        amplitude = np.sqrt((field**2).sum(axis=0)).max()
        field *= np.float32(cfg["deformation_mm"] / amplitude) if amplitude > 0 else np.float32(0.0)
        return cls(scale, atlas.centre, field, atlas.origin, step)

    def to_atlas(self, y: np.ndarray) -> np.ndarray:
        """Atlas world coordinates (mm) of patient points ``y`` (3, ...)."""
        centre = self.centre.reshape((3,) + (1,) * (y.ndim - 1))
        z = centre + (y - centre) / np.float32(self.scale)
        grid = (z - self.field_origin.reshape(centre.shape)) / np.float32(self.field_step)
        for k in range(3):
            z[k] += ndi.map_coordinates(self.field[k], grid, order=1, mode="nearest", output=np.float32)
        return z


@dataclass(frozen=True, eq=False)
class _Lesion:
    """An irregular haemorrhage in patient space, thresholded for each session.

    The lesion is the sublevel set ``level(y - centre) <= threshold`` of a level function
    in mm: an ellipsoidal radius modulated by smooth noise. Thresholds are calibrated on a
    1 mm grid so that the volume equals that of a sphere of the drawn radius; the
    follow-up re-thresholds the same function, so the lesion grows or shrinks in place.
    """

    centre: np.ndarray  # baseline centre, patient mm
    shift: np.ndarray  # follow-up centre minus baseline centre, mm
    shape: np.ndarray  # 3x3: ellipsoid orientation and axes (determinant 1)
    texture: np.ndarray  # radius modulation on a 1 mm grid centred on the lesion
    radius: tuple[float, float]  # equivalent radius (baseline, follow-up), mm
    threshold: tuple[float, float]  # level thresholds (baseline, follow-up)
    extent: float  # max distance (mm) of a lesion or oedema point from its centre
    hu: float

    def level(self, d: np.ndarray) -> np.ndarray:
        """The level function at offsets ``d`` (3, N) mm from the lesion centre."""
        return _level(self.shape, self.texture, d)

    @classmethod
    def draw(cls, rng: np.random.Generator, cfg: dict, atlas: _Atlas, patient: _Patient) -> _Lesion:
        """Random size, growth, attenuation and shape, then a centre with room for all of it."""
        r0 = float(rng.uniform(*cfg["radius_mm"]))
        growth = float(rng.uniform(*cfg["followup_growth"]))
        if growth <= -1.0:
            raise ValueError(
                f"demo: lesion.followup_growth must be > -1 (the lesion would vanish); got {growth}"
            )
        r1 = r0 * (1.0 + growth)
        hu = float(rng.uniform(*cfg["hu"]))
        axes = rng.uniform(*_ELONGATION, size=3)
        axes /= np.cbrt(axes.prod())
        shape = (np.diag(1.0 / axes) @ _rotation(rng.uniform(-180.0, 180.0, 3)).T).astype(np.float32)

        # Grid large enough for {level <= threshold + oedema} whatever the shape drawn.
        r_max = max(r0, r1)
        reach = (r_max * (1 + _IRREGULARITY) / axes.min() + _OEDEMA_MM) * axes.max() / (1 - _IRREGULARITY)
        half = int(np.ceil(reach)) + 1
        noise = ndi.gaussian_filter(rng.standard_normal((2 * half + 1,) * 3), _TEXTURE_SCALE * r_max)
        noise = (noise - noise.mean()) / noise.std()
        texture = (1.0 + _IRREGULARITY * np.tanh(noise)).astype(np.float32)
        offsets = np.indices(texture.shape, dtype=np.float32).reshape(3, -1) - half

        shift = rng.normal(size=3)
        shift *= rng.uniform(0.0, _FOLLOWUP_SHIFT_MM) / np.linalg.norm(shift)
        level = _level(shape, texture, offsets)
        thresholds = tuple(float(np.partition(level, _sphere_voxels(r))[_sphere_voxels(r)]) for r in (r0, r1))
        inside = level <= max(thresholds) + _OEDEMA_MM
        extent = float(np.sqrt((offsets[:, inside] ** 2).sum(axis=0)).max()) + _FOLLOWUP_SHIFT_MM
        centre = _lesion_centre(rng, atlas, patient, extent + _BRAIN_MARGIN_MM)
        return cls(centre, shift, shape, texture, (r0, r1), thresholds, extent, hu)

    def truth(self, patient: _Patient) -> dict:
        """Lesion parameters for the log (centre in patient and atlas mm)."""
        return {
            "centre_patient_mm": self.centre.tolist(),
            "centre_atlas_mm": patient.to_atlas(self.centre.astype(np.float32)[:, None])[:, 0].tolist(),
            "followup_shift_mm": self.shift.tolist(),
            "radius_mm": {"baseline": self.radius[0], "followup": self.radius[1]},
            "growth": self.radius[1] / self.radius[0] - 1.0,
            "hu": self.hu,
        }


def _level(shape: np.ndarray, texture: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Ellipsoidal radius ``|shape @ d|`` times the texture at offsets ``d`` (3, N) mm."""
    half = (texture.shape[0] - 1) / 2.0
    radius = np.sqrt(((shape @ d) ** 2).sum(axis=0))
    return radius * ndi.map_coordinates(texture, d + half, order=1, mode="nearest")


def _sphere_voxels(radius_mm: float) -> int:
    """Number of 1 mm voxels of a sphere of this radius (at least one)."""
    return max(1, int(round(4.0 / 3.0 * np.pi * radius_mm**3)))


def _lesion_centre(
    rng: np.random.Generator, atlas: _Atlas, patient: _Patient, clearance: float
) -> np.ndarray:
    """A patient-space point in grey/white matter whose ``clearance`` ball stays in the brain.

    Candidates are atlas parenchyma voxels mapped to the patient by scaling alone (the
    deformation is a few mm); the test itself uses the exact patient-to-atlas map, on
    the centre and on points of spheres of radius ``clearance`` and half of it.
    """
    directions = _fibonacci_sphere(_PROBE_DIRECTIONS)
    probes = np.concatenate([np.zeros((1, 3)), clearance * directions, clearance / 2 * directions]).T
    for _ in range(_CENTRE_BATCHES):
        index = np.unravel_index(rng.choice(atlas.candidates, _CENTRE_TRIES), atlas.ct.shape)
        x = atlas.origin[:, None] + np.array(index, dtype=np.float32)
        y = patient.centre[:, None] + patient.scale * (x - patient.centre[:, None])
        points = (y[:, :, None] + probes[:, None, :]).astype(np.float32)
        voxels = atlas.index(patient.to_atlas(points))
        brain = ndi.map_coordinates(atlas.brain, voxels, order=1)
        parenchyma = ndi.map_coordinates(atlas.parenchyma, voxels[:, :, 0], order=1)
        ok = (brain >= 0.5).all(axis=1) & (parenchyma >= 0.5)
        if ok.any():
            return y[:, np.argmax(ok)].astype(np.float64)
    raise RuntimeError(
        f"demo: found no place in the brain for a lesion reaching {clearance:.0f} mm from its centre; "
        "lower lesion.radius_mm or lesion.followup_growth"
    )


def _scan(
    rng: np.random.Generator,
    cfg: dict,
    atlas: _Atlas,
    patient: _Patient,
    lesion: _Lesion,
    followup: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
    """One acquisition: draw pose, grid and noise, sample the patient once.

    Returns:
        ``(image HU int16, label uint8, affine, truth)``.
    """
    spacing = np.asarray(cfg["spacing_mm"][rng.integers(len(cfg["spacing_mm"]))], dtype=float)
    angles = rng.uniform(-cfg["rotation_deg"], cfg["rotation_deg"], 3)
    translation = rng.uniform(-cfg["translation_mm"], cfg["translation_mm"], 3)
    shape = np.maximum(np.round(np.asarray(cfg["fov_mm"], dtype=float) / spacing).astype(int), 1)
    fov_centre = patient.centre + translation + rng.uniform(-cfg["fov_shift_mm"], cfg["fov_shift_mm"], 3)
    origin = fov_centre - (shape - 1) / 2.0 * spacing
    noise_hu = float(rng.uniform(*cfg["noise_hu"]))
    pose = _rotation(angles)

    # The voxel -> atlas map is smooth, so it is computed exactly on nodes about one
    # deformation-grid step apart and interpolated (separably, exact for its affine part).
    axes = [np.arange(n, dtype=float) for n in shape]
    nodes = [
        np.linspace(0.0, n - 1.0, int(np.ceil((n - 1) * h / patient.field_step)) + 2)
        for n, h in zip(shape, spacing)
    ]
    weights = [_linear_weights(a, b) for a, b in zip(axes, nodes)]
    node_patient = _to_patient(nodes, origin, spacing, pose, translation, patient.centre)
    node_voxels = atlas.index(patient.to_atlas(node_patient))
    voxels = np.einsum("xa,yb,zc,kabc->kxyz", *weights, node_voxels, optimize=True)
    image = ndi.map_coordinates(atlas.ct, voxels, order=1, cval=anatomy.HU["air"], output=np.float32)
    air = ndi.map_coordinates(atlas.air, voxels, order=1, cval=1.0, output=np.float32)
    del voxels

    centre = lesion.centre + (lesion.shift if followup else 0.0)
    y = _to_patient(axes, origin, spacing, pose, translation, patient.centre)
    d = y - centre.astype(np.float32)[:, None, None, None]
    near = (d**2).sum(axis=0) <= lesion.extent**2
    level = lesion.level(d[:, near])
    threshold = lesion.threshold[int(followup)]
    blood = np.clip(0.5 + (threshold - level) / spacing.mean(), 0.0, 1.0)  # partial volume
    oedema = np.clip((threshold + _OEDEMA_MM - level) / _OEDEMA_MM, 0.0, 1.0) * (1.0 - blood)
    image[near] = image[near] * (1.0 - blood) + lesion.hu * blood - _OEDEMA_HU * oedema
    label = np.zeros(shape, dtype=np.uint8)
    label[near] = level <= threshold

    image += rng.standard_normal(image.shape, dtype=np.float32) * np.float32(noise_hu) * (1.0 - air)
    image = np.clip(np.rint(image), *_HU_RANGE).astype(np.int16)

    affine = np.diag([*spacing, 1.0])
    affine[:3, 3] = origin
    n_lesion = int(label.sum())
    truth = {
        "spacing_mm": spacing.tolist(),
        "shape": shape.tolist(),
        "rotation_deg": angles.tolist(),
        "rotation_order": "Rz @ Ry @ Rx about the head centre",
        "rotation_centre_mm": patient.centre.tolist(),
        "translation_mm": translation.tolist(),
        "fov_centre_mm": fov_centre.tolist(),
        "noise_hu": noise_hu,
        "lesion_centre_world_mm": (pose @ (centre - patient.centre) + patient.centre + translation).tolist(),
        "lesion_voxels": n_lesion,
        "lesion_volume_ml": n_lesion * float(np.prod(spacing)) / 1000.0,
    }
    return image, label, affine, truth


def _to_patient(
    index: list[np.ndarray],
    origin: np.ndarray,
    spacing: np.ndarray,
    pose: np.ndarray,
    translation: np.ndarray,
    centre: np.ndarray,
) -> np.ndarray:
    """Patient coordinates (3, nx, ny, nz) of the grid of voxel ``index`` vectors per axis.

    World ``w = origin + spacing * index``; the inverse pose ``y = R^T (w - c - t) + c``
    is built separably, one outer sum per output axis.
    """
    centred = [
        (origin[j] + spacing[j] * index[j] - centre[j] - translation[j]).astype(np.float32) for j in range(3)
    ]
    y = np.empty((3, *(len(i) for i in index)), dtype=np.float32)
    for k in range(3):
        y[k] = (
            pose[0, k] * centred[0][:, None, None]
            + pose[1, k] * centred[1][None, :, None]
            + pose[2, k] * centred[2][None, None, :]
            + centre[k]
        )
    return y


def _linear_weights(x: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """Matrix (len(x), len(nodes)) of linear interpolation weights from ``nodes`` to ``x``."""
    return np.stack([np.interp(x, nodes, e) for e in np.eye(len(nodes))], axis=1).astype(np.float32)


def _rotation(angles_deg: np.ndarray) -> np.ndarray:
    """Rotation matrix ``Rz @ Ry @ Rx`` for angles (degrees) about x, y and z."""
    ax, ay, az = np.deg2rad(angles_deg)
    rx = np.array([[1, 0, 0], [0, np.cos(ax), -np.sin(ax)], [0, np.sin(ax), np.cos(ax)]])
    ry = np.array([[np.cos(ay), 0, np.sin(ay)], [0, 1, 0], [-np.sin(ay), 0, np.cos(ay)]])
    rz = np.array([[np.cos(az), -np.sin(az), 0], [np.sin(az), np.cos(az), 0], [0, 0, 1]])
    return rz @ ry @ rx


def _fibonacci_sphere(n: int) -> np.ndarray:
    """``n`` near-uniform unit vectors (n, 3)."""
    i = np.arange(n) + 0.5
    polar = np.arccos(1.0 - 2.0 * i / n)
    azimuth = np.pi * (1.0 + 5.0**0.5) * i
    return np.stack([np.sin(polar) * np.cos(azimuth), np.sin(polar) * np.sin(azimuth), np.cos(polar)], axis=1)
