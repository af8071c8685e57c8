"""Embedded TOF-MRA-like demo cohort: the Circle of Willis with multiclass vessel labels.

Like RELICT use case 2, volumes are already on the preprocessed grid (RELICT registered
to a TOF template and cropped 128 x 128 x 32 voxels of 0.62 mm around the Circle of
Willis; no TOF template ships offline, so the demo draws volumes directly on that grid)
and labels are 7 artery classes with left and right merged (``CLASSES``).

Why simulate it this way: in RELICT the segmentation level detected TOF-MRA replicas best
because a replica shares the *vessel anatomy* of a training subject, not its background.
So a subject here is a vessel tree (``VesselTree``: centrelines, radii and anatomical
variants such as a missing Pcom, which is what tells subjects apart at segmentation
level) and ``render`` paints it over a background (tissue level, texture, bias field,
Rician noise) drawn from a separate random stream. ``anatomy_replica`` renders a training
subject's tree, barely perturbed, over a new background: the same label map, a
different image.

Coordinates are world mm (RAS: +x right, +y anterior, +z superior); the anatomy is laid
out around the grid centre ``grid.center_mm``.

Configuration (the ``datasets.<name>.demo`` section of params.yaml; ``DEFAULT_TOF_CFG``):

- ``n_subjects``: subjects simulated, one scan each (``s001`` ...).
- ``n_heldout_subjects``: of those, subjects kept out of training (non-replica source).
- ``seed``: seeds the held-out split, each subject's anatomy and background.
- ``grid.size_vox``: output shape in voxels (RELICT: 128 x 128 x 32).
- ``grid.spacing_mm``: isotropic voxel spacing (RELICT: 0.62 mm).
- ``grid.center_mm``: world position of the grid centre, where the Circle of Willis sits.
- ``anatomy.position_jitter_mm``: each landmark (bifurcations, vessel ends) moves by up
  to this much along each axis, independently per subject.
- ``anatomy.rotation_deg``: the whole tree turns by up to this much about each axis.
- ``anatomy.radius_variation``: each segment's radius is its typical value times
  ``1 +- radius_variation`` (uniform).
- ``anatomy.bend_mm``: typical (rms) size of the smooth random bends of segments of 20 mm
  or more (shorter ones bend proportionally less); bends vanish at the segment ends.
- ``anatomy.p_missing_pcom``: probability that a Pcom is absent, per side.
- ``anatomy.p_missing_acom``: probability that the Acom is absent.
- ``anatomy.p_hypoplastic_a1``: probability that an A1 is hypoplastic (thin), per side.
- ``background.tissue_level``: [lo, hi] of the mean brain tissue intensity (uniform).
- ``background.texture_sigma_mm``: Gaussian width of the smooth tissue texture.
- ``background.texture_amplitude``: texture standard deviation relative to the level.
- ``background.bias_amplitude``: maximum relative change of the multiplicative bias field.
- ``background.noise_sigma``: [lo, hi] of the Rician noise sigma (uniform per volume).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
from scipy import ndimage as ndi
from scipy.interpolate import CubicSpline
from scipy.spatial import cKDTree

from ..io import save_volume
from .cohorts import subject_id as _subject_id

CLASSES = {1: "ICA", 2: "BA", 3: "Pcom", 4: "Acom", 5: "PCA", 6: "ACA", 7: "M1"}

DEFAULT_TOF_CFG = {
    "n_subjects": 24,
    "n_heldout_subjects": 8,
    "seed": 20260311,
    "grid": {"size_vox": [128, 128, 32], "spacing_mm": 0.62, "center_mm": [0.0, 0.0, 0.0]},
    "anatomy": {
        "position_jitter_mm": 2.0,
        "rotation_deg": 4.0,
        "radius_variation": 0.15,
        "bend_mm": 1.5,
        "p_missing_pcom": 0.3,
        "p_missing_acom": 0.1,
        "p_hypoplastic_a1": 0.1,
    },
    "background": {
        "tissue_level": [0.15, 0.3],
        "texture_sigma_mm": 2.0,
        "texture_amplitude": 0.25,
        "bias_amplitude": 0.15,
        "noise_sigma": [0.02, 0.05],
    },
}

# Typical radius (mm) and relative TOF signal loss from a segment's start to its end
# (inflowing blood saturates, so small distal vessels fade).
_VESSELS = {
    "ICA": (2.0, 0.0),
    "BA": (1.5, 0.0),
    "M1": (1.3, 0.1),
    "PCA": (1.0, 0.2),
    "ACA": (1.0, 0.2),
    "Pcom": (0.7, 0.25),
    "Acom": (0.8, 0.25),
}
_LABELS = {name: label for label, name in CLASSES.items()}

# Landmarks of the right side (mm from the grid centre); the left side mirrors x. Vessels
# entering from below or leaving the slab start or end outside the 20 mm thick grid.
_LANDMARKS_RIGHT = {
    "ica_entry": (14.0, 5.0, -13.0),
    "ica_siphon": (16.0, 9.0, -6.0),
    "ica_terminus": (13.0, 1.0, 1.0),
    "m1_mid": (24.0, 2.0, 2.5),
    "m1_end": (37.0, 4.0, 4.0),
    "a1_mid": (7.0, 8.0, 2.5),
    "acom_junction": (3.5, 12.0, 3.0),
    "a2_mid": (3.0, 17.0, 7.0),
    "a2_end": (3.0, 24.0, 14.0),
    "p1_p2_junction": (10.0, -12.0, -0.5),
    "pca_mid": (17.0, -22.0, 1.5),
    "pca_end": (23.0, -37.0, 4.0),
}
_LANDMARKS_MIDLINE = {
    "ba_entry": (0.0, -19.0, -13.0),
    "ba_mid": (0.0, -17.0, -7.0),
    "ba_top": (0.0, -14.0, -1.0),
}
# Segments per side as (name, class, landmarks); "pcom_origin" is not drawn but is the
# ICA centreline point at _PCOM_ORIGIN of its length, where the Pcom leaves the ICA.
_SEGMENTS_SIDE = (
    ("ICA", "ICA", ("ica_entry", "ica_siphon", "ica_terminus")),
    ("M1", "M1", ("ica_terminus", "m1_mid", "m1_end")),
    ("A1", "ACA", ("ica_terminus", "a1_mid", "acom_junction")),
    ("A2", "ACA", ("acom_junction", "a2_mid", "a2_end")),
    ("PCA", "PCA", ("ba_top", "p1_p2_junction", "pca_mid", "pca_end")),
    ("Pcom", "Pcom", ("pcom_origin", "p1_p2_junction")),
)
_PCOM_ORIGIN = 0.9
_SIDES = {"R": 1.0, "L": -1.0}  # side suffix -> sign of x
# Every segment as (name, class, landmark names), in drawing order (each ICA before its Pcom).
_PLAN = (
    (("BA", "BA", tuple(_LANDMARKS_MIDLINE)),)
    + tuple(
        (f"{name}_{side}", vessel, tuple(n if n in _LANDMARKS_MIDLINE else f"{n}_{side}" for n in names))
        for side in _SIDES
        for name, vessel, names in _SEGMENTS_SIDE
    )
    + (("Acom", "Acom", ("acom_junction_L", "acom_junction_R")),)
)

_SAMPLE_STEP_MM = 0.1  # centreline sampling: distance errors stay below 0.01 mm
_BEND_REFERENCE_MM = 20.0  # segments this long or longer bend by the full bend_mm
_HYPOPLASTIC_FACTOR = 0.45  # a hypoplastic A1 has this fraction of the usual radius
_MIN_RADIUS_MM = 0.35  # thinner tubes would vanish between voxel centres
_FLOW_SIGNAL = 0.9  # TOF signal of unsaturated inflowing blood (before bias and noise)
_REPLICA_RADIUS_CHANGE = 0.05  # at strength 1, radii change by up to this fraction...
_REPLICA_DISPLACEMENT_MM = 0.5  # ...and centrelines move by up to this much
_DISPLACEMENT_WAVELENGTH_MM = 30.0  # the replica displacement is smooth on this scale
_DISPLACEMENT_MODES = 3
# Random streams: default_rng([seed, subject number, stream]) (anatomy uses no stream tag).
_BACKGROUND_STREAM = 1
_REPLICA_STREAM = 2


@dataclass(frozen=True, eq=False)
class Segment:
    """One artery segment: a sampled centreline with a constant radius.

    Attributes:
        name: Unique name, e.g. ``ICA_R``, ``A1_L``, ``BA``, ``Acom``.
        label: Class number (``CLASSES``).
        points: (N, 3) centreline samples in world mm, from proximal to distal.
        radius: Lumen radius in mm.
        falloff: Relative TOF signal loss from the first to the last sample.
    """

    name: str
    label: int
    points: np.ndarray
    radius: float
    falloff: float


@dataclass(frozen=True, eq=False)
class VesselTree:
    """A subject's Circle of Willis: its present segments and which variants it has.

    Attributes:
        segments: The segments present (a missing Pcom or Acom is simply absent).
        variants: ``missing_pcom_L/R``, ``missing_acom``, ``hypoplastic_a1_L/R`` flags.
        rotation_deg: Rotation of the whole tree about x, y and z (``Rz @ Ry @ Rx``).
    """

    segments: tuple[Segment, ...]
    variants: dict[str, bool] = field(default_factory=dict)
    rotation_deg: tuple[float, float, float] = (0.0, 0.0, 0.0)

    def truth(self) -> dict:
        """Variants, radii and pose, JSON-ready."""
        return {
            "variants": dict(self.variants),
            "radii_mm": {s.name: s.radius for s in self.segments},
            "rotation_deg": list(self.rotation_deg),
        }


def grid_affine(grid_cfg: dict) -> np.ndarray:
    """The 4x4 RAS affine of the demo grid: isotropic voxels, centred at ``center_mm``."""
    spacing = float(grid_cfg["spacing_mm"])
    size = np.asarray(grid_cfg["size_vox"], dtype=float)
    affine = np.diag([spacing, spacing, spacing, 1.0])
    affine[:3, 3] = np.asarray(grid_cfg["center_mm"], dtype=float) - (size - 1.0) / 2.0 * spacing
    return affine


def simulate_subject_anatomy(cfg: dict, subject_id: str) -> VesselTree:
    """The vessel tree of a cohort subject.

    The random stream is ``default_rng([seed, subject number])``, so a subject does not
    change when ``n_subjects`` changes, and its background (another stream) can be
    redrawn without touching its anatomy.

    Raises:
        ValueError: If ``subject_id`` is not a subject of this cohort.
    """
    return _draw_tree(cfg, _subject_index(subject_id, int(cfg["n_subjects"])))


def render(
    tree: VesselTree, grid_cfg: dict, background_cfg: dict, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Rasterise a vessel tree on the grid over a random TOF-like background.

    A voxel belongs to the segment whose surface is nearest (smallest distance to the
    centreline minus radius) if its centre lies inside that tube. The image mixes the
    flow signal and the tissue by the voxel's partial-volume vessel fraction, then
    applies the bias field and Rician noise; everything random comes from ``rng``.

    Args:
        tree: The anatomy to draw.
        grid_cfg: ``grid`` section (``size_vox``, ``spacing_mm``, ``center_mm``).
        background_cfg: ``background`` section of the demo configuration.
        rng: Source of the background: another ``rng`` gives another background.

    Returns:
        ``(image float32 in [0, 1], labels uint8 in 0..7)`` of shape ``size_vox``.
    """
    shape = tuple(int(n) for n in grid_cfg["size_vox"])
    spacing = float(grid_cfg["spacing_mm"])
    occupancy, flow, labels = _rasterise(tree, shape, spacing, grid_affine(grid_cfg)[:3, 3])

    level = rng.uniform(*background_cfg["tissue_level"])
    texture = ndi.gaussian_filter(
        rng.standard_normal(shape, dtype=np.float32), float(background_cfg["texture_sigma_mm"]) / spacing
    )
    texture /= texture.std()
    tissue = level * (1.0 + float(background_cfg["texture_amplitude"]) * texture)
    image = tissue * (1.0 - occupancy) + flow * occupancy
    image *= _bias_field(rng, shape, float(background_cfg["bias_amplitude"]))
    sigma = np.float32(rng.uniform(*background_cfg["noise_sigma"]))
    real = image + sigma * rng.standard_normal(shape, dtype=np.float32)
    imaginary = sigma * rng.standard_normal(shape, dtype=np.float32)
    image = np.clip(np.sqrt(real**2 + imaginary**2), 0.0, 1.0)
    return image.astype(np.float32), labels


