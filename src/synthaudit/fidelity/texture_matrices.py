"""PyRadiomics 3.1's texture matrices (``radiomics.cMatrices``) in numba: the same arrays, bit for bit.

PyRadiomics computes its GLCM, GLRLM, GLSZM and NGTDM in C (``radiomics/src/cmatrices.c``), recomputing
every voxel's index with ``%`` and ``/`` per voxel and angle, and growing the GLSZM's zones with a scalar
flood fill: most of the time of a feature extraction. The functions here take the C functions' arguments,
as PyRadiomics' feature classes pass them, and return what the C returns (values, dtype float64, shape,
C order; for the GLCM and GLRLM the same angles array):

* the case computed here: not voxel-based (no ``kernelRadius``/``voxels`` arguments), a 2D or 3D
  integer image with every grey level inside the (bool) mask in ``1..Ng``, a non-empty mask,
  ``force2D`` on or off (it only changes the angles, which come from ``cMatrices.generate_angles``
  itself, in the C's order). The C's bounding box is then the whole image (``set_bb``);
* anything else goes to PyRadiomics' C function unchanged (its result, or its error).

How the same bits come out: the image is copied once into an int32 array padded with a border of zeros
(grey level 0 = outside the mask; a neighbour outside the image and one outside the mask count alike
in every C rule used), and nested loops run over it with flat neighbour offsets.

* GLCM, GLRLM, GLSZM and the NGTDM's counts are whole numbers (exact in any order). The GLRLM counts,
  per angle, each masked voxel's place in its run (``rl``: 1 + its predecessor's when the predecessor has
  the same grey level), so the runs of length exactly L are ``count(rl == L) - count(rl == L + 1)``; its
  ``multiElement`` rule (an angle along which no line of the image holds two masked voxels gets its
  run-length-1 column zeroed) is checked on the lines as the C does. The GLSZM's zones are the
  components of equal grey level under the C's bidirectional angles (26-connected in 3D), by union-find.
* The NGTDM's sums of absolute differences are float sums: each voxel's ``|g - sum / count|`` (sum and
  count whole numbers, exact as doubles; from separable box sums where the angles fill the 3 x 3 x 3
  box) is added to its grey level's total in the C's raster order, without fast-math (no
  reassociation, no contraction).

:data:`REPLACEMENTS` maps the ``cMatrices`` names to these functions (tests/test_texture_matrices.py).
"""

from __future__ import annotations

import operator

import numpy as np
from numba import njit
from radiomics import _cmatrices as _cm

__all__ = ["calculate_glcm", "calculate_glrlm", "calculate_glszm", "calculate_ngtdm", "glszm_zones",
           "REPLACEMENTS", "ORIGINALS"]

# PyRadiomics' C functions, taken when this module is first imported: import it before swapping them
ORIGINALS = {name: getattr(_cm, name) for name in
             ("calculate_glcm", "calculate_glrlm", "calculate_glszm", "calculate_ngtdm", "generate_angles")}
_INT32_MAX = 2 ** 31 - 1


# ---------------------------------------------------------------------------------------------------------
# preparation: the padded grey-level image (0 outside the mask)

@njit(cache=True, nogil=True)
def _fill(image, mask, G, pz, py, px):
    """Copy the masked grey levels into G's interior; return (voxels in the mask, min, max grey level)."""
    nz, ny, nx = image.shape
    count = 0
    gmin = np.int64(1) << 62
    gmax = -(np.int64(1) << 62)
    for z in range(nz):
        for y in range(ny):
            for x in range(nx):
                if mask[z, y, x]:
                    g = np.int64(image[z, y, x])
                    count += 1
                    if g < gmin:
                        gmin = g
                    if g > gmax:
                        gmax = g
                    G[z + pz, y + py, x + px] = np.int32(g)
    return count, gmin, gmax


class _Delegate(Exception):
    """Not the case computed here: PyRadiomics' C function computes it."""


