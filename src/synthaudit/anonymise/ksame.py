"""k-Same (Newton et al.), the baseline of the CVAE paper: groups of at least k same-class
vectors, each vector replaced by its group's centroid.

Grouping: within a class, a seeded random remaining vector and its k-1 nearest remaining
neighbours form a group; when fewer than 2k vectors remain they all form the last group,
so every group has between k and 2k-1 members and no vector is left out.
"""

from __future__ import annotations

import numpy as np

from .data import LabelError


def k_same(x: np.ndarray, labels: np.ndarray, k: int, seed: int,
           class_names: list[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Anonymised copy of ``x`` (same size, same labels) and the group index of each row.

    Raises:
        LabelError: k < 2, or a class has fewer than k vectors (it cannot be k-anonymous).
    """
    x = np.asarray(x, np.float64)
    labels = np.asarray(labels)
    if k < 2:
        raise LabelError(f"k-Same needs k >= 2, got {k}")
    counts = {c: int((labels == c).sum()) for c in np.unique(labels)}
    small = {(class_names[c] if class_names else str(c)): n for c, n in counts.items() if n < k}
    if small:
        raise LabelError(f"k-Same with k={k}: class(es) {small} have fewer than {k} training vectors; "
                         f"lower k (anonymise.k_same) or merge classes")
    rng = np.random.default_rng(seed)
    out = np.empty_like(x)
    group = np.full(len(x), -1, dtype=np.int64)
    n_groups = 0
    for c in sorted(counts):
        remaining = list(np.flatnonzero(labels == c))
        while remaining:
            if len(remaining) < 2 * k:
                members = remaining
            else:
                anchor = remaining[int(rng.integers(len(remaining)))]
                d = ((x[remaining] - x[anchor]) ** 2).sum(axis=1)
                members = [remaining[i] for i in np.argsort(d, kind="stable")[:k]]
            out[members] = x[members].mean(axis=0)
            group[members] = n_groups
            n_groups += 1
            chosen = set(members)
            remaining = [i for i in remaining if i not in chosen]
    return out, group