def simulate_subject(cfg: dict, subject_id: str, out: dict[str, str]) -> dict:
    """Simulate one cohort subject and write its image and label as NIfTI.

    Args:
        cfg: The ``datasets.<name>.demo`` section of params.yaml.
        subject_id: A subject of ``cohorts.tof_table(cfg)``, e.g. ``s003``.
        out: Output paths under ``image`` (float32) and ``label`` (uint8, ``CLASSES``).

    Returns:
        The simulation truth (JSON-ready): variants, radii and pose.

    Raises:
        ValueError: If ``subject_id`` is not a subject of this cohort.
    """
    return _simulate(cfg, _subject_index(subject_id, int(cfg["n_subjects"])), out)


def novel_subject(cfg: dict, new_subject_number: int, out: dict[str, str]) -> dict:
    """Simulate a subject outside the cohort: a non-replica synthetic volume.

    It is exactly the subject ``new_subject_number`` of a larger cohort, so its anatomy
    is as variable as the cohort's but belongs to nobody in it.

    Args:
        cfg: The ``datasets.<name>.demo`` section of params.yaml.
        new_subject_number: A number above ``n_subjects``.
        out: Output paths under ``image`` and ``label``.

    Returns:
        The simulation truth, as for ``simulate_subject``.

    Raises:
        ValueError: If the number belongs to a cohort subject.
    """
    number = int(new_subject_number)
    if number <= int(cfg["n_subjects"]):
        raise ValueError(
            f"demo: novel subject number {number} is a cohort subject; use a number above "
            f"n_subjects ({cfg['n_subjects']})"
        )
    return _simulate(cfg, number, out)


