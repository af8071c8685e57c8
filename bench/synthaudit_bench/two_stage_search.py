"""Two-stage nearest-neighbour search, and exact streaming/merging of top-n lists.

RELICT compares every synthetic volume with every training volume and then, per
synthetic volume, uses only the n closest training volumes (the distance ratio is
``d(closest) / mean(d of the n closest)``). At 10,000 synthetic x 100,000 training
volumes the exact image-level all-pairs (MAE, RMSE, 1-SSIM, Dice, ASD on whole
volumes) is too expensive. Since only the n closest count, the search can be split:

* **Stage 1 (cheap, approximate).** Every volume gets a cheap vector (a feature
  embedding, e.g. 512-d, or a downsampled image flattened). An inverted-file index
  (:class:`IVFIndex`, k-means lists) proposes K candidate training volumes per
  synthetic volume by vector distance, looking only at the ``n_probe`` lists nearest
  to the query: roughly ``n_probe / n_lists`` of the all-pairs work.
* **Stage 2 (expensive, exact).** The caller's exact measure runs only on the S x K
  candidate pairs, and the n best of them are kept (:func:`two_stage_search`).

The result is exact whenever the exact top-n are among the K candidates;
:func:`recall_of_top_n` measures how often that holds against an exact run on a
subset, which is how K and ``n_probe`` should be chosen for a data set.

The module also provides the exact building blocks that the sharded all-pairs
workflow needs whatever the search strategy:

* :class:`TopN` keeps the n best columns per row while column blocks stream by, in
  O(rows x (n + block)) memory, so the full S x T matrix never has to exist.
* :func:`merge_top_n` merges top-n lists computed on disjoint column shards (the
  gather job after a scatter over training shards).

Both use one total order - value, then column index, NaN after every number,
padding after NaN - so ties are broken by the smaller column index and the result
is bitwise the same whatever the block size, block order or sharding. That makes
sharded and unsharded runs comparable and the closest volume unambiguous (the same
rule as :func:`.ratio.distance_ratio`: lowest training index on ties).

Everything runs in torch on a device chosen by :func:`synthaudit.devices.resolve_device`
(CPU here, CUDA on clusters); inputs may be numpy arrays or tensors, results are
numpy arrays.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from synthaudit.devices import resolve_device

METRICS = ("l2", "cosine")

# Elements of the (rows x candidates x dim) gather used to recompute exact
# distances; bounds that temporary at ~32 MB (float32) whatever the sizes.
_RERANK_ELEMENTS = 8_000_000


# --------------------------------------------------------------------------------------
# Exact top-n selection under one deterministic total order
# --------------------------------------------------------------------------------------

def _lexsort(key: torch.Tensor, cls: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """Permutation along dim 1 sorting rows by (cls, key, idx), via three stable sorts."""
    perm = torch.argsort(idx, dim=1, stable=True)
    perm = perm.gather(1, torch.argsort(key.gather(1, perm), dim=1, stable=True))
    perm = perm.gather(1, torch.argsort(cls.gather(1, perm), dim=1, stable=True))
    return perm


# Packed sort keys: class (2 bits) | order-preserving float32 bits (32) | index (29).
_IDX_BITS = 29
_IDX_LIMIT = 1 << _IDX_BITS
_PACKABLE = (torch.float32, torch.float16, torch.bfloat16)


def _packed_keys(values: torch.Tensor, indices: torch.Tensor, largest: bool) -> torch.Tensor:
    """One int64 per entry whose integer order is the module's total order.

    The float32 bit pattern is mapped to an unsigned integer with the same order
    (negative floats reversed), -0.0 is folded onto +0.0 so that the two tie like
    the floats do; NaN (class 1) and padding (class 2, index < 0) go above every
    number. Keys are unique for distinct indices, so ``topk`` has no ties to break.
    """
    key = values.to(torch.float32)
    key = (-key if largest else key) + 0.0  # x + 0.0 turns -0.0 into +0.0
    bits = key.view(torch.int32).to(torch.int64)
    ordered = torch.where(bits >= 0, bits + (1 << 31), -1 - bits)
    packed = (ordered << _IDX_BITS) | indices.clamp(min=0)
    empty = indices < 0
    special = torch.isnan(key) | empty
    if bool(special.any()):
        cls = torch.where(empty, 2, 1).to(torch.int64) << 61
        packed = torch.where(special, cls | indices.clamp(min=0), packed)
    return packed


def _select(values: torch.Tensor, indices: torch.Tensor, n: int,
            largest: bool, small_indices: bool | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The first ``min(n, width)`` entries of each row in the module's total order.

    Order: numbers ascending (descending if ``largest``), then NaN, then padding
    (index < 0); ties by the smaller index. Columns must be distinct within a row
    (padding excepted) for the result to be unique.

    float32/16 values with indices < 2**29 (every practical training set): one
    ``topk`` on packed integer keys (:func:`_packed_keys`), which are unique, so the
    choice is exact and deterministic in one pass. Otherwise (float64): ``topk`` on
    the values picks n entries, which is exact as a *set* unless the n-th value is
    tied with an entry left out (topk's choice among ties is unspecified); only rows
    with such a tie pay for a full sort, and the n picked entries are then sorted by
    the total order, so the output never depends on topk's tie choice.

    Args:
        small_indices: Whether all indices are < 2**29, if the caller knows
            (saves a pass); None: checked here.
    """
    r, w = values.shape
    m = min(n, w)
    if r == 0 or m == 0:
        return values[:, :m], indices[:, :m]
    if values.dtype in _PACKABLE:
        if small_indices is None:
            small_indices = int(indices.max()) < _IDX_LIMIT
        if small_indices:
            packed = _packed_keys(values, indices, largest)
            if w <= m:
                pos = torch.sort(packed, dim=1).indices
            else:
                pos = torch.topk(packed, m, dim=1, largest=False, sorted=True).indices
            return values.gather(1, pos), indices.gather(1, pos)
    empty = indices < 0
    nan = torch.isnan(values) & ~empty
    key = (-values if largest else values).masked_fill(nan | empty, math.inf)
    cls = nan.to(torch.int8) + 2 * empty.to(torch.int8)
    if w <= m:
        pos = _lexsort(key, cls, indices)
    else:
        top, pos = torch.topk(key, m, dim=1, largest=False, sorted=False)
        threshold = top.max(dim=1, keepdim=True).values
        tied = (key <= threshold).sum(dim=1) > m
        if bool(tied.any()):
            rows = tied.nonzero().squeeze(1)
            full = _lexsort(key[rows], cls[rows], indices[rows])[:, :m]
            pos = pos.clone()
            pos[rows] = full
        order = _lexsort(key.gather(1, pos), cls.gather(1, pos), indices.gather(1, pos))
        pos = pos.gather(1, order)
    return values.gather(1, pos), indices.gather(1, pos)