def _prepare(image, mask, Ng, angles_args):
    """The checks, the angles (cMatrices.generate_angles), the padded image and the flat offsets.

    ``angles_args``: (distances, bidirectional, force2D, force2Ddimension) for generate_angles.
    Raises _Delegate for anything outside the case computed here."""
    if not (isinstance(image, np.ndarray) and isinstance(mask, np.ndarray)):
        raise _Delegate
    if image.ndim not in (2, 3) or mask.shape != image.shape or mask.dtype != np.bool_:
        raise _Delegate
    if image.dtype.kind not in "iu" or min(image.shape) < 1 or max(image.shape) > _INT32_MAX:
        raise _Delegate
    if image.dtype not in (np.int32, np.int64):
        if image.dtype == np.uint64:
            raise _Delegate
        image = image.astype(np.int64)
    try:
        Ng = operator.index(Ng)
    except TypeError:
        raise _Delegate from None
    if not 1 <= Ng <= _INT32_MAX:
        raise _Delegate
    distances, bidirectional, force2D, force2Ddimension = angles_args
    try:
        angles = ORIGINALS["generate_angles"](np.array(image.shape), distances, bidirectional, force2D,
                                              force2Ddimension)
    except Exception:  # the C raises the same for the matrix
        raise _Delegate from None
    if angles.ndim != 2 or angles.shape[0] < 1 or angles.shape[1] != image.ndim:
        raise _Delegate
    if image.ndim == 2:  # as a 3D image of one plane, the angles not moving in it
        image, mask = image[None], mask[None]
        angles3 = np.concatenate([np.zeros((angles.shape[0], 1), np.int64), angles.astype(np.int64)], axis=1)
    else:
        angles3 = angles.astype(np.int64)
    pads = np.abs(angles3).max(axis=0)
    nz, ny, nx = image.shape
    G = np.zeros((nz + 2 * pads[0], ny + 2 * pads[1], nx + 2 * pads[2]), np.int32)
    count, gmin, gmax = _fill(image, mask, G, int(pads[0]), int(pads[1]), int(pads[2]))
    if G.size > _INT32_MAX or count == 0 or gmin < 1 or gmax > Ng:  # the C's errors (or its own handling): the C
        raise _Delegate
    sz, sy = G.shape[1] * G.shape[2], G.shape[2]
    offsets = (angles3[:, 0] * sz + angles3[:, 1] * sy + angles3[:, 2]).astype(np.int64)
    return G, (int(pads[0]), int(pads[1]), int(pads[2])), (nz, ny, nx), offsets, angles, Ng, count


# ---------------------------------------------------------------------------------------------------------
# kernels (all on the padded image G, C-contiguous, grey level 0 outside the mask)

@njit(cache=True, nogil=True)
def _glcm_kernel(G, pz, py, px, nz, ny, nx, offsets, P):
    """P[g - 1, h - 1, a] += 1 for every masked voxel g whose neighbour along angle a is masked (h)."""
    Gf = G.ravel()
    sy = G.shape[2]
    sz = G.shape[1] * sy
    Na = offsets.shape[0]
    for z in range(nz):
        for y in range(ny):
            base = (z + pz) * sz + (y + py) * sy + px
            for x in range(nx):
                v = base + x
                g = Gf[v]
                if g > 0:
                    for a in range(Na):
                        h = Gf[v + offsets[a]]
                        if h > 0:
                            P[g - 1, h - 1, a] += 1.0


@njit(cache=True, nogil=True)
def _line_has_two(G, pz, py, px, nz, ny, nx, off, seen):
    """Whether some line along the (raster-forward) flat offset ``off`` holds two masked voxels."""
    Gf = G.ravel()
    sy = G.shape[2]
    sz = G.shape[1] * sy
    seen[:] = 0
    for z in range(nz):
        for y in range(ny):
            base = (z + pz) * sz + (y + py) * sy + px
            for x in range(nx):
                v = base + x
                p = v - off
                s = Gf[p] > 0 or seen[p] != 0
                if s:
                    if Gf[v] > 0:
                        return True
                    seen[v] = 1
    return False