def anatomy_replica(
    cfg: dict, source_subject_id: str, replica_seed: int, strength: float, out: dict[str, str]
) -> dict:
    """Write an anatomy replica: a cohort subject's vessel tree over a new background.

    This is the TOF-MRA replica of RELICT: the vessel anatomy is memorised, the image
    is not. The tree is perturbed very slightly (each radius by up to
    ``5 % * strength``, centrelines by a smooth displacement of at most
    ``0.5 mm * strength``) and rendered with a background drawn from ``replica_seed``,
    independent of the source's. The caller picks a training subject as the source.

    Args:
        cfg: The ``datasets.<name>.demo`` section of params.yaml.
        source_subject_id: The cohort subject whose anatomy is replicated.
        replica_seed: Seeds the perturbation and the background.
        strength: Perturbation strength (0 = the exact tree).
        out: Output paths under ``image`` and ``label``.

    Returns:
        The truth (JSON-ready): the source, seed, strength, the drawn radius factors and
        maximum displacement, and the replica's variants, radii and pose.

    Raises:
        ValueError: If the source is not a cohort subject or ``strength`` is negative.
    """
    if strength < 0:
        raise ValueError(f"demo: replica strength must be >= 0; got {strength}")
    number = _subject_index(source_subject_id, int(cfg["n_subjects"]))
    rng = np.random.default_rng([int(cfg["seed"]), number, _REPLICA_STREAM, int(replica_seed)])
    tree = _draw_tree(cfg, number)
    factors = 1.0 + _REPLICA_RADIUS_CHANGE * strength * rng.uniform(-1.0, 1.0, len(tree.segments))
    displace = _smooth_displacement(rng, _REPLICA_DISPLACEMENT_MM * strength)
    max_displacement = max(float(np.linalg.norm(displace(s.points), axis=1).max()) for s in tree.segments)
    replica = VesselTree(
        tuple(
            Segment(s.name, s.label, s.points + displace(s.points), s.radius * float(f), s.falloff)
            for s, f in zip(tree.segments, factors)
        ),
        tree.variants,
        tree.rotation_deg,
    )
    image, labels = render(replica, cfg["grid"], cfg["background"], rng)
    _save(cfg["grid"], image, labels, out)
    return {
        "source_subject_id": source_subject_id,
        "replica_seed": int(replica_seed),
        "strength": float(strength),
        "radius_factors": {s.name: float(f) for s, f in zip(tree.segments, factors)},
        "max_displacement_mm": max_displacement,
        **replica.truth(),
    }


