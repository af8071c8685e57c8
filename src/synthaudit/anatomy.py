"""Head tissue maps and a CT-like template in MNI space, from nilearn's bundled MNI152 maps.

Why: the demo cohort and the registration target need a head with CT tissue classes
(air, scalp, skull, CSF, grey and white matter) without any download. nilearn ships the
MNI152 (ICBM 2009) T1 template, grey/white-matter probability maps and a brain mask in
its wheel. That T1 template is skull-stripped, so a threshold on it finds the brain, not
the head: skull and scalp are grown outward from the brain mask by distance instead.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from scipy import ndimage as ndi

# Typical CT attenuation (HU) of each tissue class: air and water-like CSF by definition
# of the Hounsfield scale; grey/white matter and soft tissue as in standard CT texts
# (GM 35-45, WM 20-30, scalp/muscle ~40); cortical skull 700-1900, averaged with
# diploe to ~1100 at clinical slice thickness.
HU = {"air": -1000.0, "soft": 40.0, "bone": 1100.0, "csf": 8.0, "gm": 40.0, "wm": 28.0}

TISSUES = ("air", "soft", "bone", "csf", "gm", "wm")

_INTRACRANIAL_MM = 2.0  # brain mask -> inner skull surface (CSF over the cortex)
_SKULL_MM = 7.0  # skull thickness outside the intracranial region
_SCALP_MM = 5.0  # scalp thickness outside the skull
_EDGE_MM = 1.5  # width of the partial-volume ramp at each tissue boundary
_BOTTOM_PAD_MM = 16  # the brainstem reaches the template's lower edge; room to close the skull
_CLOSING_MM = 10.0  # the head surface bridges concavities up to twice this wide


@dataclass(frozen=True, eq=False)
class TissueMaps:
    """Tissue probability maps on one isotropic grid in MNI space.

    The maps ``air, soft, bone, csf, gm, wm`` are float32 fractions that sum to 1 in each
    voxel (partial volume), so any linear image model (``ct_image``) stays consistent
    after interpolation. Arrays are read-only because ``tissue_maps`` caches them.

    Attributes:
        affine: 4x4 voxel-to-world (RAS mm) matrix, nibabel convention.
        shape: Grid shape (x, y, z).
        air, soft, bone, csf, gm, wm: Tissue fractions (float32).
        t1: The MNI152 T1 template intensity in [0, 1] (skull-stripped, float32).
        brain: The MNI152 brain mask.
        head: Voxels that are mostly not air.
    """

    affine: np.ndarray
    shape: tuple[int, int, int]
    air: np.ndarray
    soft: np.ndarray
    bone: np.ndarray
    csf: np.ndarray
    gm: np.ndarray
    wm: np.ndarray
    t1: np.ndarray
    brain: np.ndarray
    head: np.ndarray


@functools.lru_cache(maxsize=4)
def tissue_maps(spacing_mm: float = 1.0) -> TissueMaps:
    """Tissue maps of the MNI152 head on an isotropic grid of ``spacing_mm``.

    The maps are built at 1 mm and, for other spacings, linearly resampled to a grid
    covering the same field of view (first voxel corner kept), so every spacing shows
    the same head in the same world position.

    Args:
        spacing_mm: Voxel size in mm (> 0).

    Returns:
        The (cached, read-only) tissue maps.

    Raises:
        ValueError: If ``spacing_mm`` is not positive.
    """
    if not spacing_mm > 0:
        raise ValueError(f"spacing_mm must be > 0, got {spacing_mm}")
    maps = _maps_1mm()
    if spacing_mm == 1.0:
        return maps
    return _resample(maps, float(spacing_mm))


def ct_image(maps: TissueMaps) -> np.ndarray:
    """CT image in HU: the tissue fractions weighted by each tissue's attenuation."""
    ct = np.zeros(maps.shape, dtype=np.float32)
    for tissue in TISSUES:
        ct += np.float32(HU[tissue]) * getattr(maps, tissue)
    return ct