@njit(cache=True, nogil=True)
def _glrlm_kernel(G, pz, py, px, nz, ny, nx, offsets, Ng, Nr, P):
    """P[g - 1, L - 1, a]: the runs of grey level g and length L along angle a (PyRadiomics' layout)."""
    Gf = G.ravel()
    sy = G.shape[2]
    sz = G.shape[1] * sy
    Na = offsets.shape[0]
    W = Nr + 2
    rl = np.zeros(Gf.shape[0], np.int32)  # a masked voxel's place in its run, 1-based (others: unused)
    counts = np.zeros(Ng * W, np.int64)  # counts[(g - 1) * W + r]: masked voxels of grey level g with rl r
    seen = np.zeros(0, np.uint8)
    for a in range(Na):
        off = offsets[a]
        if off < 0:  # the same runs, walked the other way
            off = -off
        counts[:] = 0
        multi = False
        for z in range(nz):
            for y in range(ny):
                base = (z + pz) * sz + (y + py) * sy + px
                Gr = Gf[base:base + nx]
                Gp = Gf[base - off:base - off + nx]  # the predecessors (0: outside the mask or image)
                Rr = rl[base:base + nx]
                if off == 1 and sy > 1:  # along x (sy == 1: x is one voxel wide, and 1 is the next row)
                    r = 0
                    prev = Gf[base - 1]
                    for x in range(nx):
                        g = Gr[x]
                        r = r + 1 if g == prev else 1
                        Rr[x] = r
                        prev = g
                else:
                    Rp = rl[base - off:base - off + nx]  # written before in this pass (or 0: padding)
                    for x in range(nx):
                        Rr[x] = Rp[x] + 1 if Gr[x] == Gp[x] else 1
                for x in range(nx):
                    g = Gr[x]
                    if g > 0:
                        if Gp[x] > 0:
                            multi = True
                        counts[(g - 1) * W + Rr[x]] += 1
        if not multi:  # no two consecutive masked voxels: look for two on any line (the C's elements > 1)
            if seen.shape[0] == 0:
                seen = np.zeros(Gf.shape[0], np.uint8)
            multi = _line_has_two(G, pz, py, px, nz, ny, nx, off, seen)
        for g in range(Ng):
            for L in range(1, Nr + 1):
                P[g, L - 1, a] = np.float64(counts[g * W + L] - counts[g * W + L + 1])
            if not multi:
                P[g, 0, a] = 0.0


@njit(cache=True, nogil=True)
def _ngtdm_kernel(G, pz, py, px, nz, ny, nx, offsets, P):
    """P[g - 1] = (voxels, sum of |g - mean of masked neighbours|, g), summed in raster order as the C."""
    Gf = G.ravel()
    sy = G.shape[2]
    sz = G.shape[1] * sy
    Na = offsets.shape[0]
    for z in range(nz):
        for y in range(ny):
            base = (z + pz) * sz + (y + py) * sy + px
            for x in range(nx):
                v = base + x
                g = Gf[v]
                if g > 0:
                    count = 0
                    total = np.int64(0)
                    for a in range(Na):  # outside the mask h = 0: adds nothing
                        h = Gf[v + offsets[a]]
                        total += h
                        count += min(h, 1)
                    if count == 0:
                        diff = 0.0
                    else:
                        diff = np.float64(g) - np.float64(total) / np.float64(count)
                    if diff < 0:
                        diff = -diff
                    P[g - 1, 0] += 1.0
                    P[g - 1, 1] += diff


@njit(cache=True, nogil=True)
def _ngtdm_box_kernel(G, pz, py, px, nz, ny, nx, rz, ry, rx, P):
    """The NGTDM where the angles are every offset of the box of radius (rz, ry, rx) (each 0 or 1):
    the neighbours' sum and count from separable box sums of ``32 * g + (g > 0)`` (whole numbers; the
    count, at most 26, in the low 5 bits), then the C's per-voxel float steps in its raster order."""
    Gf = G.ravel()
    n = Gf.shape[0]
    sy = G.shape[2]
    sz = G.shape[1] * sy
    H = np.empty(n, np.int32)
    for i in range(n):
        g = Gf[i]
        H[i] = g * 32 + min(g, 1)
    A = np.zeros(n, np.int32)  # along x (rows and planes outside the image stay 0)
    for z in range(nz):
        for y in range(ny):
            base = (z + pz) * sz + (y + py) * sy + px
            Ar = A[base:base + nx]
            if rx == 1:
                H0 = H[base - 1:base - 1 + nx]
                H1 = H[base:base + nx]
                H2 = H[base + 1:base + 1 + nx]
                for x in range(nx):
                    Ar[x] = H0[x] + H1[x] + H2[x]
            else:
                Ar[:] = H[base:base + nx]
    B = np.zeros(n, np.int32)  # along y
    for z in range(nz):
        for y in range(ny):
            base = (z + pz) * sz + (y + py) * sy + px
            Br = B[base:base + nx]
            if ry == 1:
                A0 = A[base - sy:base - sy + nx]
                A1 = A[base:base + nx]
                A2 = A[base + sy:base + sy + nx]
                for x in range(nx):
                    Br[x] = A0[x] + A1[x] + A2[x]
            else:
                Br[:] = A[base:base + nx]
    T = np.empty(nx, np.int32)
    for z in range(nz):  # along z, less the voxel itself; then the C's float steps in raster order
        for y in range(ny):
            base = (z + pz) * sz + (y + py) * sy + px
            H1 = H[base:base + nx]
            B1 = B[base:base + nx]
            if rz == 1:
                B0 = B[base - sz:base - sz + nx]
                B2 = B[base + sz:base + sz + nx]
                for x in range(nx):
                    T[x] = B0[x] + B1[x] + B2[x] - H1[x]
            else:
                for x in range(nx):
                    T[x] = B1[x] - H1[x]
            G1 = Gf[base:base + nx]
            for x in range(nx):
                g = G1[x]
                if g > 0:
                    t = T[x]
                    count = t & 31
                    total = t >> 5
                    if count == 0:
                        diff = 0.0
                    else:
                        diff = np.float64(g) - np.float64(total) / np.float64(count)
                    if diff < 0:
                        diff = -diff
                    P[g - 1, 0] += 1.0
                    P[g - 1, 1] += diff