def _subject_index(subject_id: str, n_subjects: int) -> int:
    """The subject number in ``sNNN`` (1-based), checked against the cohort size."""
    match = re.fullmatch(r"s(\d+)", subject_id)
    if match is None or not 1 <= int(match.group(1)) <= n_subjects:
        raise ValueError(
            f"demo: unknown subject {subject_id!r} (expected s001 .. {_subject_id(n_subjects)})"
        )
    return int(match.group(1))


def _simulate(cfg: dict, number: int, out: dict[str, str]) -> dict:
    """Draw subject ``number``'s tree and background, write both volumes, return the truth."""
    tree = _draw_tree(cfg, number)
    rng = np.random.default_rng([int(cfg["seed"]), number, _BACKGROUND_STREAM])
    image, labels = render(tree, cfg["grid"], cfg["background"], rng)
    _save(cfg["grid"], image, labels, out)
    return {"subject_id": _subject_id(number), **tree.truth()}


def _save(grid_cfg: dict, image: np.ndarray, labels: np.ndarray, out: dict[str, str]) -> None:
    affine = grid_affine(grid_cfg)
    save_volume(out["image"], image, affine, np.float32)
    save_volume(out["label"], labels, affine, np.uint8)


def _draw_tree(cfg: dict, number: int) -> VesselTree:
    """Subject ``number``'s vessel tree from ``default_rng([seed, number])``.

    The stream is consumed in the same order whatever the variants (every segment's
    bend is drawn even when the segment is then dropped), so changing a variant
    probability changes which variants a subject has, never its geometry.
    """
    acfg = cfg["anatomy"]
    rng = np.random.default_rng([int(cfg["seed"]), number])
    variants = {f"missing_pcom_{side}": bool(rng.random() < acfg["p_missing_pcom"]) for side in _SIDES}
    variants["missing_acom"] = bool(rng.random() < acfg["p_missing_acom"])
    variants.update(
        {f"hypoplastic_a1_{side}": bool(rng.random() < acfg["p_hypoplastic_a1"]) for side in _SIDES}
    )

    jitter = float(acfg["position_jitter_mm"])
    landmarks = {
        name: np.array(p) + rng.uniform(-jitter, jitter, 3) for name, p in _LANDMARKS_MIDLINE.items()
    }
    for side, sign in _SIDES.items():
        for name, (x, y, z) in _LANDMARKS_RIGHT.items():
            landmarks[f"{name}_{side}"] = np.array([sign * x, y, z]) + rng.uniform(-jitter, jitter, 3)

    variation = float(acfg["radius_variation"])
    centrelines, radii = {}, {}
    for name, vessel, names in _PLAN:
        line = _centreline(rng, np.array([landmarks[n] for n in names]), float(acfg["bend_mm"]))
        if vessel == "ICA":  # the Pcom of this side leaves this centreline
            landmarks[f"pcom_origin_{name[-1]}"] = line[int(_PCOM_ORIGIN * (len(line) - 1))]
        centrelines[name] = line
        radii[name] = _VESSELS[vessel][0] * (1.0 + variation * rng.uniform(-1.0, 1.0))
    for side in _SIDES:
        if variants[f"hypoplastic_a1_{side}"]:
            radii[f"A1_{side}"] *= _HYPOPLASTIC_FACTOR

    angles = rng.uniform(-acfg["rotation_deg"], acfg["rotation_deg"], 3)
    rotation = _rotation(angles)
    centre = np.asarray(cfg["grid"]["center_mm"], dtype=float)
    missing = {f"Pcom_{side}" for side in _SIDES if variants[f"missing_pcom_{side}"]}
    if variants["missing_acom"]:
        missing.add("Acom")
    segments = tuple(
        Segment(
            name,
            _LABELS[vessel],
            centrelines[name] @ rotation.T + centre,
            max(float(radii[name]), _MIN_RADIUS_MM),
            _VESSELS[vessel][1],
        )
        for name, vessel, _ in _PLAN
        if name not in missing
    )
    return VesselTree(segments, variants, tuple(float(a) for a in angles))