def mni_ct_template(spacing_mm: float) -> tuple[np.ndarray, np.ndarray]:
    """Noise-free CT-like MNI152 head, the registration target for CT scans.

    Args:
        spacing_mm: Isotropic voxel size in mm.

    Returns:
        ``(image, affine)``: the image in HU (float32, a fresh writable array) and its
        4x4 affine.
    """
    maps = tissue_maps(spacing_mm)
    return ct_image(maps), maps.affine.copy()


def _mni152_file(kind: str):
    """Path of nilearn's bundled 1 mm MNI152 ICBM 2009 map ``kind`` (t1, gm or wm).

    Read with nibabel rather than through ``nilearn.datasets``, whose import (scikit-learn
    included) costs about 4 s in every job that builds the head; the files are the ones
    ``nilearn.datasets.load_mni152_*_template(resolution=1)`` reads.
    """
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("nilearn")  # locates the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("nilearn is not installed: it ships the MNI152 templates the demo and template need")
    path = Path(list(spec.submodule_search_locations)[0]) / "datasets" / "data" / \
        f"mni_icbm152_{kind}_tal_nlin_sym_09a_converted.nii.gz"
    if not path.is_file():
        raise RuntimeError(f"nilearn's MNI152 template is missing: {path}")
    return path


@functools.lru_cache(maxsize=1)
def _maps_1mm() -> TissueMaps:
    """Build the maps from nilearn's 1 mm templates (a few seconds, hence the cache)."""
    import nibabel as nib

    pad = ((0, 0), (0, 0), (_BOTTOM_PAD_MM, 0))

    def load(kind: str) -> tuple[np.ndarray, np.ndarray]:
        """The map rescaled to [0, 1] by its maximum, as nilearn's loaders do, and padded."""
        img = nib.load(_mni152_file(kind))
        data = np.asarray(img.dataobj).astype(np.float32)
        data /= data.max()
        return np.pad(data, pad), img.affine

    t1, affine = load("t1")
    gm, _ = load("gm")
    wm, _ = load("wm")
    brain = t1 > 0.2  # nilearn's load_mni152_brain_mask: the rescaled T1 above its default threshold
    affine = affine.copy()
    if not np.allclose(affine[:3, :3], np.eye(3)):
        raise RuntimeError(f"unexpected MNI152 template affine (expected 1 mm, RAS):\n{affine}")
    affine[2, 3] -= _BOTTOM_PAD_MM

    intracranial, skull_outer, head = _shells(brain)

    # Grey/white fractions (normalised where they overlap) fill the intracranial space;
    # the rest of it is CSF: sulci, the subarachnoid space and the ventricles.
    total = np.maximum(gm + wm, 1.0)
    gm = gm / total * intracranial
    wm = wm / total * intracranial
    csf = np.clip(intracranial - gm - wm, 0.0, None)
    return _frozen(
        affine=affine,
        shape=tuple(int(s) for s in brain.shape),
        air=1.0 - head,
        soft=head - skull_outer,
        bone=skull_outer - intracranial,
        csf=csf,
        gm=gm,
        wm=wm,
        t1=t1,
        brain=brain,
        head=head >= 0.5,
    )