def _fill_value(largest: bool) -> float:
    """Value of padding entries: the worst number, +inf (or -inf when largest)."""
    return -math.inf if largest else math.inf


def _as_tensor(x: Any, device: torch.device | None = None, name: str = "array") -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        t = x
    else:
        arr = np.asarray(x)
        if arr.dtype == object:
            raise ValueError(f"{name} must be numeric, got an object array")
        t = torch.from_numpy(np.ascontiguousarray(arr))
    return t if device is None else t.to(device)


def _as_float(t: torch.Tensor, name: str) -> torch.Tensor:
    if t.dtype == torch.bool or t.is_complex():
        raise ValueError(f"{name} must be real numbers, got dtype {t.dtype}")
    return t if t.is_floating_point() else t.to(torch.float64)


def _as_index(t: torch.Tensor, name: str) -> torch.Tensor:
    if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
        raise ValueError(f"{name} must be integers, got dtype {t.dtype}")
    return t.to(torch.int64)


def _to_numpy(t: torch.Tensor) -> np.ndarray:
    if t.dtype in (torch.bfloat16,):
        t = t.to(torch.float32)
    return t.detach().cpu().numpy()


class TopN:
    """Exact streaming top-n per row over column blocks.

    The full rows x columns matrix (e.g. synthetic x training distances) never has
    to exist: each block of columns is merged into the n best seen so far, so
    memory is O(rows x (n + block)). Use it inside the blocked all-pairs loops
    (:func:`exact_search`, the IVF lists) and whenever a distance matrix is too
    large to keep.

    Order: ascending values (descending with ``largest=True``, e.g. for similarities),
    ties broken by the smaller column index, NaN after every number. This is a total
    order on (value, column), so the result is the same - bitwise - whatever the
    block size, the block order or the sharding of the columns.

    Args:
        n_rows: Number of rows (e.g. synthetic volumes).
        n: How many columns to keep per row (>= 1).
        largest: Keep the largest values instead of the smallest.
        device: Where the state lives; default: the device of the first block
            (CPU for numpy input). Later blocks are moved there.

    Columns must be distinct across all updates of a row (each training volume
    seen once per row); duplicates within one block raise ValueError, duplicates
    across blocks are not detected.
    """

    def __init__(self, n_rows: int, n: int, largest: bool = False, device: Any = None):
        if isinstance(n_rows, bool) or not isinstance(n_rows, (int, np.integer)) or n_rows < 0:
            raise ValueError(f"n_rows must be a non-negative integer, got {n_rows!r}")
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"n must be an integer >= 1, got {n!r}")
        self.n_rows = int(n_rows)
        self.n = int(n)
        self.largest = bool(largest)
        self.device = None if device is None else torch.device(device)
        self._values: torch.Tensor | None = None
        self._indices: torch.Tensor | None = None
        self._seen: torch.Tensor | None = None
        self._max_index = -1

    # -- state --------------------------------------------------------------------
    def _init_state(self, dtype: torch.dtype, device: torch.device) -> None:
        self.device = device
        self._values = torch.empty((self.n_rows, 0), dtype=dtype, device=device)
        self._indices = torch.empty((self.n_rows, 0), dtype=torch.int64, device=device)
        self._seen = torch.zeros(self.n_rows, dtype=torch.int64, device=device)

    def _rows(self, rows: Any, n_block_rows: int) -> slice | torch.Tensor:
        if rows is None:
            rows = slice(None)
        if isinstance(rows, slice):
            count = len(range(self.n_rows)[rows])
            if count != n_block_rows:
                raise ValueError(f"values has {n_block_rows} rows but rows={rows} selects {count}")
            return rows
        r = _as_index(_as_tensor(rows, name="rows"), "rows")
        if r.ndim != 1:
            raise ValueError(f"rows must be a slice or a 1D index array, got shape {tuple(r.shape)}")
        if r.numel() != n_block_rows:
            raise ValueError(f"values has {n_block_rows} rows but rows has {r.numel()} entries")
        if r.numel():
            if int(r.min()) < 0 or int(r.max()) >= self.n_rows:
                raise ValueError(f"rows must lie in [0, {self.n_rows}), got [{int(r.min())}, {int(r.max())}]")
            if torch.unique(r).numel() != r.numel():
                raise ValueError("rows contains duplicate row indices")
        return r.to(self.device)

    def update(self, values: Any, columns: Any, rows: Any = None) -> "TopN":
        """Merge one block of columns into the running top-n.

        Args:
            values: (rows, block) values of this block (numpy or torch).
            columns: (block,) global column index of each block column (>= 0).
            rows: Which rows the block covers: None (all), a slice, or a 1D index
                array without duplicates; ``values`` has one row per selected row.

        Returns:
            self, to allow chaining.
        """
        v = _as_float(_as_tensor(values, self.device, "values"), "values")
        if v.ndim != 2:
            raise ValueError(f"values must be 2D (rows, block), got shape {tuple(v.shape)}")
        c = _as_index(_as_tensor(columns, v.device, "columns"), "columns")
        if c.ndim != 1 or c.numel() != v.shape[1]:
            raise ValueError(f"columns must be 1D with one entry per block column ({v.shape[1]}), "
                             f"got shape {tuple(c.shape)}")
        if c.numel():
            if int(c.min()) < 0:
                raise ValueError("columns must be non-negative global column indices")
            if torch.unique(c).numel() != c.numel():
                raise ValueError("columns contains duplicate column indices")
        if self._values is None:
            self._init_state(v.dtype, v.device)
        r = self._rows(rows, v.shape[0])
        self._update(v, c, r)
        return self

    def _update(self, v: torch.Tensor, c: torch.Tensor, rows: slice | torch.Tensor) -> None:
        """Unchecked update (used internally where columns are known to be valid)."""
        if self._values is None:
            self._init_state(v.dtype, v.device)
        b = v.shape[1]
        if b == 0 or v.shape[0] == 0:
            return
        dtype = torch.promote_types(self._values.dtype, v.dtype)
        if dtype != self._values.dtype:
            self._values = self._values.to(dtype)
        v = v.to(device=self.device, dtype=dtype)
        c = c.to(self.device)
        cur_v, cur_i = self._values[rows], self._indices[rows]
        v, cols = self._prefilter(v, c, cur_v, cur_i)
        cand_v = torch.cat([cur_v, v], dim=1)
        cand_i = torch.cat([cur_i, cols], dim=1)
        small = None
        if cand_v.dtype in _PACKABLE:
            self._max_index = max(self._max_index, int(c.max()))
            small = self._max_index < _IDX_LIMIT
        sel_v, sel_i = _select(cand_v, cand_i, self.n, self.largest, small)
        self._seen[rows] += b
        width = self._values.shape[1]
        if width < self.n:  # the width only grows until it reaches n: skip the sync after
            width = min(self.n, int(self._seen.max()))
        fill = _fill_value(self.largest)
        if width > self._values.shape[1]:
            grow = width - self._values.shape[1]
            self._values = torch.cat([self._values, self._values.new_full((self.n_rows, grow), fill)], 1)
            self._indices = torch.cat([self._indices, self._indices.new_full((self.n_rows, grow), -1)], 1)
        sel_v, sel_i = sel_v[:, :width], sel_i[:, :width]
        if sel_v.shape[1] < width:
            pad = width - sel_v.shape[1]
            sel_v = torch.cat([sel_v, sel_v.new_full((sel_v.shape[0], pad), fill)], 1)
            sel_i = torch.cat([sel_i, sel_i.new_full((sel_i.shape[0], pad), -1)], 1)
        self._values[rows] = sel_v
        self._indices[rows] = sel_i

    def _prefilter(self, v: torch.Tensor, c: torch.Tensor, cur_v: torch.Tensor,
                   cur_i: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Drop block entries that cannot enter the top-n, before the exact selection.

        An entry can only enter if it is at least as good (``<=``, or ``>=`` when
        largest; equal ones may still win on the index) as the row's current n-th
        entry when the row holds n numbers, and as the n-th best of the block itself
        (a float ``topk``, used while a row is not yet full). NaN never passes a
        finite bound. One comparison pass then shrinks the block to the most passing
        entries of any row, so the exact (packed-key) selection runs on n + few
        columns instead of n + block. Rows without a finite bound keep everything.

        Returns:
            (values, per-row column indices) of the kept block entries.
        """
        b, n = v.shape[1], self.n
        key = -v if self.largest else v
        inf = torch.full((v.shape[0], 1), math.inf, dtype=v.dtype, device=v.device)
        if cur_v.shape[1] == n:
            worst = -cur_v[:, -1:] if self.largest else cur_v[:, -1:]
            thr = torch.where((cur_i[:, -1:] >= 0) & ~torch.isnan(worst), worst, inf)
        else:
            thr = inf
        if b > n and not bool((thr < math.inf).all()):
            nth = torch.topk(key.masked_fill(torch.isnan(key), math.inf), n, dim=1,
                             largest=False, sorted=False).values.max(dim=1, keepdim=True).values
            thr = torch.minimum(thr, nth)
        mask = (key <= thr) | ~(thr < math.inf)
        cmax = int(mask.sum(dim=1).max())
        cols = c.unsqueeze(0).expand(v.shape[0], b)
        if cmax >= b:
            return v, cols
        if cmax == 0:
            return v[:, :0], cols[:, :0]
        # positions of the passing entries (plus, in rows with fewer, some rejected
        # ones: harmless, they lose to entries that are kept)
        pos = torch.topk(mask.to(torch.uint8), cmax, dim=1, sorted=False).indices
        return v.gather(1, pos), c[pos]

    def result_tensors(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Like :meth:`result` but as tensors on the state's device."""
        if self._values is None:
            return (torch.empty((self.n_rows, 0), dtype=torch.float64),
                    torch.empty((self.n_rows, 0), dtype=torch.int64))
        return self._values.clone(), self._indices.clone()

    def result(self) -> tuple[np.ndarray, np.ndarray]:
        """The top-n so far: (values, indices), each (rows, n').

        n' = min(n, number of columns seen); rows sorted best first. A row that saw
        fewer columns than n' (only possible with ``rows`` subsets) is padded with
        index -1 and value +inf (-inf when ``largest``).
        """
        v, i = self.result_tensors()
        return _to_numpy(v), _to_numpy(i)


def merge_top_n(parts: Sequence[tuple[Any, Any]], n: int,
                largest: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Exactly merge top-n lists of the same rows computed on disjoint column shards.

    This is the gather step after scattering the training set over jobs: each job
    returns the top-n (values, global column indices) of every synthetic row within
    its shard; since every member of the global top-n is in the top-n of its own
    shard, the top-n of the union of the shard lists is the global top-n. Under the
    module's total order (value, then index; NaN last) the merge is bitwise equal
    to a single :class:`TopN` pass over all columns.

    Args:
        parts: (values, indices) pairs, each (rows, n_i) with the same rows; index -1
            marks padding (ignored), other negative indices are invalid.
        n: Entries to keep per row (>= 1).
        largest: The parts keep the largest values (must match how they were made).

    Returns:
        (values, indices), each (rows, n') with n' = min(n, most valid entries of a
        row); rows with fewer valid entries are padded with -1 / +inf (-inf when
        ``largest``).

    Raises:
        ValueError: On no parts, mismatched shapes or rows, non-integer or invalid
            indices, or a column that appears in two shards of the same row.
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    parts = list(parts)
    if not parts:
        raise ValueError("merge_top_n needs at least one (values, indices) part")
    vals, idxs = [], []
    n_rows = None
    for k, part in enumerate(parts):
        if not isinstance(part, (tuple, list)) or len(part) != 2:
            raise ValueError(f"part {k} must be a (values, indices) pair")
        v = _as_float(_as_tensor(part[0], torch.device("cpu"), "values"), f"values of part {k}")
        i = _as_index(_as_tensor(part[1], torch.device("cpu"), "indices"), f"indices of part {k}")
        if v.ndim != 2 or v.shape != i.shape:
            raise ValueError(f"part {k}: values and indices must be 2D of the same shape, "
                             f"got {tuple(v.shape)} and {tuple(i.shape)}")
        if n_rows is None:
            n_rows = v.shape[0]
        elif v.shape[0] != n_rows:
            raise ValueError(f"part {k} has {v.shape[0]} rows, part 0 has {n_rows}")
        if i.numel() and int(i.min()) < -1:
            raise ValueError(f"part {k} has negative indices other than the padding -1")
        vals.append(v)
        idxs.append(i)
    dtype = vals[0].dtype
    for v in vals[1:]:
        dtype = torch.promote_types(dtype, v.dtype)
    values = torch.cat([v.to(dtype) for v in vals], dim=1)
    indices = torch.cat(idxs, dim=1)
    if indices.shape[1] > 1:
        s = torch.sort(indices, dim=1).values
        if bool(((s[:, 1:] == s[:, :-1]) & (s[:, 1:] >= 0)).any()):
            raise ValueError("the parts are not disjoint: a column index appears twice in a row")
    sel_v, sel_i = _select(values, indices, int(n), largest)
    width = min(int(n), int((indices >= 0).sum(dim=1).max())) if indices.numel() else 0
    sel_v, sel_i = sel_v[:, :width].clone(), sel_i[:, :width]
    sel_v[sel_i < 0] = _fill_value(largest)  # padding entries carry the documented fill
    return _to_numpy(sel_v), _to_numpy(sel_i)


# --------------------------------------------------------------------------------------
# Vector preparation shared by the exact search and the IVF index
# --------------------------------------------------------------------------------------

def _check_metric(metric: str) -> str:
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {METRICS}, got {metric!r}")
    return metric


def _check_vectors(x: Any, name: str, dim: int | None = None) -> torch.Tensor:
    t = _as_float(_as_tensor(x, torch.device("cpu") if not isinstance(x, torch.Tensor) else None, name), name)
    if t.ndim != 2:
        raise ValueError(f"{name} must be 2D (count, dim), got shape {tuple(t.shape)}")
    if t.shape[0] == 0 or t.shape[1] == 0:
        raise ValueError(f"{name} must be non-empty, got shape {tuple(t.shape)}")
    if dim is not None and t.shape[1] != dim:
        raise ValueError(f"{name} has dimension {t.shape[1]}, expected {dim}")
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name} contains NaN or infinite values")
    return t


def _check_positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return int(value)


class _Prepared:
    """Base vectors in the form used for ranking and exact recomputation.

    l2: vectors minus the base mean (computed in float64). Distances do not change
    under a common shift, and the ranking score ``|b|^2 - 2 q.b`` cancels far less
    when the vectors are centred (image intensities are far from zero). cosine:
    vectors scaled to unit length; a zero vector stays zero (distance 1 to all).
    Stored in ``dtype`` (float32 by default: half the memory, twice the GEMM rate).
    """

    def __init__(self, base: torch.Tensor, metric: str, device: torch.device, dtype: torch.dtype):
        self.metric = metric
        self.device = device
        self.dtype = dtype
        self.dim = base.shape[1]
        b64 = base.to(device=device, dtype=torch.float64)
        self.mean = b64.mean(dim=0) if metric == "l2" else None
        self.vectors = self._transform64(b64).to(dtype)
        self.sq_norms = (self.vectors * self.vectors).sum(dim=1)

    def _transform64(self, x64: torch.Tensor) -> torch.Tensor:
        if self.metric == "l2":
            return x64 - self.mean
        norms = torch.linalg.vector_norm(x64, dim=1, keepdim=True)
        return x64 / torch.where(norms > 0, norms, torch.ones_like(norms))

    def queries(self, q: torch.Tensor) -> torch.Tensor:
        return self._transform64(q.to(device=self.device, dtype=torch.float64)).to(self.dtype)

    def score(self, q: torch.Tensor, base: torch.Tensor, base_sq: torch.Tensor) -> torch.Tensor:
        """Ranking score (smaller = closer), not a distance: l2 ``|b|^2 - 2 q.b``
        (``|q|^2`` is a per-row constant), cosine ``-q.b``."""
        if self.metric == "l2":  # one fused GEMM: |b|^2 - 2 q.b
            return torch.addmm(base_sq.unsqueeze(0), q, base.T, beta=1.0, alpha=-2.0)
        return torch.mm(q, base.T).neg_()

    def exact(self, q: torch.Tensor, cand: torch.Tensor) -> torch.Tensor:
        """Distances (float64) of rows of ``q`` to their candidates ``cand`` (-1 -> +inf),
        from the stored vectors directly, never from norms.

        l2: coordinate differences in the storage dtype (correctly rounded, and exact
        for near-duplicates by Sterbenz' lemma), then the norm of the differences:
        relative error ~1e-7 with float32 storage (the precision of the stored
        vectors) however close the two vectors are, and exactly 0 for duplicates.
        (Summing the squares in float64 instead costs ~10x for that step and
        gains nothing over the float32 rounding of the vectors themselves; store
        in float64 for full precision.) cosine: float64 throughout.
        """
        out = torch.full(cand.shape, math.inf, dtype=torch.float64, device=self.device)
        if cand.numel() == 0:
            return out
        step = max(1, _RERANK_ELEMENTS // max(1, cand.shape[1] * self.dim))
        for s in range(0, cand.shape[0], step):
            c = cand[s:s + step]
            b = self.vectors[c.clamp(min=0)]
            qq = q[s:s + step].unsqueeze(1)
            if self.metric == "l2":
                b -= qq  # in place: the gathered copy is the only (rows x K x D) temporary
                d = torch.linalg.vector_norm(b, dim=2).to(torch.float64)
            else:
                b = b.to(torch.float64)
                qq = qq.to(torch.float64)
                dot = (b * qq).sum(dim=2)
                denom = torch.linalg.vector_norm(b, dim=2) * torch.linalg.vector_norm(qq, dim=2)
                cos = torch.where(denom > 0, dot / torch.where(denom > 0, denom, 1.0), 0.0)
                d = (1.0 - cos).clamp(0.0, 2.0)
            out[s:s + step] = torch.where(c >= 0, d, math.inf)
        return out


def _candidate_positions(values: torch.Tensor, m: int) -> torch.Tensor:
    """Columns of each row that can be among its m smallest (ties included).

    A float ``topk`` gives each row's m-th smallest value; every entry <= it can
    still win on the index, NaN never (rows whose bound is not finite keep all).
    Returns (rows, c) column positions, c = the most passing entries of any row;
    rows with fewer passing entries also get some that fail (harmless: they lose).
    """
    r, w = values.shape
    full = torch.arange(w, device=values.device).unsqueeze(0).expand(r, w)
    if w <= m:
        return full
    nan = torch.isnan(values)
    key = values.masked_fill(nan, math.inf) if bool(nan.any()) else values
    nth = torch.topk(key, m, dim=1, largest=False, sorted=False).values.max(dim=1, keepdim=True).values
    mask = (key <= nth) | ~(nth < math.inf)
    cmax = int(mask.sum(dim=1).max())
    if cmax >= w:
        return full
    return torch.topk(mask.to(torch.uint8), cmax, dim=1, sorted=False).indices


def _overfetch(k: int, total: int) -> int:
    """Candidates kept by the approximate score before the exact re-rank: the score
    is only accurate to rounding, so a margin keeps near-ties at the k-th place."""
    return min(total, k + max(16, k // 4))


def _rerank(prep: _Prepared, q: torch.Tensor, cand: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    d = prep.exact(q, cand)
    d_sel, i_sel = _select(d, cand, k, largest=False)
    if i_sel.shape[1] < k:  # fewer candidates than k: pad
        pad = k - i_sel.shape[1]
        d_sel = torch.cat([d_sel, d_sel.new_full((d_sel.shape[0], pad), math.inf)], 1)
        i_sel = torch.cat([i_sel, i_sel.new_full((i_sel.shape[0], pad), -1)], 1)
    d_sel = d_sel.masked_fill(i_sel < 0, math.inf)
    return d_sel, i_sel


def exact_search(queries: Any, vectors: Any, k: int, metric: str = "l2", *, device: Any = "auto",
                 dtype: torch.dtype = torch.float32, query_block: int = 1024,
                 base_block: int = 8192) -> tuple[np.ndarray, np.ndarray]:
    """Brute-force k nearest base vectors of every query: the baseline for the index.

    Blocked matrix products (query_block x base_block at a time) rank the pairs by
    ``|b|^2 - 2 q.b`` (l2, on mean-centred vectors) or ``-q.b`` (cosine, unit
    vectors) and a :class:`TopN` keeps the best ``k + margin`` per query; the returned
    distances are then recomputed directly from coordinate differences (never from
    norms, which cancel for near-duplicates; see ``_Prepared.exact``) and the
    candidates re-ranked by them, ties by the smaller index. The margin absorbs the
    rounding of the ranking score, so near-ties at the k-th place are settled by
    the recomputed distances.

    Args:
        queries: (S, D) query vectors.
        vectors: (T, D) base vectors.
        k: Neighbours per query, 1 <= k <= T.
        metric: ``"l2"`` (Euclidean distance) or ``"cosine"`` (1 - cosine similarity).
        device: "auto", "cpu", "cuda" or a torch.device.
        dtype: Storage/GEMM precision of the vectors (float64 for full precision).
        query_block, base_block: Block sizes; memory ~ query_block x base_block.

    Returns:
        (distances (S, k) float64 ascending, indices (S, k) int64).
    """
    metric = _check_metric(metric)
    base = _check_vectors(vectors, "vectors")
    q = _check_vectors(queries, "queries", base.shape[1])
    k = _check_positive_int(k, "k")
    if k > base.shape[0]:
        raise ValueError(f"k={k} exceeds the number of base vectors ({base.shape[0]})")
    query_block = _check_positive_int(query_block, "query_block")
    base_block = _check_positive_int(base_block, "base_block")
    dev = resolve_device(device)
    prep = _Prepared(base, metric, dev, dtype)
    n_base = base.shape[0]
    kk = _overfetch(k, n_base)
    out_d, out_i = [], []
    for s in range(0, q.shape[0], query_block):
        qb = prep.queries(q[s:s + query_block])
        top = TopN(qb.shape[0], kk, device=dev)
        for t in range(0, n_base, base_block):
            score = prep.score(qb, prep.vectors[t:t + base_block], prep.sq_norms[t:t + base_block])
            top._update(score, torch.arange(t, t + score.shape[1], device=dev), slice(None))
        _, cand = top.result_tensors()
        d, i = _rerank(prep, qb, cand, k)
        out_d.append(d)
        out_i.append(i)
    return _to_numpy(torch.cat(out_d)), _to_numpy(torch.cat(out_i))


# --------------------------------------------------------------------------------------
# Inverted-file index
# --------------------------------------------------------------------------------------

def _segment_sum(x: torch.Tensor, assign: torch.Tensor, n_lists: int) -> torch.Tensor:
    """Per-cluster sums of rows of ``x`` in float64, deterministic on every device.

    ``index_add_`` is deterministic on CPU but uses atomics on CUDA (order-dependent
    rounding), so off the CPU the sums are blocked one-hot matrix products instead.
    """
    out = torch.zeros((n_lists, x.shape[1]), dtype=torch.float64, device=x.device)
    if x.device.type == "cpu":
        return out.index_add_(0, assign, x.to(torch.float64))
    return _segment_sum_onehot(x, assign, n_lists, out)


def _segment_sum_onehot(x: torch.Tensor, assign: torch.Tensor, n_lists: int,
                        out: torch.Tensor | None = None) -> torch.Tensor:
    if out is None:
        out = torch.zeros((n_lists, x.shape[1]), dtype=torch.float64, device=x.device)
    step = max(1, 2 ** 24 // max(1, n_lists))
    lists = torch.arange(n_lists, device=x.device).unsqueeze(1)
    for s in range(0, x.shape[0], step):
        onehot = (lists == assign[s:s + step].unsqueeze(0)).to(torch.float64)
        out += onehot @ x[s:s + step].to(torch.float64)
    return out


def _assign(x: torch.Tensor, centroids: torch.Tensor, metric: str,
            block: int = 16384) -> tuple[torch.Tensor, torch.Tensor]:
    """Nearest centroid of each row (first on ties) and its ranking score."""
    c_sq = (centroids * centroids).sum(dim=1)
    labels, scores = [], []
    for s in range(0, x.shape[0], block):
        prod = x[s:s + block] @ centroids.T
        sc = c_sq.unsqueeze(0) - 2 * prod if metric == "l2" else -prod
        m, lab = sc.min(dim=1)  # torch documents the first minimal index on ties
        labels.append(lab)
        scores.append(m)
    return torch.cat(labels), torch.cat(scores)


def _point_cost(x: torch.Tensor, score: torch.Tensor, metric: str) -> torch.Tensor:
    """Distance-like cost of each point to its centroid from the ranking score."""
    if metric == "l2":
        return ((x.to(torch.float64) ** 2).sum(dim=1) + score.to(torch.float64)).clamp(min=0)
    return (1.0 + score.to(torch.float64)).clamp(min=0)


def _kmeanspp(x: torch.Tensor, n_lists: int, metric: str, rng: np.random.Generator) -> torch.Tensor:
    """k-means++ seeding (D^2 sampling) driven by a numpy generator, so that the
    choices depend on the seed only (given the same distances)."""
    n = x.shape[0]
    chosen = [int(rng.integers(n))]
    x64sq = (x.to(torch.float64) ** 2).sum(dim=1)

    def cost_to(i: int) -> torch.Tensor:
        c = x[i]
        if metric == "l2":
            d = x64sq - 2 * (x @ c).to(torch.float64) + float((c.to(torch.float64) ** 2).sum())
        else:
            d = 1.0 - (x @ c).to(torch.float64)
        return d.clamp(min=0)

    best = cost_to(chosen[0])
    for _ in range(1, n_lists):
        p = best.cpu().numpy()
        total = float(p.sum())
        if total > 0:
            cdf = np.cumsum(p)
            i = int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"))
            i = min(i, n - 1)
            while p[i] <= 0:  # rounding at the edge of a zero-mass point
                i = (i + 1) % n
        else:  # every point coincides with a chosen centroid: any point will do
            i = int(rng.integers(n))
        chosen.append(i)
        best = torch.minimum(best, cost_to(i))
    return x[torch.tensor(chosen, device=x.device)].clone()


def _kmeans(x: torch.Tensor, n_lists: int, metric: str, seed: int, iterations: int,
            init: str) -> tuple[torch.Tensor, int]:
    """Deterministic Lloyd k-means (spherical for cosine). Returns (centroids, iterations run)."""
    rng = np.random.default_rng(seed)
    if init == "kmeans++":
        centroids = _kmeanspp(x, n_lists, metric, rng)
    else:
        pick = np.sort(rng.choice(x.shape[0], size=n_lists, replace=False))
        centroids = x[torch.from_numpy(pick).to(x.device)].clone()
    labels = None
    run = 0
    for run in range(1, iterations + 1):
        new_labels, score = _assign(x, centroids, metric)
        if labels is not None and torch.equal(new_labels, labels):
            run -= 1
            break
        labels = new_labels
        counts = torch.bincount(labels, minlength=n_lists)
        sums = _segment_sum(x, labels, n_lists)
        nonempty = counts > 0
        new_c = centroids.to(torch.float64).clone()
        new_c[nonempty] = sums[nonempty] / counts[nonempty].unsqueeze(1).to(torch.float64)
        empty = (~nonempty).nonzero().squeeze(1)
        if empty.numel():
            # Re-seed each empty list at one of the points farthest from their
            # centroid (stable order: ties to the lower point index). Deterministic,
            # and it splits the worst-fitting clusters.
            cost = _point_cost(x, score, metric)
            far = torch.argsort(cost, descending=True, stable=True)[:empty.numel()]
            new_c[empty] = x[far].to(torch.float64)
        if metric == "cosine":
            norms = torch.linalg.vector_norm(new_c, dim=1, keepdim=True)
            new_c = new_c / torch.where(norms > 0, norms, torch.ones_like(norms))
        centroids = new_c.to(x.dtype)
    return centroids, run


class IVFIndex:
    """Inverted-file approximate nearest-neighbour index (k-means lists), in torch.

    Build: k-means splits the base vectors into ``n_lists`` lists (cells). Search: a
    query ranks the centroids and scans only the ``n_probe`` nearest lists, with
    exact distances inside them. The cost is about ``n_probe / n_lists`` of brute
    force plus the centroid ranking; the loss is the true neighbours that fall in
    unprobed lists (near cell boundaries). With ``n_probe == n_lists`` the search is
    exact and equals :func:`exact_search`.

    Use :meth:`build` to make one. Everything is deterministic for a fixed seed on a
    given device (seeded k-means++ or random init, empty lists re-seeded at the
    farthest points, sums without atomics, ties to the lower index); CPU and CUDA
    may differ in the last float bits and hence in rare near-tie choices.

    Attributes:
        metric, device, dtype, n_lists, dim, n_vectors: As built.
        centroids: (n_lists, D) tensor (in the centred/normalised space).
        list_offsets: (n_lists + 1,) tensor: list l holds ``list_ids[off[l]:off[l+1]]``.
        list_ids: (T,) base indices grouped by list (ascending within a list).
        iterations_run: Lloyd iterations until convergence or the limit.
    """

    def __init__(self, *, prepared: _Prepared, centroids: torch.Tensor, labels: torch.Tensor,
                 iterations_run: int):
        self._prep = prepared
        self.metric = prepared.metric
        self.device = prepared.device
        self.dtype = prepared.dtype
        self.dim = prepared.dim
        self.n_vectors = prepared.vectors.shape[0]
        self.centroids = centroids
        self.n_lists = centroids.shape[0]
        self.iterations_run = iterations_run
        order = torch.argsort(labels, stable=True)
        counts = torch.bincount(labels, minlength=self.n_lists)
        self.list_offsets = torch.cat([counts.new_zeros(1), torch.cumsum(counts, 0)])
        self.list_ids = order
        # Vectors stored list by list so that a list is a contiguous slice (one GEMM).
        self._vectors = prepared.vectors[order].contiguous()
        self._sq_norms = prepared.sq_norms[order].contiguous()
        self._offsets_list = self.list_offsets.tolist()

    @property
    def list_sizes(self) -> np.ndarray:
        """Number of base vectors in each list."""
        return _to_numpy(self.list_offsets[1:] - self.list_offsets[:-1])

    @classmethod
    def build(cls, vectors: Any, n_lists: int | None = None, metric: str = "l2", seed: int = 0,
              iterations: int = 20, device: Any = "auto", *, init: str = "kmeans++",
              train_size: int | None = None, dtype: torch.dtype = torch.float32) -> "IVFIndex":
        """Train the lists with k-means and file every base vector in its nearest list.

        Args:
            vectors: (T, D) base vectors (numpy or torch), finite.
            n_lists: Number of lists, 1..T; default ``round(sqrt(T))`` (balances the
                centroid ranking against the list scans).
            metric: ``"l2"`` or ``"cosine"`` (spherical k-means on unit vectors).
            seed: Seeds the initialisation and the training sample.
            iterations: Maximum Lloyd iterations (stops earlier at convergence).
            device: "auto", "cpu", "cuda" or a torch.device.
            init: ``"kmeans++"`` (D^2 seeding, better lists) or ``"random"``.
            train_size: Vectors k-means trains on (a seeded sample); default
                ``min(T, 256 * n_lists)`` - more adds little to the centroids.
            dtype: Storage/GEMM precision (float32 default, float64 for full precision).
        """
        metric = _check_metric(metric)
        base = _check_vectors(vectors, "vectors")
        n_total = base.shape[0]
        if n_lists is None:
            n_lists = max(1, min(n_total, int(round(math.sqrt(n_total)))))
        n_lists = _check_positive_int(n_lists, "n_lists")
        if n_lists > n_total:
            raise ValueError(f"n_lists={n_lists} exceeds the number of base vectors ({n_total})")
        iterations = _check_positive_int(iterations, "iterations")
        if init not in ("kmeans++", "random"):
            raise ValueError(f"init must be 'kmeans++' or 'random', got {init!r}")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise ValueError(f"seed must be an integer, got {seed!r}")
        if train_size is None:
            train_size = min(n_total, 256 * n_lists)
        train_size = _check_positive_int(train_size, "train_size")
        if train_size < n_lists:
            raise ValueError(f"train_size={train_size} is smaller than n_lists={n_lists}")
        train_size = min(train_size, n_total)
        dev = resolve_device(device)
        prep = _Prepared(base, metric, dev, dtype)
        if train_size < n_total:
            pick = np.sort(np.random.default_rng([seed, 1]).choice(n_total, size=train_size, replace=False))
            train = prep.vectors[torch.from_numpy(pick).to(dev)]
        else:
            train = prep.vectors
        centroids, run = _kmeans(train, n_lists, metric, int(seed), iterations, init)
        labels, _ = _assign(prep.vectors, centroids, metric)
        return cls(prepared=prep, centroids=centroids, labels=labels, iterations_run=run)

    def default_n_probe(self) -> int:
        """``ceil(n_lists / 8)``: scans ~1/8 of the base. Measured recall@50 at 10,000 x
        100,000 x 128 with 316 lists: 0.92 (low-rank data, 32 lists), 0.999+ (clustered),
        but 0.35 on isotropic Gaussian noise, so check it on your vectors."""
        return max(1, math.ceil(self.n_lists / 8))

    def search(self, queries: Any, k: int, n_probe: int | None = None, *, query_block: int = 2048,
               max_block_elements: int = 2 ** 24) -> tuple[np.ndarray, np.ndarray]:
        """k nearest base vectors of every query among its ``n_probe`` nearest lists.

        Per block of queries, every probed list is scanned once, as one matrix
        product with all the block's queries that probe it, and the scores are
        written side by side into a (queries x candidates) buffer; one exact
        selection per block then keeps the best (a loop of per-list top-n merges
        would spend its time in per-call overhead). Candidates are ranked by the
        norm expansion and the returned distances recomputed from the vectors and
        re-ranked, as in :func:`exact_search`.

        Args:
            queries: (S, D) query vectors.
            k: Neighbours per query, 1 <= k <= T.
            n_probe: Lists scanned per query, 1 <= n_probe <= n_lists
                (n_lists: exact search); default :meth:`default_n_probe`.
            query_block: Most queries per block.
            max_block_elements: Bound on a block's buffer (queries x candidates of
                its widest query); blocks shrink to respect it (at least one query).

        Returns:
            (distances (S, k) float64 ascending, indices (S, k) int64); where the
            probed lists hold fewer than k vectors the row is padded with inf / -1.
        """
        q = _check_vectors(queries, "queries", self.dim)
        k = _check_positive_int(k, "k")
        if k > self.n_vectors:
            raise ValueError(f"k={k} exceeds the number of base vectors ({self.n_vectors})")
        n_probe = self.default_n_probe() if n_probe is None else _check_positive_int(n_probe, "n_probe")
        if n_probe > self.n_lists:
            raise ValueError(f"n_probe={n_probe} exceeds n_lists={self.n_lists}")
        query_block = _check_positive_int(query_block, "query_block")
        max_block_elements = _check_positive_int(max_block_elements, "max_block_elements")
        kk = _overfetch(k, self.n_vectors)

        # Coarse step for all queries: the n_probe nearest lists (ties: lower list).
        arange_lists = torch.arange(self.n_lists, device=self.device)
        c_sq = (self.centroids * self.centroids).sum(dim=1)
        probes = []
        for s in range(0, q.shape[0], query_block):
            qb = self._prep.queries(q[s:s + query_block])
            coarse = self._prep.score(qb, self.centroids, c_sq)
            probes.append(_select(coarse, arange_lists.unsqueeze(0).expand(qb.shape[0], -1),
                                  n_probe, largest=False)[1])
        probe = torch.cat(probes)
        sizes = self.list_offsets[1:] - self.list_offsets[:-1]
        seg = sizes[probe]  # (S, n_probe) candidates per probed list
        total = seg.sum(dim=1)
        total_np = _to_numpy(total)

        out_d, out_i = [], []
        start = 0
        while start < q.shape[0]:
            window = np.maximum(total_np[start:start + query_block], 1)
            fits = np.arange(1, window.size + 1) * np.maximum.accumulate(window) <= max_block_elements
            stop = start + max(1, int(fits.sum()))
            qb = self._prep.queries(q[start:stop])
            cand = self._block_candidates(qb, probe[start:stop], seg[start:stop], total[start:stop], kk)
            d, i = _rerank(self._prep, qb, cand, k)
            out_d.append(d)
            out_i.append(i)
            start = stop
        return _to_numpy(torch.cat(out_d)), _to_numpy(torch.cat(out_i))

    def _block_candidates(self, qb: torch.Tensor, probe: torch.Tensor, seg: torch.Tensor,
                          total: torch.Tensor, kk: int) -> torch.Tensor:
        """The kk best candidates (by ranking score, exact order) of a query block."""
        b, n_probe = probe.shape
        width = int(total.max())
        if width == 0:
            return torch.full((b, 1), -1, dtype=torch.int64, device=self.device)
        starts = torch.cumsum(seg, dim=1) - seg  # buffer column where each probed list begins
        buf = torch.full((b, width), math.inf, dtype=self._vectors.dtype, device=self.device)
        flat = probe.reshape(-1)
        order = torch.argsort(flat, stable=True)
        qrow = torch.arange(b, device=self.device).repeat_interleave(n_probe)[order]
        col0 = starts.reshape(-1)[order]
        counts = torch.bincount(flat, minlength=self.n_lists).tolist()
        ar = torch.arange(max(1, int(seg.max())), device=self.device)
        flat_buf = buf.view(-1)
        row_base = qrow * width + col0  # flat buffer position where each (query, list) begins
        pos = 0
        for lst, cnt in enumerate(counts):
            if cnt == 0:
                continue
            rows, at = qrow[pos:pos + cnt], row_base[pos:pos + cnt]
            pos += cnt
            lo, hi = self._offsets_list[lst], self._offsets_list[lst + 1]
            if hi == lo:
                continue
            score = self._prep.score(qb[rows], self._vectors[lo:hi], self._sq_norms[lo:hi])
            flat_buf.index_copy_(0, (at.unsqueeze(1) + ar[:hi - lo]).view(-1), score.view(-1))
        keep = _candidate_positions(buf, kk)
        # buffer column -> probed list -> storage position -> base index (-1: padding)
        slot = (torch.searchsorted(starts, keep.contiguous(), right=True) - 1).clamp(0, n_probe - 1)
        storage = self.list_offsets[probe.gather(1, slot)] + keep - starts.gather(1, slot)
        valid = keep < total.unsqueeze(1)
        ids = torch.where(valid, self.list_ids[storage.clamp(0, self.n_vectors - 1)], -1)
        vals = buf.gather(1, keep)
        return _select(vals, ids, kk, largest=False, small_indices=self.n_vectors <= _IDX_LIMIT)[1]


# --------------------------------------------------------------------------------------
# Two-stage search
# --------------------------------------------------------------------------------------

@dataclass
class TwoStageResult:
    """Result of :func:`two_stage_search` for S queries.

    Attributes:
        values: (S, n) exact-measure values of the n best candidates, best first.
        indices: (S, n) their base indices (ties: smaller index first).
        candidate_indices: (S, K) stage-1 candidates (nearest first by vector distance).
        candidate_distances: (S, K) their stage-1 vector distances.
        build_seconds: Index construction (k-means), part of stage 1.
        stage1_seconds: Build plus candidate search.
        stage2_seconds: Exact measure on the candidates plus selection.
        n_lists, n_probe: Index settings used (n_probe as requested; rows that found
            fewer than K candidates were re-searched with more lists).
    """

    values: np.ndarray
    indices: np.ndarray
    candidate_indices: np.ndarray
    candidate_distances: np.ndarray
    build_seconds: float
    stage1_seconds: float
    stage2_seconds: float
    n_lists: int
    n_probe: int

    @property
    def total_seconds(self) -> float:
        return self.stage1_seconds + self.stage2_seconds


def two_stage_search(query_vectors: Any, base_vectors: Any,
                     exact_measure: Callable[[np.ndarray, np.ndarray], Any], *,
                     k_candidates: int, n: int, n_lists: int | None = None, n_probe: int | None = None,
                     metric: str = "l2", seed: int = 0, device: Any = "auto",
                     largest: bool = False, index: IVFIndex | None = None,
                     measure_block: int = 256) -> TwoStageResult:
    """Top-n by an expensive exact measure, computed only on ANN candidates.

    Stage 1 builds an :class:`IVFIndex` on the cheap base vectors (or uses
    ``index``) and takes the ``k_candidates`` nearest per query; a row whose probed
    lists hold fewer than K vectors is searched again with twice the lists until it
    has K (so the exact measure always gets K real candidates). Stage 2 calls
    ``exact_measure`` on blocks of queries and keeps the n best candidates per query
    under the module's total order (ties to the smaller index, NaN last).

    The result is the exact top-n whenever the exact top-n lie among the K
    candidates - check with :func:`recall_of_top_n` on a subset against the full
    measure. Stage-1 vectors only need to *rank* similarly to the exact measure;
    ``largest`` applies to the exact measure (e.g. SSIM or Dice similarities).

    Args:
        query_vectors: (S, D) cheap vectors of the queries (synthetic volumes).
        base_vectors: (T, D) cheap vectors of the base (training volumes).
        exact_measure: ``f(query_index (q,), candidate_indices (q, K)) -> (q, K)``
            exact values for those pairs; indices are global row numbers.
        k_candidates: K, candidates per query, n <= K <= T.
        n: Results per query (RELICT's n closest), >= 1.
        n_lists, n_probe, metric, seed, device: Index settings (see :class:`IVFIndex`;
            n_probe defaults to :meth:`IVFIndex.default_n_probe`).
        largest: Keep the largest exact values instead of the smallest.
        index: A prebuilt index on ``base_vectors`` (skips the build).
        measure_block: Queries per ``exact_measure`` call (bounds its memory).

    Returns:
        A :class:`TwoStageResult`.
    """
    base = _check_vectors(base_vectors, "base_vectors")
    q = _check_vectors(query_vectors, "query_vectors", base.shape[1])
    if not callable(exact_measure):
        raise ValueError("exact_measure must be callable")
    n = _check_positive_int(n, "n")
    k_candidates = _check_positive_int(k_candidates, "k_candidates")
    if k_candidates < n:
        raise ValueError(f"k_candidates={k_candidates} must be at least n={n}")
    if k_candidates > base.shape[0]:
        raise ValueError(f"k_candidates={k_candidates} exceeds the number of base vectors ({base.shape[0]})")
    if n_probe is not None:
        n_probe = _check_positive_int(n_probe, "n_probe")
    measure_block = _check_positive_int(measure_block, "measure_block")

    t0 = time.perf_counter()
    if index is None:
        index = IVFIndex.build(base, n_lists=n_lists, metric=metric, seed=seed, device=device)
    elif index.n_vectors != base.shape[0] or index.dim != base.shape[1]:
        raise ValueError(f"index was built on {index.n_vectors} x {index.dim} vectors, "
                         f"base_vectors is {base.shape[0]} x {base.shape[1]}")
    t1 = time.perf_counter()
    if n_probe is None:
        n_probe = index.default_n_probe()
    if n_probe > index.n_lists:
        raise ValueError(f"n_probe={n_probe} exceeds n_lists={index.n_lists}")
    cd, ci = index.search(q, k_candidates, n_probe)
    probe = n_probe
    short = np.flatnonzero((ci < 0).any(axis=1))
    while short.size and probe < index.n_lists:
        probe = min(index.n_lists, 2 * probe)
        d2, i2 = index.search(q[torch.from_numpy(short)], k_candidates, probe)
        cd[short], ci[short] = d2, i2
        short = short[(i2 < 0).any(axis=1)]
    t2 = time.perf_counter()

    vals, idxs = [], []
    for s in range(0, q.shape[0], measure_block):
        rows = np.arange(s, min(s + measure_block, q.shape[0]))
        cand = ci[rows]
        got = np.asarray(exact_measure(rows, cand.copy()))
        if got.shape != cand.shape:
            raise ValueError(f"exact_measure returned shape {got.shape}, expected {cand.shape}")
        v = _as_float(torch.from_numpy(np.ascontiguousarray(got)), "exact_measure result")
        sel_v, sel_i = _select(v, torch.from_numpy(cand), n, largest)
        vals.append(sel_v)
        idxs.append(sel_i)
    t3 = time.perf_counter()
    return TwoStageResult(values=_to_numpy(torch.cat(vals)), indices=_to_numpy(torch.cat(idxs)),
                          candidate_indices=ci, candidate_distances=cd,
                          build_seconds=t1 - t0, stage1_seconds=t2 - t0, stage2_seconds=t3 - t2,
                          n_lists=index.n_lists, n_probe=n_probe)


# --------------------------------------------------------------------------------------
# Quality of an approximate search
# --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TopNRecall:
    """How much of an exact top-n an approximate search recovered.

    Attributes:
        recall: Mean over rows of |exact top-n of the row found in its approximate
            list| / |exact top-n of the row| (padding -1 ignored).
        top1_recovered: Fraction of rows whose approximate first index equals the
            exact first index (the closest volume, which the distance ratio's
            numerator depends on).
        per_row: (S,) recall of each row.
    """

    recall: float
    top1_recovered: float
    per_row: np.ndarray


def recall_of_top_n(exact_indices: Any, approx_indices: Any) -> TopNRecall:
    """Recall of the exact top-n in an approximate result of the same rows.

    Args:
        exact_indices: (S, n) exact top-n indices, best first (-1 = padding).
        approx_indices: (S, m) approximate indices, best first; m may differ from n
            (e.g. the K stage-1 candidates, to see whether stage 2 can be exact).

    Returns:
        A :class:`TopNRecall`.
    """
    e = np.asarray(exact_indices)
    a = np.asarray(approx_indices)
    for name, x in (("exact_indices", e), ("approx_indices", a)):
        if x.ndim != 2:
            raise ValueError(f"{name} must be 2D (rows, n), got shape {x.shape}")
        if not np.issubdtype(x.dtype, np.integer):
            raise ValueError(f"{name} must be integers, got dtype {x.dtype}")
    if e.shape[0] != a.shape[0]:
        raise ValueError(f"exact_indices has {e.shape[0]} rows, approx_indices {a.shape[0]}")
    if e.shape[0] == 0 or e.shape[1] == 0:
        raise ValueError("exact_indices must have at least one row and one column")
    e = e.astype(np.int64)
    a = a.astype(np.int64)
    span = int(max(e.max(initial=0), a.max(initial=0))) + 1
    rows = np.arange(e.shape[0], dtype=np.int64)[:, None]
    e_key = np.where(e >= 0, rows * span + e, -1)
    a_key = np.where(a >= 0, rows * span + a, -2)
    found = np.isin(e_key, a_key) & (e >= 0)
    valid = (e >= 0).sum(axis=1)
    per_row = np.where(valid > 0, found.sum(axis=1) / np.maximum(valid, 1), 1.0)
    if a.shape[1] == 0:
        top1 = np.zeros(e.shape[0], dtype=bool)
    else:
        top1 = (e[:, 0] >= 0) & (a[:, 0] == e[:, 0])
    return TopNRecall(recall=float(per_row.mean()), top1_recovered=float(np.mean(top1)), per_row=per_row)