def _centreline(rng: np.random.Generator, controls: np.ndarray, bend_mm: float) -> np.ndarray:
    """A smooth curve through the control points plus a random bend, sampled densely.

    The bend (two sine modes, perpendicular to the chord) vanishes at both ends, so
    segments stay joined at their shared landmarks.
    """
    steps = np.linalg.norm(np.diff(controls, axis=0), axis=1)
    t = np.concatenate([[0.0], np.cumsum(steps)]) / steps.sum()
    spline = CubicSpline(t, controls, axis=0, bc_type="natural")
    chord = controls[-1] - controls[0]
    length = float(np.linalg.norm(chord))
    amplitude = bend_mm * min(1.0, length / _BEND_REFERENCE_MM)
    modes = rng.normal(size=(2, 3)) * amplitude / np.array([[1.0], [2.0]]) / np.sqrt(3.0)
    axis = chord / length
    modes -= np.outer(modes @ axis, axis)

    dense = np.linspace(0.0, 1.0, 512)
    arc = np.linalg.norm(np.diff(spline(dense), axis=0), axis=1).sum()
    s = np.linspace(0.0, 1.0, int(np.ceil((arc + 2.0 * amplitude) / _SAMPLE_STEP_MM)) + 1)
    bend = np.sin(np.pi * np.outer(s, [1.0, 2.0])) @ modes
    return spline(s) + bend