def _shells(brain: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Soft nested regions grown from the brain: intracranial, skull outer surface, head.

    The inner skull surface lies ``_INTRACRANIAL_MM`` outside the brain and the skull is
    ``_SKULL_MM`` thick. The head surface is ``_SCALP_MM`` beyond that, closed over
    concavities narrower than ``2 * _CLOSING_MM`` (below the frontal lobes, in front of
    the brainstem), which are filled with bone up to the scalp, as the skull base is.
    Distances are computed on a 2 mm grid and linearly upsampled: the exact transform
    at 1 mm costs several seconds, and its errors are below the partial-volume ramp.
    """
    r_skull = _INTRACRANIAL_MM + _SKULL_MM
    r_head = r_skull + _SCALP_MM
    padded = np.pad(brain, [(0, n % 2) for n in brain.shape])
    blocks = padded.reshape(padded.shape[0] // 2, 2, padded.shape[1] // 2, 2, padded.shape[2] // 2, 2)
    coarse = blocks.mean(axis=(1, 3, 5), dtype=np.float32) >= 0.5
    dist = ndi.distance_transform_edt(~coarse, sampling=2).astype(np.float32)
    # closing = dilation by r_head + _CLOSING_MM, then erosion by _CLOSING_MM
    dilated = dist <= r_head + _CLOSING_MM
    head_dist = r_head + _CLOSING_MM - ndi.distance_transform_edt(dilated, sampling=2).astype(np.float32)
    skull_dist = np.minimum(dist, head_dist + _SCALP_MM)

    dist = _upsample2(dist, brain.shape)
    dist[brain] = 0.0
    intracranial = _inside(dist, _INTRACRANIAL_MM)
    skull_outer = np.maximum(_inside(_upsample2(skull_dist, brain.shape), r_skull), intracranial)
    head = np.maximum(_inside(_upsample2(head_dist, brain.shape), r_head), skull_outer)
    return intracranial, skull_outer, head


def _upsample2(coarse: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Linear upsampling by 2 along each axis (voxel corners aligned, edges held), cropped to ``shape``."""
    out = coarse
    for axis, n in enumerate(shape):
        c = np.moveaxis(out, axis, 0)
        edged = np.concatenate([c[:1], c, c[-1:]])
        fine = np.empty((2 * len(c),) + c.shape[1:], dtype=np.float32)
        # fine voxels 2k and 2k+1 lie a quarter of a coarse voxel before and after voxel k
        fine[0::2] = 0.75 * c + 0.25 * edged[:-2]
        fine[1::2] = 0.75 * c + 0.25 * edged[2:]
        out = np.moveaxis(fine[:n], 0, axis)
    return np.ascontiguousarray(out)


def _inside(dist: np.ndarray, radius_mm: float) -> np.ndarray:
    """Soft membership of ``dist <= radius_mm``: a linear ramp ``_EDGE_MM`` wide."""
    return np.clip((radius_mm - dist) / _EDGE_MM + 0.5, 0.0, 1.0).astype(np.float32)


def _resample(maps: TissueMaps, spacing: float) -> TissueMaps:
    """Linear resampling of every map to an isotropic grid of ``spacing`` mm."""
    old = float(np.sqrt((maps.affine[:3, :3] ** 2).sum(axis=0))[0])
    ratio = spacing / old
    shape = tuple(int(np.ceil(n / ratio - 1e-6)) for n in maps.shape)
    # keep the first voxel corner: new voxel i sits at old index (ratio - 1) / 2 + i * ratio
    offset = (ratio - 1.0) / 2.0
    affine = maps.affine.copy()
    affine[:3, :3] *= ratio
    affine[:3, 3] = maps.affine[:3, :3] @ np.full(3, offset) + maps.affine[:3, 3]

    def resample(a: np.ndarray) -> np.ndarray:
        return ndi.affine_transform(
            a.astype(np.float32, copy=False),
            np.full(3, ratio),
            offset=offset,
            output_shape=shape,
            order=1,
            mode="nearest",
        )

    fields = {t: resample(getattr(maps, t)) for t in (*TISSUES, "t1")}
    return _frozen(
        affine=affine,
        shape=shape,
        brain=resample(maps.brain) >= 0.5,
        head=fields["air"] <= 0.5,
        **fields,
    )


def _frozen(**fields) -> TissueMaps:
    """A TissueMaps whose arrays are read-only (they are shared through the cache)."""
    for name in (*TISSUES, "t1"):
        fields[name] = fields[name].astype(np.float32, copy=False)
    for value in fields.values():
        if isinstance(value, np.ndarray):
            value.setflags(write=False)
    return TissueMaps(**fields)
