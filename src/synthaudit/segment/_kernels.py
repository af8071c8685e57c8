"""Numba kernels behind :func:`synthaudit.segment.measures.all_pairs_segmentation_measures`.

Every kernel releases the GIL (``nogil``), so the caller runs them for several
training volumes at once from a thread pool; none of them is parallel inside, which
keeps results bit-identical whatever the number of threads. Compiled code is cached
next to this file (``cache=True``): the first call in a fresh checkout compiles for
~20 s, later processes load the cache.

Distances are exact Euclidean distances between points of the corner grid (voxel
spacing applied), computed with the separable lower-envelope transform of Felzenszwalb
& Huttenlocher (2012): ``d^2 = min over sites of (s0 dx)^2 + (s1 dy)^2 + (s2 dz)^2`` is
minimised one axis at a time, which is exact because the three terms are independent.
Each pass is restricted to where it matters: the first runs only along axis-0 lines
holding sites, the second builds its envelopes only from those lines and evaluates
them only where output is needed, the last (along axis 2) only at the outputs asked
for. The sums are the same terms in another order than scipy's transform or a KD-tree:
results agree to ~1e-15 relative.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_JIT = dict(nogil=True, cache=True)
# Queries on one line up to which the last pass takes the minimum over the line
# directly (vectorised) rather than building the lower envelope.
_DIRECT_QUERIES = 8
# Voxels per run in :func:`scan` (one OR over its 64-bit words decides whether a run is
# background).
_RUN = 256


@njit(**_JIT)
def scan(volume, words, top, index_type, bucket_type):
    """One pass over a label map: value range, counts, bounding boxes, foreground voxels.

    Values above ``top`` share the bucket ``top + 1`` (foreground outside the
    classes). ``words`` is the map's memory as uint64 (as far as whole words go): a run
    of ``_RUN`` voxels of background, most of a label map, is recognised by one OR over
    its words, and within other runs each all-background word is skipped.

    Returns:
        ``(vmin, vmax, counts, lo, hi, fg_index, fg_bucket)``: the smallest value if
        negative (else 0), the largest value (0 if none is positive), counts per bucket
        0..top+1, the inclusive voxel bounding box ``lo[b]..hi[b]`` of each foreground
        bucket (``hi < lo`` where empty), and the flat indices (increasing) and buckets
        of the foreground voxels, of the types of ``index_type`` and ``bucket_type``.
    """
    n0, n1, n2 = volume.shape
    flat = volume.reshape(-1)
    size = flat.shape[0]
    run_words = _RUN * flat.itemsize // 8
    counts = np.zeros(top + 2, np.int64)
    lo = np.full((top + 2, 3), 2**62, np.int64)
    hi = np.full((top + 2, 3), -1, np.int64)
    vmin = np.int64(0)
    vmax = np.int64(0)
    # room for a sparse foreground; a denser one is collected again after the pass
    capacity = max(4096, size // 32)
    fg_index = np.empty(capacity, index_type.dtype)
    fg_bucket = np.empty(capacity, bucket_type.dtype)
    n_fg = 0
    for start in range(0, size, _RUN):
        stop = min(start + _RUN, size)
        if stop - start == _RUN and (start // _RUN + 1) * run_words <= words.shape[0]:
            bits = np.uint64(0)
            for word in words[start // _RUN * run_words:(start // _RUN + 1) * run_words]:
                bits |= word
            if bits == 0:
                continue
        step = 8 // flat.itemsize if flat.itemsize <= 8 else 1  # voxels per word
        for part in range(start, stop, step):
            part_stop = min(part + step, stop)
            if part_stop - part == step and (part + step) // step <= words.shape[0] and words[part // step] == 0:
                continue
            i = part // (n1 * n2)
            j = (part // n2) % n1
            k = part % n2 - 1
            for m in range(part, part_stop):
                k += 1
                if k == n2:
                    k = 0
                    j += 1
                    if j == n1:
                        j = 0
                        i += 1
                v = np.int64(flat[m])
                if v <= 0:
                    vmin = min(vmin, v)  # negative: refused by the caller
                    continue
                vmax = max(vmax, v)
                b = v if v <= top else top + 1
                if n_fg < capacity:
                    fg_index[n_fg] = m
                    fg_bucket[n_fg] = b
                n_fg += 1
                counts[b] += 1
                lo[b, 0] = min(lo[b, 0], i)
                hi[b, 0] = max(hi[b, 0], i)
                lo[b, 1] = min(lo[b, 1], j)
                hi[b, 1] = max(hi[b, 1], j)
                lo[b, 2] = min(lo[b, 2], k)
                hi[b, 2] = max(hi[b, 2], k)
    counts[0] = size - counts[1:].sum()
    if n_fg <= capacity:
        return vmin, vmax, counts, lo, hi, fg_index[:n_fg].copy(), fg_bucket[:n_fg].copy()
    fg_index = np.empty(n_fg, index_type.dtype)
    fg_bucket = np.empty(n_fg, bucket_type.dtype)
    n = 0
    for m in range(size):
        v = np.int64(flat[m])
        if v > 0:
            fg_index[n] = m
            fg_bucket[n] = v if v <= top else top + 1
            n += 1
    return vmin, vmax, counts, lo, hi, fg_index, fg_bucket


@njit(**_JIT)
def surface(fg_index, fg_bucket, shape, lo, hi, key, table):
    """Surfels of the voxels of bucket ``key`` (all foreground for key 0).

    Args:
        fg_index, fg_bucket: Foreground voxels of a map of ``shape`` (from :func:`scan`).
        lo, hi: A voxel box [lo, hi) holding every voxel of the mask.
        key: The class, or 0 for the whole foreground.
        table: Surfel area per neighbourhood code.

    Corner ``c`` sees voxels ``c - 1`` and ``c`` per axis; the voxel at offset (i, j, k)
    sets bit 4i + 2j + k of its code: each mask voxel sets its bit in its eight corners.
    The codes are then read in runs of eight (one uint64), skipping empty runs; surfels
    come in C order of their corner coordinates (as ``np.argwhere``).

    Returns:
        ``(coords (N, 3) int64, areas (N,) float64)``.
    """
    n1, n2 = shape[1], shape[2]
    m0, m1, m2 = hi[0] - lo[0] + 1, hi[1] - lo[1] + 1, hi[2] - lo[2] + 1
    size = m0 * m1 * m2
    flat = np.zeros(-(-size // 8) * 8, np.uint8)
    codes = flat[:size].reshape((m0, m1, m2))
    n_mask = 0
    for m in range(fg_index.shape[0]):
        if key != 0 and fg_bucket[m] != key:
            continue
        n_mask += 1
        index = fg_index[m]
        i = index // (n1 * n2) - lo[0]
        j = (index // n2) % n1 - lo[1]
        k = index % n2 - lo[2]
        # corner (i + 1 - di, ...) sees this voxel at offset (di, dj, dk)
        codes[i + 1, j + 1, k + 1] |= 1
        codes[i + 1, j + 1, k] |= 2
        codes[i + 1, j, k + 1] |= 4
        codes[i + 1, j, k] |= 8
        codes[i, j + 1, k + 1] |= 16
        codes[i, j + 1, k] |= 32
        codes[i, j, k + 1] |= 64
        codes[i, j, k] |= 128
    words = flat.view(np.uint64)
    coords = np.empty((8 * n_mask, 3), np.int64)
    areas = np.empty(8 * n_mask)
    n = 0
    for w in range(words.shape[0]):
        if words[w] == 0:
            continue
        for c in range(8 * w, min(8 * w + 8, size)):
            code = flat[c]
            if code != 0 and code != 255:
                coords[n, 0] = lo[0] + c // (m1 * m2)
                coords[n, 1] = lo[1] + (c // m2) % m1
                coords[n, 2] = lo[2] + c % m2
                areas[n] = table[code]
                n += 1
    return coords[:n].copy(), areas[:n].copy()


@njit(**_JIT)
def dice_overlaps(labels, row_of, fg_index, fg_bucket, top):
    """Overlaps of one label map's foreground with every synthetic map.

    Args:
        labels, row_of: The synthetic maps' buckets, one row of S per voxel where any
            of them has foreground (``row_of[voxel]``, -1 elsewhere).
        fg_index, fg_bucket: The map's foreground voxels (from :func:`scan`).
        top: Largest class; larger values are bucket top + 1.

    Returns:
        ``(binary (S,), per_bucket (top + 2, S))``: foreground voxels shared, and
        voxels with the same bucket.
    """
    n_synthetic = labels.shape[1]
    binary = np.zeros(n_synthetic, np.int64)
    same = np.zeros((top + 2, n_synthetic), np.int64)
    for m in range(fg_index.shape[0]):
        r = row_of[fg_index[m]]
        if r < 0:
            continue
        b = fg_bucket[m]
        row = labels[r]
        counts = same[b]
        for s in range(n_synthetic):
            binary[s] += row[s] != 0
            counts[s] += row[s] == b
    return binary, same


# ---------------------------------------------------------------- distance transforms


@njit(inline="always")
def _envelope(pos, val, n, w, vp, vv, zb):
    """Lower envelope of ``val[q] + w (x - pos[q])^2``, q < n (pos increasing, n >= 1).

    Fills ``vp``/``vv`` (the parabolas kept) and ``zb`` (left boundary of each; zb[m]
    = +inf after the last) and returns their number m.
    """
    k = 0
    vp[0] = pos[0]
    vv[0] = val[0]
    zb[0] = -np.inf
    zb[1] = np.inf
    for q in range(1, n):
        p = pos[q]
        g = val[q] + w * p * p
        while True:
            r = vp[k]
            s = (g - (vv[k] + w * r * r)) / (2.0 * w * (p - r))
            if s <= zb[k]:
                k -= 1
            else:
                break
        k += 1
        vp[k] = p
        vv[k] = val[q]
        zb[k] = s
        zb[k + 1] = np.inf
    return k + 1


@njit(**_JIT)
def _site_lines(sites):
    """The sites' bounding box and their axis-0 lines (a counting sort by (z, y)).

    Returns:
        ``(slo, shi, line_y, z_start, pos_start, pos)``: lines with at least one site,
        ordered by (z, y); those of box layer ``z - slo[2]`` are ``z_start[z]:z_start[z
        + 1]``; line ``e`` lies at y = ``line_y[e]`` and holds sites at x = ``pos[
        pos_start[e]:pos_start[e + 1]]`` (increasing).
    """
    n = sites.shape[0]
    slo = np.empty(3, np.int64)
    shi = np.empty(3, np.int64)
    for a in range(3):
        slo[a] = sites[:, a].min()
        shi[a] = sites[:, a].max() + 1
    ny, nz = shi[1] - slo[1], shi[2] - slo[2]
    start = np.zeros(ny * nz + 1, np.int64)
    for m in range(n):
        start[(sites[m, 2] - slo[2]) * ny + sites[m, 1] - slo[1] + 1] += 1
    n_lines = 0
    for key in range(ny * nz):
        n_lines += start[key + 1] > 0
        start[key + 1] += start[key]
    pos = np.empty(n, np.int64)
    fill = start[:-1].copy()
    for m in range(n):
        key = (sites[m, 2] - slo[2]) * ny + sites[m, 1] - slo[1]
        pos[fill[key]] = sites[m, 0]
        fill[key] += 1
    line_y = np.empty(n_lines, np.int64)
    z_start = np.empty(nz + 1, np.int64)
    pos_start = np.empty(n_lines + 1, np.int64)
    e = 0
    for k in range(nz):
        z_start[k] = e
        for j in range(ny):
            a, b = start[k * ny + j], start[k * ny + j + 1]
            if a == b:
                continue
            for i in range(a + 1, b):  # sites in C order are sorted already
                x = pos[i]
                h = i - 1
                while h >= a and pos[h] > x:
                    pos[h + 1] = pos[h]
                    h -= 1
                pos[h + 1] = x
            line_y[e] = slo[1] + j
            pos_start[e] = a
            e += 1
    z_start[nz] = e
    pos_start[e] = n
    return slo, shi, line_y, z_start, pos_start, pos


@njit(**_JIT)
def _first_pass(pos_start, pos, x0, x1, s0):
    """``(s0 dx)^2`` to the nearest site of each axis-0 line, for x in [x0, x1): (X, lines)."""
    n_lines = pos_start.shape[0] - 1
    f = np.empty((x1 - x0, n_lines))
    nearest = pos_start[:-1].copy()  # per line: the site nearest to the current x
    for x in range(x0, x1):
        row = f[x - x0]
        for e in range(n_lines):
            p = nearest[e]
            last = pos_start[e + 1] - 1
            while p < last and pos[p + 1] - x <= x - pos[p]:
                p += 1
            nearest[e] = p
            d = (x - pos[p]) * s0
            row[e] = d * d
    return f


@njit(**_JIT)
def _map_second_pass(sites, g0, g1, s0, s1):
    """Passes along axes 0 and 1 of a full-grid transform: (g0, g1, nz) and the box's z0.

    Entries are ``min over sites in layer z of (s0 dx)^2 + (s1 dy)^2``, +inf for a
    layer of the sites' box without sites.
    """
    slo, shi, line_y, z_start, pos_start, pos = _site_lines(sites)
    f1 = _first_pass(pos_start, pos, 0, g0, s0)
    nz = shi[2] - slo[2]
    n_max = line_y.shape[0] + 1
    p = np.empty(n_max)
    val = np.empty(n_max)
    vp = np.empty(n_max)
    vv = np.empty(n_max)
    zb = np.empty(n_max + 1)
    f2 = np.empty((g0, g1, nz))
    w1 = s1 * s1
    for x in range(g0):
        row = f1[x]
        for k in range(nz):
            a, b = z_start[k], z_start[k + 1]
            if a == b:
                f2[x, :, k] = np.inf
                continue
            for e in range(a, b):
                p[e - a] = line_y[e]
                val[e - a] = row[e]
            _envelope(p, val, b - a, w1, vp, vv, zb)
            q = 0
            for y in range(g1):
                while zb[q + 1] < y:
                    q += 1
                d = (y - vp[q]) * s1
                f2[x, y, k] = vv[q] + d * d
    return f2, slo[2]


@njit(**_JIT)
def distance_maps(coords, starts, g0, g1, g2, s0, s1, s2, out, column):
    """Full-grid distance maps (mm) of several site sets, written as columns of ``out``.

    Set ``b`` (sites ``coords[starts[b]:starts[b + 1]]``, at least one) fills
    ``out[:, column + b]``; ``out`` is (g0 * g1 * g2, C), one row per grid point in C
    order, so that a gather at one point reads all maps at once. The maps are finished
    one x-plane at a time and copied in together, which writes whole rows of ``out``.
    """
    n_maps = starts.shape[0] - 1
    passes = [_map_second_pass(coords[starts[b]:starts[b + 1]], g0, g1, s0, s1) for b in range(n_maps)]
    nz_max = 1
    for b in range(n_maps):
        nz_max = max(nz_max, passes[b][0].shape[2])
    p = np.empty(nz_max)
    val = np.empty(nz_max)
    vp = np.empty(nz_max)
    vv = np.empty(nz_max)
    zb = np.empty(nz_max + 1)
    plane = np.empty((n_maps, g1, g2))
    w2 = s2 * s2
    for x in range(g0):
        for b in range(n_maps):
            f2, z0 = passes[b]
            nz = f2.shape[2]
            for y in range(g1):
                column_b = f2[x, y]
                n = 0
                for k in range(nz):
                    if column_b[k] < np.inf:
                        p[n] = z0 + k
                        val[n] = column_b[k]
                        n += 1
                _envelope(p, val, n, w2, vp, vv, zb)
                line = plane[b, y]
                q = 0
                for z in range(g2):
                    while zb[q + 1] < z:
                        q += 1
                    d = (z - vp[q]) * s2
                    line[z] = vv[q] + d * d
                for z in range(g2):
                    line[z] = np.sqrt(line[z])
        base = x * g1 * g2
        for y in range(g1):
            for z in range(g2):
                row = out[base + y * g2 + z]
                for b in range(n_maps):
                    row[column + b] = plane[b, y, z]


@njit(**_JIT)
def query_distances(sites, qlo, qhi, line_x, line_y, line_start, x_lines, qz, s0, s1, s2, out):
    """Distance (mm) from each query point to the nearest site, in the queries' order.

    Queries are grouped by axis-2 line, the lines sorted by (x, y): line ``l`` at
    (line_x[l], line_y[l]) holds queries ``line_start[l]:line_start[l + 1]`` with
    increasing z ``qz``; the lines at x are ``x_lines[x - qlo[0]]:x_lines[x - qlo[0] +
    1]``. ``qlo``/``qhi``: the queries' box.
    """
    slo, shi, site_y, z_start, pos_start, pos = _site_lines(sites)
    f1 = _first_pass(pos_start, pos, qlo[0], qhi[0], s0)
    nz = shi[2] - slo[2]
    n_max = max(nz, site_y.shape[0]) + 1
    p = np.empty(n_max)
    val = np.empty(n_max)
    vp = np.empty(n_max)
    vv = np.empty(n_max)
    zb = np.empty(n_max + 1)
    # second pass, along axis 1, only where a line of queries lies
    n_lines = line_x.shape[0]
    f2 = np.empty((n_lines, nz))
    w1 = s1 * s1
    for xi in range(qhi[0] - qlo[0]):
        l0, l1 = x_lines[xi], x_lines[xi + 1]
        if l0 == l1:
            continue
        row = f1[xi]
        for k in range(nz):
            a, b = z_start[k], z_start[k + 1]
            if a == b:
                for line in range(l0, l1):
                    f2[line, k] = np.inf
                continue
            for e in range(a, b):
                p[e - a] = site_y[e]
                val[e - a] = row[e]
            _envelope(p, val, b - a, w1, vp, vv, zb)
            q = 0
            for line in range(l0, l1):
                y = line_y[line]
                while zb[q + 1] < y:
                    q += 1
                d = (y - vp[q]) * s1
                f2[line, k] = vv[q] + d * d
    # last pass, along axis 2, at the queries (squared distances, then one sqrt pass)
    w2 = s2 * s2
    for line in range(n_lines):
        column = f2[line]
        start, stop = line_start[line], line_start[line + 1]
        if stop - start <= _DIRECT_QUERIES:
            # few queries on the line: the minimum over the column directly
            for i in range(start, stop):
                z0 = qz[i] - slo[2]
                best = np.inf
                for k in range(nz):
                    d = (z0 - k) * s2
                    v = column[k] + d * d
                    best = v if v < best else best
                out[i] = best
            continue
        n = 0
        for k in range(nz):
            g = column[k]
            if g < np.inf:
                p[n] = slo[2] + k
                val[n] = g
                n += 1
        _envelope(p, val, n, w2, vp, vv, zb)
        q = 0
        for i in range(start, stop):
            z = qz[i]
            while zb[q + 1] < z:
                q += 1
            d = (z - vp[q]) * s2
            out[i] = vv[q] + d * d
    for i in range(out.shape[0]):
        out[i] = np.sqrt(out[i])


# ---------------------------------------------------------------- reductions


@njit(**_JIT)
def weighted_point_sums(maps, index, weights, n_columns):
    """``sum_j weights[j] * maps[index[j], c]`` for each column c < n_columns."""
    result = np.zeros(n_columns)
    for j in range(index.shape[0]):
        row = maps[index[j]]
        w = weights[j]
        for c in range(n_columns):
            result[c] += w * row[c]
    return result


@njit(**_JIT)
def segment_sums(values, index, weights, starts, stops):
    """``sum_i values[index[i]] * weights[i]`` over each segment [starts[r], stops[r])."""
    result = np.zeros(starts.shape[0])
    for r in range(starts.shape[0]):
        total = 0.0
        for i in range(starts[r], stops[r]):
            total += values[index[i]] * weights[i]
        result[r] = total
    return result


@njit(**_JIT)
def area_percentile(distances, areas, fraction):
    """Area-weighted percentile as :meth:`measures._Surface.percentile`, without a full sort.

    The distance of the first surfel, in order of (distance, area), whose cumulative
    area fraction reaches ``fraction``. Distances are binned (bins ordered like the
    distances), the bin where the cumulative area crosses is found from per-bin sums,
    and only that bin (rarely the next ones, for rounding) is sorted.
    """
    n = distances.shape[0]
    total = 0.0
    dmin = distances[0]
    dmax = distances[0]
    for i in range(n):
        total += areas[i]
        d = distances[i]
        if d < dmin:
            dmin = d
        if d > dmax:
            dmax = d
    if dmin == dmax:
        return dmin
    n_bins = max(16, n // 4)
    scale = n_bins / (dmax - dmin)
    if not scale < np.inf:  # distances equal up to a few ulp: one bin, sorted
        scale = 0.0
    bins = np.empty(n, np.int64)
    bin_area = np.zeros(n_bins)
    for i in range(n):
        b = min(int((distances[i] - dmin) * scale), n_bins - 1)
        bins[i] = b
        bin_area[b] += areas[i]
    below = 0.0
    last = dmax
    b = 0
    while b < n_bins - 1 and (below + bin_area[b]) / total < fraction:
        below += bin_area[b]
        b += 1
    while b < n_bins:
        members = np.flatnonzero(bins == b)
        if members.shape[0]:
            d = distances[members]
            a = areas[members]
            # sort by (distance, area), as np.lexsort((areas, distances))
            idx = np.argsort(a, kind="mergesort")
            idx = idx[np.argsort(d[idx], kind="mergesort")]
            for i in idx:
                below += a[i]
                if below / total >= fraction:
                    return d[i]
            last = d[idx[-1]]
        b += 1
    return last


@njit(**_JIT)
def hd95_rows(corner_distances, corner_of, areas, starts, stops, rows, maps, index, target_areas, fraction):
    """Whole-foreground HD95 between one training surface and the synthetic ``rows``.

    Per row: the larger of the two directed area-weighted percentiles, synthetic ->
    training from ``corner_distances`` (see ``query_distances``) and training ->
    synthetic from the distance maps at the training surfels' corners ``index``.
    """
    result = np.empty(rows.shape[0])
    for r in range(rows.shape[0]):
        row = rows[r]
        a, b = starts[row], stops[row]
        forward = np.empty(b - a)
        for i in range(a, b):
            forward[i - a] = corner_distances[corner_of[i]]
        backward = np.empty(index.shape[0])
        for j in range(index.shape[0]):
            backward[j] = maps[index[j], row]
        result[r] = max(area_percentile(forward, areas[a:b], fraction),
                        area_percentile(backward, target_areas, fraction))
    return result