def _rasterise(
    tree: VesselTree, shape: tuple[int, ...], spacing: float, origin: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per voxel: vessel fraction, flow signal and class of the segment with the nearest surface.

    Each segment is measured only in its bounding box (plus radius and one voxel), with a
    k-d tree of its centreline samples; that keeps a volume well under a second.
    """
    flow = np.zeros(shape, np.float32)
    labels = np.zeros(shape, np.uint8)
    nearest_surface = np.full(shape, np.inf, np.float32)  # centreline distance minus radius
    for segment in tree.segments:
        reach = segment.radius + spacing  # beyond this a voxel holds no vessel
        lo = np.floor((segment.points.min(axis=0) - reach - origin) / spacing).astype(int)
        hi = np.ceil((segment.points.max(axis=0) + reach - origin) / spacing).astype(int) + 1
        lo, hi = np.maximum(lo, 0), np.minimum(hi, shape)
        if np.any(hi <= lo):
            continue  # the segment lies outside the grid
        box = tuple(slice(a, b) for a, b in zip(lo, hi))
        index = np.indices(hi - lo, dtype=np.float32).reshape(3, -1).T + lo
        points = origin + spacing * index
        distance, nearest = cKDTree(segment.points).query(points, distance_upper_bound=reach)
        surface = (distance - segment.radius).reshape(hi - lo).astype(np.float32)
        closer = surface < nearest_surface[box]
        nearest_surface[box][closer] = surface[closer]
        labels[box][closer & (surface <= 0.0)] = segment.label
        n = len(segment.points)
        along = (np.minimum(nearest, n - 1) / (n - 1)).reshape(hi - lo)  # 0 proximal .. 1 distal
        flow[box][closer] = (_FLOW_SIGNAL * (1.0 - segment.falloff * along))[closer]
    occupancy = np.clip(0.5 - nearest_surface / spacing, 0.0, 1.0)  # partial volume, linear ramp
    return occupancy, flow, labels


def _bias_field(rng: np.random.Generator, shape: tuple[int, ...], amplitude: float) -> np.ndarray:
    """A smooth multiplicative field ``1 + amplitude * f``, f a random quadratic with max |f| = 1.

    A low-order polynomial is as smooth as a coil's receive profile over a 8 cm crop and
    costs nothing, unlike smoothing noise over the whole grid.
    """
    x, y, z = np.ogrid[-1.0 : 1.0 : shape[0] * 1j, -1.0 : 1.0 : shape[1] * 1j, -1.0 : 1.0 : shape[2] * 1j]
    terms = (x, y, z, x * x, y * y, z * z, x * y, x * z, y * z)
    f = sum(np.float32(c) * term for c, term in zip(rng.normal(size=len(terms)), terms))
    return (1.0 + amplitude * f / np.abs(f).max()).astype(np.float32)


def _smooth_displacement(rng: np.random.Generator, max_mm: float):
    """A random smooth displacement field of at most ``max_mm`` anywhere.

    A few plane waves ``a_k sin(w_k . p + phi_k)`` of one wavelength, with ``sum |a_k|``
    equal to ``max_mm``, so the bound holds everywhere by construction.

    Returns:
        A function of (N, 3) points (mm) giving their (N, 3) offsets (mm).
    """
    directions = rng.normal(size=(_DISPLACEMENT_MODES, 3))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    waves = rng.normal(size=(_DISPLACEMENT_MODES, 3))
    waves *= 2.0 * np.pi / _DISPLACEMENT_WAVELENGTH_MM / np.linalg.norm(waves, axis=1, keepdims=True)
    phases = rng.uniform(0.0, 2.0 * np.pi, _DISPLACEMENT_MODES)
    weights = rng.dirichlet(np.ones(_DISPLACEMENT_MODES)) * max_mm
    amplitudes = directions * weights[:, None]

    def displace(points: np.ndarray) -> np.ndarray:
        return np.sin(points @ waves.T + phases) @ amplitudes

    return displace


def _rotation(angles_deg: np.ndarray) -> np.ndarray:
    """Rotation matrix ``Rz @ Ry @ Rx`` for angles (degrees) about x, y and z."""
    ax, ay, az = np.deg2rad(angles_deg)
    rx = np.array([[1, 0, 0], [0, np.cos(ax), -np.sin(ax)], [0, np.sin(ax), np.cos(ax)]])
    ry = np.array([[np.cos(ay), 0, np.sin(ay)], [0, 1, 0], [-np.sin(ay), 0, np.cos(ay)]])
    rz = np.array([[np.cos(az), -np.sin(az), 0], [np.sin(az), np.cos(az), 0], [0, 0, 1]])
    return rz @ ry @ rx