@njit(cache=True, nogil=True)
def _find(parent, v):
    while parent[v] != v:
        parent[v] = parent[parent[v]]  # path halving
        v = parent[v]
    return v


@njit(cache=True, nogil=True)
def _glszm_zones(G, pz, py, px, nz, ny, nx, back, left, nmask):
    """The zones (connected voxels of one grey level, neighbours along ``back`` and its mirror), by
    union-find in raster order: returns (grey level, size) of each zone, as two arrays.

    ``left`` (the 26-neighbourhood only; ``back`` then starts with the 4 raster-earlier neighbours at
    x + 1): a voxel joined to its left neighbour v - 1 needs only those 4, the others being neighbours
    of v - 1 already joined to it."""
    Gf = G.ravel()
    sy = G.shape[2]
    sz = G.shape[1] * sy
    Nb = back.shape[0]
    parent = np.empty(Gf.shape[0], np.int32)  # only masked voxels' entries are read
    for z in range(nz):
        for y in range(ny):
            base = (z + pz) * sz + (y + py) * sy + px
            for x in range(nx):
                v = base + x
                g = Gf[v]
                if g > 0:
                    parent[v] = v
                    rv = v
                    nb = Nb
                    if left and Gf[v - 1] == g:
                        rv = parent[v - 1]
                        if parent[rv] != rv:
                            rv = _find(parent, rv)
                        parent[v] = rv
                        nb = 4
                    for b in range(nb):
                        p = v - back[b]  # raster-earlier neighbour, already in the forest
                        if Gf[p] == g:
                            rp = parent[p]
                            if rp != rv:
                                rp = _find(parent, rp)
                                if rp != rv:
                                    if rp < rv:
                                        parent[rv] = rp
                                        rv = rp
                                    else:
                                        parent[rp] = rv
    size = np.zeros(Gf.shape[0], np.int32)
    roots = np.empty(nmask, np.int64)
    nzones = 0
    for z in range(nz):
        for y in range(ny):
            base = (z + pz) * sz + (y + py) * sy + px
            for x in range(nx):
                v = base + x
                if Gf[v] > 0:
                    r = _find(parent, v)
                    if r == v:
                        roots[nzones] = v
                        nzones += 1
                    size[r] += 1
    levels = np.empty(nzones, np.int32)
    sizes = np.empty(nzones, np.int32)
    for k in range(nzones):
        levels[k] = Gf[roots[k]]
        sizes[k] = size[roots[k]]
    return levels, sizes


@njit(cache=True, nogil=True)
def _glszm_fill(levels, sizes, P):
    for k in range(levels.shape[0]):
        P[levels[k] - 1, sizes[k] - 1] += 1.0


# ---------------------------------------------------------------------------------------------------------
# the cMatrices functions

def calculate_glcm(image, mask, distances, Ng, force2D, force2Ddimension, *voxel_args):
    """``cMatrices.calculate_glcm``: (P of shape (1, Ng, Ng, Na), angles)."""
    if voxel_args:
        return ORIGINALS["calculate_glcm"](image, mask, distances, Ng, force2D, force2Ddimension, *voxel_args)
    try:
        G, pads, shape, offsets, angles, ng, _ = _prepare(image, mask, Ng,
                                                          (distances, False, force2D, force2Ddimension))
    except _Delegate:
        return ORIGINALS["calculate_glcm"](image, mask, distances, Ng, force2D, force2Ddimension)
    P = np.zeros((1, ng, ng, offsets.shape[0]), np.float64)
    _glcm_kernel(G, *pads, *shape, offsets, P[0])
    return P, angles


