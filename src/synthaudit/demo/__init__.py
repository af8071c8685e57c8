"""Embedded demo data sets, simulated so that the workflow runs without patient data."""

import numpy as np


def heldout_indices(n_total: int, n_heldout: int, seed: int, key: str, unit: str) -> set[int]:
    """The 0-based indices held out of training: one seeded permutation, shared by every demo.

    ``key`` names the params key (for the error message), ``unit`` what is counted.
    """
    if not 0 <= n_heldout < n_total:
        raise ValueError(
            f"demo: {key} must be >= 0 and < n_{unit}s ({n_total}) so that "
            f"at least one {unit} is left for training; got {n_heldout}"
        )
    return set(np.random.default_rng(seed).permutation(n_total)[:n_heldout].tolist())
