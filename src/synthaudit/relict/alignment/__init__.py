"""Augmentation-aware replica search: align a synthetic volume to its candidate training
volumes over the generator's augmentation group before measuring.

Why: RELICT's own Discussion names the blind spot. A generator trained with flips,
shifts and small rotations can emit a mirrored or shifted copy of a patient; voxel-wise
MAE/RMSE then see a large distance and call the copy novel. Here each synthetic volume
is mapped back into the training frame by the transform (flip axes, rotation, shift,
optionally an intensity affine) that minimises the squared error against each of its
top-K candidates, and MAE/RMSE are measured on the aligned pair.

How it stays affordable (cost linear in the number of synthetic volumes):
1. Pre-selection, all pairs, on block-averaged volumes (``preselect_block_mm``): every
   flip and coarse rotation of the synthetic volume, every shift within range at once by
   cross-correlation in the Fourier domain. The K lowest squared errors are the candidates.
2. Full resolution, K candidates per synthetic volume: the same search, the best rotation
   refined locally (half a grid step either side), the best shift refined to sub-voxel
   precision by a parabola through the squared error of the neighbouring shifts.

Squared error for all shifts d at once, with the moved volume zero outside its grid:
SSD(d) = sum_x a(x-d)^2 [x in grid] + sum t^2 - 2 sum_x a(x-d) t(x); both sums over x
are correlations, computed with zero padding so that no shift within range wraps.

Padding is the data's background, not 0. Every volume is searched and measured with the
training set's background level subtracted (:func:`background_level`: the median of the
training volumes' faces), so the zero that shifts and rotations bring in is the background
itself. MAE and RMSE do not change (both sides move by the same constant). Without it, CT
kept in HU (air -1,000 HU) got a 1,000 HU error on every face a shift uncovered: on real
head CT an exact copy aligned by a 0.1 mm shift had MAE 26.8 against 18.2 plain, and
shifted copies were never found (issue 29).

The identity is always in the group, and every searched pair is compared with its plain
value: a pair whose aligned RMSE would exceed the plain one keeps the identity (a
sub-voxel shift that blurs more than it aligns keeps its integer shift), so an aligned
distance never exceeds the plain one and the search space ``none`` reproduces plain
RELICT exactly.

The package, by stage: :mod:`.group` (the search space and transforms), :mod:`.preselect`,
:mod:`.refine` (one volume against its candidates), :mod:`.ranking` (the candidates' drivers,
coarse-to-fine), :mod:`.matrices`.
"""

from ..geometry import rotate  # noqa: F401  (callers had it from here)
from .group import (  # noqa: F401  (the package's names, as before the split)
    Hypothesis, Loader, PairResult, SearchSpace, ShiftSearch, Transform, _crop_start, _integer_shift, _less,
    _linear_shift, _rows_of, _shift_vox, apply, background_level, block_mean, edge_level,
)
from .preselect import (  # noqa: F401  (the package's names, as before the split)
    CoarseErrors, _box_energy, _hypotheses_of, _identity_row, _pooled_shift_stack, _shift_energies,
    _shift_stack, _summed_squares, preselect, preselect_factor, preselect_gemm, preselect_stack_bytes,
    preselect_volumes,
)
from .refine import (  # noqa: F401  (the package's names, as before the split)
    VALID_LEVEL, _ONES_ROTATED, _fit_intensity, _group_search, _measured, _never_above_plain, _outside_sums,
    _pair_measures, _refine_closest, _region_measures, _restore_offsets, _rotate_fast, align_pair_set, overlap,
    refine_rigid,
)
from .ranking import (  # noqa: F401  (the package's names, as before the split)
    LocalShift, _ByteLRU, _Picked, _coarse_search, align_candidates, align_candidates_ranked,
    align_pair_set_coarse_to_fine, align_ranked, coarse_aligned_mse, coarse_fixed, refine_factor,
)
from .matrices import (  # noqa: F401  (the package's names, as before the split)
    aligned_matrices, alignment_columns, alignment_rows, estimated_rmse,
)

__all__ = [
    'CoarseErrors', 'Hypothesis', 'Loader', 'LocalShift', 'PairResult', 'SearchSpace', 'ShiftSearch',
    'Transform', 'VALID_LEVEL', 'align_candidates', 'align_candidates_ranked', 'align_pair_set',
    'align_pair_set_coarse_to_fine', 'align_ranked', 'aligned_matrices', 'alignment_columns', 'alignment_rows',
    'apply', 'background_level', 'block_mean', 'coarse_aligned_mse', 'coarse_fixed', 'edge_level',
    'estimated_rmse', 'overlap', 'preselect', 'preselect_factor', 'preselect_gemm', 'preselect_stack_bytes',
    'preselect_volumes', 'refine_factor', 'refine_rigid',
]