def calculate_glrlm(image, mask, Ng, Nr, force2D, force2Ddimension, *voxel_args):
    """``cMatrices.calculate_glrlm``: (P of shape (1, Ng, Nr, Na), angles)."""
    if voxel_args:
        return ORIGINALS["calculate_glrlm"](image, mask, Ng, Nr, force2D, force2Ddimension, *voxel_args)
    try:
        try:
            nr = operator.index(Nr)
        except TypeError:
            raise _Delegate from None
        if not isinstance(image, np.ndarray) or nr < max(image.shape, default=0) or nr > _INT32_MAX:
            raise _Delegate  # a run could be longer than Nr: the C's own indexing
        G, pads, shape, offsets, angles, ng, _ = _prepare(image, mask, Ng,
                                                          (np.array([1]), False, force2D, force2Ddimension))
    except _Delegate:
        return ORIGINALS["calculate_glrlm"](image, mask, Ng, Nr, force2D, force2Ddimension)
    P = np.zeros((1, ng, nr, offsets.shape[0]), np.float64)
    _glrlm_kernel(G, *pads, *shape, offsets, ng, nr, P[0])
    return P, angles


def glszm_zones(image, mask, Ng, Ns, force2D, force2Ddimension) -> tuple[np.ndarray, np.ndarray] | None:
    """Every zone of ``cMatrices.calculate_glszm``'s matrix as (grey level, size) arrays, or None where
    the C must compute it: the matrix without its mostly empty columns (one per size up to the largest
    zone, 600 MB for a CT at 2 mm), for a caller that keeps only the filled ones."""
    try:
        try:
            ns = operator.index(Ns)
        except TypeError:
            raise _Delegate from None
        G, pads, shape, offsets, _, ng, nmask = _prepare(image, mask, Ng,
                                                         (np.array([1]), True, force2D, force2Ddimension))
        if not nmask <= ns <= _INT32_MAX:  # the C's buffers hold Ns voxels
            raise _Delegate
    except _Delegate:
        return None
    sy, sz = G.shape[2], G.shape[1] * G.shape[2]
    full = [dz * sz + dy * sy + dx for dz in (-1, 0, 1) for dy in (-1, 0, 1) for dx in (-1, 0, 1)
            if (dz, dy, dx) > (0, 0, 0)]  # the 13 raster-earlier neighbours v - offset
    left = sorted(offsets[offsets > 0].tolist()) == sorted(full)
    if left:  # the 26-neighbourhood: the 4 offsets to x + 1 first (see _glszm_zones)
        back = np.array([sz + sy - 1, sz - 1, sz - sy - 1, sy - 1]
                        + [o for o in full if o not in (sz + sy - 1, sz - 1, sz - sy - 1, sy - 1)], np.int64)
    else:
        back = np.ascontiguousarray(offsets[offsets > 0])
    return _glszm_zones(G, *pads, *shape, back, left, nmask)


def calculate_glszm(image, mask, Ng, Ns, force2D, force2Ddimension, *voxel_args):
    """``cMatrices.calculate_glszm``: P of shape (1, Ng, largest zone)."""
    zones = None if voxel_args else glszm_zones(image, mask, Ng, Ns, force2D, force2Ddimension)
    if zones is None:
        return ORIGINALS["calculate_glszm"](image, mask, Ng, Ns, force2D, force2Ddimension, *voxel_args)
    levels, sizes = zones
    P = np.zeros((1, operator.index(Ng), int(sizes.max())), np.float64)
    _glszm_fill(levels, sizes, P[0])
    return P


def _box_radius(G, pads, offsets):
    """(rz, ry, rx) when the angles are every nonzero offset of that box (each radius 0 or 1), else None."""
    if max(pads) > 1:
        return None
    sy, sz = G.shape[2], G.shape[1] * G.shape[2]
    box = {dz * sz + dy * sy + dx for dz in range(-pads[0], pads[0] + 1) for dy in range(-pads[1], pads[1] + 1)
           for dx in range(-pads[2], pads[2] + 1)} - {0}
    if len(offsets) != len(box) or set(offsets.tolist()) != box:
        return None
    return pads


