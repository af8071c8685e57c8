"""The measure registry: every measure the workflow can compute, in one table.

Why one table: the params schema (which names are allowed where), the Snakemake
wiring (which engine job computes a measure), the ranking (ratio or absolute
distance), the distance conversion, the figures, the report and the benchmark all
need the same facts about a measure. They read them here, so adding a measure is one
:class:`Measure` row, one function in its level's implementation module and one row
of analytic test cases (CONTRIBUTING.md, "How to add a measure").

Levels and engines (RELICT 2.3): image-level measures run in the streaming all-pairs
engine of :mod:`synthaudit.relict.image_measures`, feature-level ones on embeddings in
:mod:`synthaudit.features.compare`, segmentation-level ones on label maps in
:mod:`synthaudit.segment.measures`; ``<name>_aligned`` variants of the alignable
image measures come from the alignment search (:mod:`synthaudit.relict.alignment`).
Every engine calls the function its measure's row names (no engine branches on measure
names). The local level (block distances inside volumes, relict.local) is not a RELICT
level and is not chosen in relict.measures: ``names()`` lists the whole-volume levels,
``names(LOCAL)`` the block measures.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

LEVELS = ("image", "feature", "segmentation")  # whole-volume levels: what relict.measures chooses from
# block-wise distances inside volumes (relict.local: a training patient's region copied into a new volume)
LOCAL = "local"
@dataclass(frozen=True)
class Measure:
    """One measure: what it is called, how it becomes a replica score, and where its code is.

    Attributes:
        name: The name used in params.yaml, file names and tables.
        level: image | feature | segmentation.
        label: Name in figures and tables.
        similarity: ``(low, high)`` range of a similarity (higher = more alike), which
            RELICT 2.4 turns into the distance ``1 - (s - low) / (high - low)``; None
            for a distance (used as it is).
        uses_ratio: True: ranked by the distance ratio (image and feature level);
            False: by the absolute distance to the closest training volume
            (segmentation level, paper 2.4: the segmentation already isolates the ROI).
        implementation: The name of the function in the level's engine module
            (image: synthaudit.relict.image_measures, feature: synthaudit.features.compare,
            segmentation: synthaudit.segment.measures, local: synthaudit.relict.local) that
            computes it, which every engine resolves and calls; "fused" for
            measures the image engine computes in its fused passes, "alignment" for the
            aligned variants. The engine resolves the name itself (no import from here:
            rules that only need labels or levels stay light).
        unit: Unit of the raw values, for axis labels.
        alignable: Has an ``<name>_aligned`` variant (relict.alignment).
        multiclass: Needs more than one label class.
        aligned_from: For an aligned variant, the plain measure it is made from.
        shortlist_stage: Which block means shortlist it (relict.search): ``raw`` volumes, or
            ``standardised`` ones for a measure blind to a linear change of intensity (NCC).
    """

    name: str
    level: str
    label: str
    similarity: tuple[float, float] | None
    uses_ratio: bool
    implementation: str
    unit: str = ""
    alignable: bool = False
    multiclass: bool = False
    aligned_from: str | None = None
    shortlist_stage: str = "raw"

    def to_distance(self, values) -> np.ndarray:
        """Raw values as distances (small = alike), float64; paper 2.4 for similarities.

        SSIM and cosine live in [-1, 1] (s -> 1 - (s + 1) / 2); Dice in [0, 1]
        (d -> 1 - d, "a Dice coefficient of 0.7 was transformed into a distance of 0.3").
        """
        values = np.array(values, dtype=np.float64)
        if self.similarity is None:
            return values
        low, high = self.similarity
        return 1.0 - (values - low) / (high - low)


_BASE = (
    # image level (RELICT 2.3.1): the streaming engine's fused kernels
    Measure("mae", "image", "MAE", None, True, "fused", alignable=True),
    Measure("rmse", "image", "RMSE", None, True, "fused", alignable=True),
    Measure("ssim", "image", "SSIM", (-1.0, 1.0), True, "fused"),
    # not in RELICT: invariant to a linear intensity change of a replica
    Measure("ncc", "image", "NCC", (-1.0, 1.0), True, "ncc", shortlist_stage="standardised"),
    # feature level (RELICT 2.3.2): embeddings of a 3D ResNet
    Measure("emb_rmse", "feature", "Embedding RMSE", None, True, "embedding_rmse"),
    Measure("emb_cosine", "feature", "Embedding cosine", (-1.0, 1.0), True, "embedding_cosine"),
    # segmentation level (RELICT 2.3.3): label maps, absolute distance
    Measure("dice_binary", "segmentation", "Dice (binary)", (0.0, 1.0), False, "column_dice_binary"),
    Measure("dice_multiclass", "segmentation", "Dice (multiclass)", (0.0, 1.0), False,
            "column_dice_multiclass", multiclass=True),
    Measure("asd_binary", "segmentation", "ASD (binary)", None, False, "column_asd_binary", "mm"),
    Measure("asd_multiclass", "segmentation", "ASD (multiclass)", None, False, "column_asd_multiclass",
            "mm", multiclass=True),
    # local level (relict.local, not in RELICT): per block of about relict.local.block_mm, the
    # block's mean squared or absolute voxel difference, ratio per block (synthaudit.relict.local)
    Measure("block_mse", LOCAL, "Block MSE", None, True, "block_mse"),
    Measure("block_mae", LOCAL, "Block MAE", None, True, "block_mae"),
)


def _aligned(m: Measure) -> Measure:
    """The alignment-aware variant: the plain measure after the best transform of the
    augmentation group, per candidate pair (relict.alignment); always a distance."""
    return Measure(f"{m.name}_aligned", m.level, f"{m.label} (aligned)", m.similarity, m.uses_ratio, "alignment",
                   m.unit, aligned_from=m.name)


MEASURES: dict[str, Measure] = {m.name: m for m in _BASE}
MEASURES.update({a.name: a for a in (_aligned(m) for m in _BASE if m.alignable)})


def get(name: str) -> Measure:
    try:
        return MEASURES[name]
    except KeyError:
        raise KeyError(f"unknown measure {name!r}; known: {', '.join(MEASURES)}") from None


def names(level: str | None = None, *, aligned: bool = False) -> list[str]:
    """Measure names in registry order: of one level (None: the whole-volume levels, what
    relict.measures chooses from; ``LOCAL``: the block measures of relict.local), and without
    the aligned variants unless ``aligned`` (those are not chosen in params directly)."""
    return [n for n, m in MEASURES.items()
            if (m.level == level if level is not None else m.level in LEVELS)
            and (aligned or m.aligned_from is None)]


def alignable() -> list[str]:
    """Plain measures that have an aligned variant (relict.alignment.measures)."""
    return [n for n, m in MEASURES.items() if m.alignable]


def by_level(measure_names, level: str) -> list[str]:
    return [n for n in measure_names if get(n).level == level]


def implementation(measure: str, namespace: dict, module: str):
    """The function ``measure``'s row names, looked up in its engine module's namespace (the
    engine passes ``globals()`` and ``__name__``: the registry imports no engine)."""
    name = get(measure).implementation
    function = namespace.get(name)
    if not callable(function):
        raise ValueError(f"measure {measure!r}: the registry names {name!r}, which is not a function of {module}")
    return function


def to_distance(name: str, values) -> np.ndarray:
    """Raw values of measure ``name`` as distances (see :meth:`Measure.to_distance`)."""
    return get(name).to_distance(values)


def check(measure_names, level: str | None = None) -> list[str]:
    """Validate names (of one level, when given); keep their order, drop repeats."""
    if isinstance(measure_names, str):
        measure_names = [measure_names]
    known = names(level, aligned=level is None)
    unknown = [m for m in measure_names if m not in known]
    if unknown:
        what = f"{level}-level " if level else ""
        raise ValueError(f"unknown {what}measure(s) {unknown}; known: {', '.join(known)}")
    if not measure_names:
        raise ValueError("no measures requested")
    return list(dict.fromkeys(measure_names))