def calculate_ngtdm(image, mask, distances, Ng, force2D, force2Ddimension, *voxel_args):
    """``cMatrices.calculate_ngtdm``: P of shape (1, Ng, 3)."""
    if voxel_args:
        return ORIGINALS["calculate_ngtdm"](image, mask, distances, Ng, force2D, force2Ddimension, *voxel_args)
    try:
        G, pads, shape, offsets, _, ng, _ = _prepare(image, mask, Ng, (distances, True, force2D, force2Ddimension))
    except _Delegate:
        return ORIGINALS["calculate_ngtdm"](image, mask, distances, Ng, force2D, force2Ddimension)
    P = np.zeros((1, ng, 3), np.float64)
    P[0, :, 2] = np.arange(1, ng + 1)
    radius = _box_radius(G, pads, offsets)
    if radius is not None and ng < 2 ** 21:  # 32 * (27 * Ng) fits an int32
        _ngtdm_box_kernel(G, *pads, *shape, *radius, P[0])
    else:
        _ngtdm_kernel(G, *pads, *shape, offsets, P[0])
    return P


def warm() -> None:
    """Compile (or load from numba's cache) every kernel on a small image: before a pool of workers is
    forked, so that they inherit the compiled code instead of each compiling it (seconds, on a fresh
    checkout) or reading the cache."""
    g = np.arange(1, 4 * 4 * 4 + 1, dtype=np.int64).reshape(4, 4, 4) % 3 + 1
    m = np.ones(g.shape, bool)
    calculate_glcm(g, m, np.array([1]), 3, False, 0)
    calculate_glrlm(g, m, 3, 4, False, 0)
    calculate_glszm(g, m, 3, int(m.sum()), False, 0)
    calculate_ngtdm(g, m, np.array([1]), 3, False, 0)


REPLACEMENTS = {
    "calculate_glcm": calculate_glcm,
    "calculate_glrlm": calculate_glrlm,
    "calculate_glszm": calculate_glszm,
    "calculate_ngtdm": calculate_ngtdm,
}


# ---------------------------------------------------------------------------------------------------------
# the GLCM's coefficients

def _positions(values: np.ndarray, keys: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """For each key, the (row, column) indices where ``values == key``, in C order: what NumPy makes of
    the boolean mask ``values == key`` when it indexes (its ``nonzero``), for every key in one sort."""
    flat = values.ravel()
    order = np.argsort(flat, kind="stable")  # equal values keep their C order
    ordered = flat[order]
    starts, ends = np.searchsorted(ordered, keys, "left"), np.searchsorted(ordered, keys, "right")
    return [np.unravel_index(order[a:b], values.shape) for a, b in zip(starts, ends)]


def glcm_coefficients(self) -> None:
    """PyRadiomics 3.1's ``RadiomicsGLCM._calculateCoefficients``, line for line, but for ``pxAddy`` and
    ``pxSuby``: PyRadiomics builds a boolean mask over all grey-level pairs for each of the 3 Ng sums and
    differences (Ng^3 comparisons: 3.4 of 9.1 s for a TOF slab with some 300 grey levels); here the pairs
    of every sum and difference come from one sort, as the index arrays NumPy makes of those masks, so
    the same elements are gathered in the same order and summed by the same call: the same bits."""
    Ng = self.coefficients['Ng']
    eps = np.spacing(1)

    NgVector = self.coefficients['grayLevels'].astype('float')
    i, j = np.meshgrid(NgVector, NgVector, indexing='ij', sparse=True)
    kValuesSum = np.arange(2, (Ng * 2) + 1, dtype='float')
    kValuesDiff = np.arange(0, Ng, dtype='float')

    px = self.P_glcm.sum(2, keepdims=True)
    py = self.P_glcm.sum(1, keepdims=True)
    ux = np.sum(i[None, :, :, None] * self.P_glcm, (1, 2), keepdims=True)
    uy = np.sum(j[None, :, :, None] * self.P_glcm, (1, 2), keepdims=True)

    P = self.P_glcm
    pxAddy = np.array([np.sum(P[:, r, c, :], 1) for r, c in _positions(i + j, kValuesSum)]).transpose((1, 0, 2))
    pxSuby = np.array([np.sum(P[:, r, c, :], 1)
                       for r, c in _positions(np.abs(i - j), kValuesDiff)]).transpose((1, 0, 2))

    HXY = (-1) * np.sum((self.P_glcm * np.log2(self.P_glcm + eps)), (1, 2))

    self.coefficients['eps'] = eps
    self.coefficients['i'] = i
    self.coefficients['j'] = j
    self.coefficients['kValuesSum'] = kValuesSum
    self.coefficients['kValuesDiff'] = kValuesDiff
    self.coefficients['px'] = px
    self.coefficients['py'] = py
    self.coefficients['ux'] = ux
    self.coefficients['uy'] = uy
    self.coefficients['pxAddy'] = pxAddy
    self.coefficients['pxSuby'] = pxSuby
    self.coefficients['HXY'] = HXY
