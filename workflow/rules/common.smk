# Validation of params.yaml, the dataset plans (every id known at parse time),
# wildcard constraints and input functions shared by all rules.

import copy
import math
import re
from pathlib import Path

from snakemake.exceptions import WorkflowError

from synthaudit.privacy.data import PrivacyDataError, check_patients, patient_split
from synthaudit.config import ParamsError, filter_measures, resolve_datasets, validate_params, with_sweep
from synthaudit import registry
from synthaudit.relict import shards as relict_shards
from synthaudit.sources import SourceError, generator_training_subset, plan_dataset

try:
    validate_params(config)
    # datasets with training_from become full entries that read the training side
    # (cohort, preprocessing, training features and labels) from the named dataset
    # (and generator_sweep adds one dataset per training-set size)
    config["datasets"] = resolve_datasets(with_sweep(config))
    PLANS = {name: plan_dataset(name, ds) for name, ds in config["datasets"].items()}
except (ParamsError, SourceError) as e:
    raise WorkflowError(str(e)) from None

DATASETS = list(PLANS)
# the dataset whose training set (and preprocessing outputs) a dataset uses: itself,
# or the one named by training_from
TRAINING_OF = {d: config["datasets"][d].get("training_from") or d for d in DATASETS}
OWN_TRAINING = [d for d in DATASETS if TRAINING_OF[d] == d]
DEMO_DATASETS = [d for d in OWN_TRAINING if config["datasets"][d]["source"] == "demo_ncct"]
TOF_DATASETS = [d for d in DATASETS if config["datasets"][d]["source"] == "demo_tof"]
SPIKED_DATASETS = [d for d in DATASETS if config["datasets"][d]["synthetic"]["source"] == "spiked"]
PERTURBED_DATASETS = [d for d in SPIKED_DATASETS if d not in TOF_DATASETS]
LDM_DATASETS = [d for d in DATASETS if config["datasets"][d]["synthetic"]["source"] == "ldm"]
IMPORTED_DATASETS = [d for d in DATASETS if d not in SPIKED_DATASETS and d not in LDM_DATASETS]
SWEEP = config.get("generator_sweep") or {}
SWEEP_DATASETS = [f"{SWEEP['dataset']}_n{n}" for n in SWEEP["n_training"]] if SWEEP.get("dataset") else []
# the generator whose autoencoder (and latents) a generator uses: its own, except in the
# sweep, where only the diffusion model's training set varies
AE_OWNER = {d: SWEEP["dataset"] if d in SWEEP_DATASETS else d for d in LDM_DATASETS}
AE_DATASETS = [d for d in LDM_DATASETS if AE_OWNER[d] == d]
# datasets that get the review outputs (rating sheet, paper tables, ranking pages): the
# sweep's datasets are summarised by the sweep instead
REVIEWED_DATASETS = [d for d in DATASETS if d not in SWEEP_DATASETS]
MEASURES = list(config["relict"]["measures"])


def measures_of(dataset):
    """The measures that apply to a dataset: segmentation level only with a segmentation
    block, multiclass variants only with more than one class."""
    seg = config["datasets"][dataset].get("segmentation")
    chosen = config["datasets"][dataset].get("measures") or MEASURES
    out = []
    for m in MEASURES:
        if m not in chosen:
            continue
        level = registry.get(m).level
        if level == "segmentation" and not seg:
            continue
        if m.endswith("_multiclass") and len(seg["classes"]) < 2:
            continue
        out.append(m)
    return out


# alignment-aware variants of image measures (relict.alignment), for the datasets listed
ALIGN = config["relict"].get("alignment") or {"datasets": [], "measures": []}
ALIGNED_DATASETS = [d for d in ALIGN["datasets"] if d in DATASETS]
ALIGNED_MEASURES = [f"{m}_aligned" for m in ALIGN["measures"]]
MEASURES_BY_DS = {d: measures_of(d) + (ALIGNED_MEASURES if d in ALIGNED_DATASETS else []) for d in DATASETS}
# measures computed by the all-pairs jobs (the aligned variants come from relict_align)
IMAGE_MEASURES = [m for m in MEASURES if registry.get(m).level == "image"]
FEATURE_MEASURES = [m for m in MEASURES if registry.get(m).level == "feature"]
SEG_MEASURES = [m for m in MEASURES if registry.get(m).level == "segmentation"]
# datasets audited at segmentation level (a segmentation block and a measure of that level)
SEG_DATASETS = [d for d in DATASETS if any(m in SEG_MEASURES for m in MEASURES_BY_DS[d])]
FEATURE_DATASETS = [d for d in DATASETS if any(m in FEATURE_MEASURES for m in MEASURES_BY_DS[d])]


def _alternatives(names):
    """A regex matching exactly these names (a never-matching one when empty)."""
    return "|".join(re.escape(n) for n in names) if names else "(?!x)x"


wildcard_constraints:
    dataset=_alternatives(DATASETS),
    measure=_alternatives(MEASURES + ALIGNED_MEASURES),
    split="train|synthetic|heldout",
    scan=r"[A-Za-z0-9][A-Za-z0-9._-]*",
    syn=r"[A-Za-z0-9][A-Za-z0-9._-]*",


# Optional long trainings (privacy filters, the in-workflow generator, CVAE anonymisation,
# the feature-level study) run after whatever else is ready: an audit's RELICT rankings,
# ratios and evaluation do not wait behind hours of filter training (Snakemake picks ready
# jobs by priority; the default is 0).
LATER = -10


def ds_cfg(wildcards):
    return config["datasets"][wildcards.dataset]


def plan(wildcards):
    return PLANS[wildcards.dataset]


def declared_classes(wildcards):
    """Number of label values a dataset declares (None without a segmentation block: not checked)."""
    seg = ds_cfg(wildcards).get("segmentation")
    return len(seg["classes"]) if seg else None


def raw_image_path(dataset, scan_id):
    """The raw image of a real scan: the user's file, or the demo cohort's output."""
    scan = PLANS[dataset].scan(scan_id)
    if scan.image is not None:
        return scan.image
    return f"results/cohort/{dataset}/images/{scan_id}.nii.gz"


def raw_image(wildcards):
    return raw_image_path(wildcards.dataset, wildcards.scan)


def raw_label(wildcards):
    scan = plan(wildcards).scan(wildcards.scan)
    if scan.image is not None:
        if scan.label is None:
            raise WorkflowError(f"dataset {wildcards.dataset}: scan {scan.id} has no label file")
        return scan.label
    return f"results/cohort/{wildcards.dataset}/labels/{wildcards.scan}.nii.gz"


def has_label(dataset, scan):
    s = PLANS[dataset].scan(scan)
    return s.image is None or s.label is not None


# datasets whose every scan has a label map: their labels are carried onto the grid in
# the same job as the image (one job per scan instead of two)
LABELLED_DATASETS = [d for d in OWN_TRAINING if all(has_label(d, s.id) for s in PLANS[d].scans)]


def preprocessed_images(dataset, role=None):
    base = TRAINING_OF[dataset]
    return [f"results/preprocessed/{base}/images/{s.id}.nii.gz"
            for s in PLANS[dataset].scans if role is None or s.role == role]


def preprocessed_labels(dataset):
    base = TRAINING_OF[dataset]
    return [f"results/preprocessed/{base}/labels/{s.id}.nii.gz"
            for s in PLANS[dataset].scans if has_label(dataset, s.id)]


def grid_json(wildcards):
    """The preprocessed grid every volume of a dataset lies on (the training dataset's)."""
    return f"results/preprocessed/{TRAINING_OF[wildcards.dataset]}/grid.json"


def training_qc(wildcards):
    base = TRAINING_OF[wildcards.dataset]
    return [f"results/preprocessed/{base}/qc/{s.id}.json" for s in plan(wildcards).train]


def training_features(wildcards):
    return f"results/relict/features/{TRAINING_OF[wildcards.dataset]}/train.npz"


def unet_model(wildcards):
    return f"results/relict/segmentation/{TRAINING_OF[wildcards.dataset]}/unet/model.pt"


# runtime settings of the all-pairs jobs (params.yaml `compute`; optional, these defaults otherwise)
COMPUTE = {"device": "auto", "training_shards": 1, "synthetic_shards": 1, **config.get("compute", {})}


def measure_shards(dataset):
    """Shard names of a dataset's image- and segmentation-level measures (relict.shards)."""
    return relict_shards.shard_names(len(PLANS[dataset].synthetic), len(PLANS[dataset].train),
                                     COMPUTE["synthetic_shards"], COMPUTE["training_shards"])


def shard_of(wildcards, items, axis):
    """The part of ``items`` (all synthetic or all training volumes, planned order) in shard ``wildcards.shard``."""
    p = PLANS[wildcards.dataset]
    blocks = relict_shards.shard_blocks(wildcards.shard, len(p.synthetic), len(p.train),
                                        COMPUTE["synthetic_shards"], COMPUTE["training_shards"])
    return list(items)[blocks[0] if axis == "synthetic" else blocks[1]]


def measure_benchmarks(dataset, measure):
    """Benchmark files of one measure's jobs (one per shard; one file at feature level)."""
    if measure in FEATURE_MEASURES:
        return [f"benchmarks/relict_measure/{dataset}/{measure}.tsv"]
    if measure in ALIGNED_MEASURES:  # the plain measure's jobs, then the alignment search (shared by the variants)
        return measure_benchmarks(dataset, measure.removesuffix("_aligned")) + [f"benchmarks/relict_align/{dataset}.tsv"]
    return [f"benchmarks/relict_measure/{dataset}/{measure}/{s}.tsv" for s in measure_shards(dataset)]


def synthetic_images(dataset):
    return [f"results/synthetic/{dataset}/images/{v.id}.nii.gz" for v in PLANS[dataset].synthetic]


def ratings_file(dataset):
    """The rating table that evaluation uses, or None (no evaluation for this dataset)."""
    given = config["datasets"][dataset].get("ratings")
    if given:
        return given
    if dataset in SPIKED_DATASETS:
        return f"results/synthetic/{dataset}/ratings_reference.tsv"
    return None


RATED_DATASETS = [d for d in DATASETS if ratings_file(d) is not None]
FILTER_DATASETS = [d for d in DATASETS if config["datasets"][d].get("filter_with")]


def manifest_rows(wildcards):
    rows = []
    for s in plan(wildcards).scans:
        demo = s.image is None
        rows.append({"id": s.id, "patient_id": s.patient_id, "role": s.role, "session": s.session,
                     "image": f"images/{s.id}.nii.gz" if demo else s.image,
                     "label": f"labels/{s.id}.nii.gz" if demo else s.label})
    return rows


def grid_reference(wildcards):
    """register: false takes the grid of the first training volume; else none is needed."""
    if ds_cfg(wildcards)["preprocess"]["register"]:
        return []
    first = sorted(s.id for s in plan(wildcards).train)[0]
    return raw_image_path(wildcards.dataset, first)


def spiked_row(wildcards):
    for r in plan(wildcards).spiked:
        if r["id"] == wildcards.syn:
            return r
    raise WorkflowError(f"dataset {wildcards.dataset}: no synthetic volume {wildcards.syn}")


def spiked_source(wildcards):
    return f"results/preprocessed/{TRAINING_OF[wildcards.dataset]}/images/{spiked_row(wildcards)['source_id']}.nii.gz"


def seg_label_path(dataset, vid, synthetic):
    """The label map a segmentation-level measure uses for one volume."""
    source = config["datasets"][dataset]["segmentation"]["source"]
    owner = dataset if synthetic else TRAINING_OF[dataset]  # training labels are made once
    if source == "labels":
        kind = "synthetic" if synthetic else "preprocessed"
        return f"results/{kind}/{owner}/labels/{vid}.nii.gz"
    return f"results/relict/segmentation/{owner}/labels/{vid}.nii.gz"


def seg_labels(dataset, split):
    ids = [v.id for v in PLANS[dataset].synthetic] if split == "synthetic" else [s.id for s in PLANS[dataset].train]
    return [seg_label_path(dataset, i, split == "synthetic") for i in ids]


def volume_image(dataset, vid):
    """Preprocessed image of a real scan or a synthetic volume, by id."""
    if vid in {v.id for v in PLANS[dataset].synthetic}:
        return f"results/synthetic/{dataset}/images/{vid}.nii.gz"
    return f"results/preprocessed/{TRAINING_OF[dataset]}/images/{vid}.nii.gz"


def split_images(dataset, split):
    """The volumes of one split: synthetic, train or heldout (real, preprocessed)."""
    if split == "synthetic":
        return synthetic_images(dataset)
    return preprocessed_images(dataset, role=split)


def user_synthetic_label(wildcards):
    """A user's label file for a synthetic volume: from the manifest, or the labels folder."""
    vol = plan(wildcards).synthetic_volume(wildcards.syn)
    if vol.label:
        return vol.label
    folder = ds_cfg(wildcards)["segmentation"].get("synthetic_labels")
    if not folder:
        raise WorkflowError(f"dataset {wildcards.dataset}: segmentation.source is labels but synthetic "
                            f"volume {wildcards.syn} has no label (give segmentation.synthetic_labels)")
    return f"{folder}/{wildcards.syn}.nii.gz"


def nnunet_prediction(wildcards):
    """The user's prediction file, or (command mode) the folder the nnunet_predict rule writes."""
    nn = ds_cfg(wildcards)["segmentation"]["nnunet"]
    if nn["predictions"]:
        return f"{nn['predictions']}/{wildcards.vid}.nii.gz"
    return f"results/relict/segmentation/{wildcards.dataset}/nnunet_predictions"


def all_volume_ids(dataset):
    """What a segmentation model must label: the synthetic volumes, and the training and
    held-out volumes unless the dataset shares them (training_from), whose labels exist
    already (held-out label maps calibrate the segmentation level's replica calls)."""
    own = [s.id for s in PLANS[dataset].train + PLANS[dataset].heldout] if TRAINING_OF[dataset] == dataset else []
    return own + [v.id for v in PLANS[dataset].synthetic]


def label_of(image_path):
    """The label map stored beside an image (…/images/x.nii.gz -> …/labels/x.nii.gz)."""
    path = Path(image_path)
    return str(path.parent.parent / "labels" / path.name)


def spiked_source_label(wildcards):
    return label_of(spiked_source(wildcards))


def tof_heldout_image(wildcards):
    """A held-out scan copied as a TOF non-replica (nothing for a replica, which is rendered)."""
    return [] if spiked_row(wildcards)["kind"] == "replica" else spiked_source(wildcards)


def tof_heldout_label(wildcards):
    return [] if spiked_row(wildcards)["kind"] == "replica" else spiked_source_label(wildcards)


def training_labels(wildcards):
    return [label_of(p) for p in preprocessed_images(wildcards.dataset, role="train")]


def split_ids(dataset, split):
    if split == "synthetic":
        return [v.id for v in PLANS[dataset].synthetic]
    return [s.id for s in (PLANS[dataset].train if split == "train" else PLANS[dataset].heldout)]


def rating_measure(wildcards):
    """The measure that ranks the rating sheet (its first measure when that one is not computed)."""
    measures = MEASURES_BY_DS[wildcards.dataset]
    return config["relict"]["review"]["rating_measure"] if config["relict"]["review"]["rating_measure"] in measures else measures[0]


def generator_training_ids(dataset, subset_only=False):
    """The training volumes an in-workflow generator learns from (all, or n_training of
    them); with subset_only, an empty list when that is all of them."""
    ldm = config["datasets"][dataset]["synthetic"].get("ldm")
    ids = sorted(s.id for s in PLANS[dataset].train)
    if not ldm or ldm.get("n_training") is None:
        return [] if subset_only else ids
    return generator_training_subset(ids, ldm["n_training"], ldm["seed"])


def generator_training_images(wildcards):
    base = TRAINING_OF[wildcards.dataset]
    return [f"results/preprocessed/{base}/images/{i}.nii.gz" for i in generator_training_ids(wildcards.dataset)]


# Calibrated replica calls (relict.calibration): a training set's held-out scans, scored
# against it by every measure its synthetic sets use, are the null of "a new patient".
# Segmentation measures need held-out label maps: the user's labels, or the segmenter's.
CALIBRATION = config["relict"].get("calibration") or {"rate": 0.05}


def heldout_labels_available(base):
    seg = config["datasets"][base].get("segmentation")
    if not seg:
        return False
    if seg["source"] == "labels":
        return all(has_label(base, s.id) for s in PLANS[base].heldout)
    if seg["source"] == "nnunet" and seg["nnunet"]["predictions"]:
        return all(Path(seg["nnunet"]["predictions"], f"{s.id}.nii.gz").is_file() for s in PLANS[base].heldout)
    return True  # unet, or an nnU-Net command: they label the held-out scans too


CALIBRATION_BASES = [b for b in OWN_TRAINING if PLANS[b].heldout]
HELDOUT_MEASURES = {
    b: [m for m in MEASURES + ALIGNED_MEASURES
        if any(TRAINING_OF[d] == b and m in MEASURES_BY_DS[d] for d in DATASETS)
        and (registry.get(m).level != "segmentation" or heldout_labels_available(b))]
    for b in CALIBRATION_BASES}
CALIBRATED = {d: [m for m in MEASURES_BY_DS[d] if m in HELDOUT_MEASURES.get(TRAINING_OF[d], [])] for d in DATASETS}
COPIES_DATASETS = [d for d in REVIEWED_DATASETS if CALIBRATED[d]]


def heldout_matrix(wildcards):
    """The held-out scans' distances to the training set for this measure ([] when not calibrated)."""
    if wildcards.measure not in CALIBRATED[wildcards.dataset]:
        return []
    return f"results/relict/{TRAINING_OF[wildcards.dataset]}/heldout/{wildcards.measure}.npz"


def heldout_source_patients(wildcards):
    """Synthetic volumes made from a held-out scan (spiked non-replicas) -> that scan's patient."""
    base = PLANS[TRAINING_OF[wildcards.dataset]]
    held = {s.id: s.patient_id for s in base.heldout}
    return {r["id"]: held[r["source_id"]] for r in plan(wildcards).spiked if r.get("source_id") in held}


# Generative-model recall: every dataset whose training set has held-out volumes (the
# reference); held-out distances are computed once per training set (RECALL_BASES).
RECALL_CFG = config["relict"]["recall"]
RECALL_DATASETS = [d for d in DATASETS if PLANS[d].heldout and RECALL_CFG["measure"] in MEASURES_BY_DS[d]]
RECALL_BASES = sorted({TRAINING_OF[d] for d in RECALL_DATASETS})


def ldm_checkpoint(stage):
    """Input function: the training checkpoint of one LDM stage, named by a hash of the
    settings that shape the training (not the epochs). Changing a setting starts a fresh
    checkpoint; re-running the same settings (after an interruption, or with more epochs)
    resumes the old one."""
    import hashlib
    import json

    def path(wildcards):
        ldm = ds_cfg(wildcards)["synthetic"]["ldm"]
        shaping = {k: v for k, v in ldm[stage].items() if k not in ("epochs", "num_inference_steps", "sample_batch_size")}
        # the diffusion model learns the autoencoder's latents: any change there is new data
        upstream = ldm["autoencoder"] if stage == "diffusion" else None
        key = json.dumps([shaping, upstream, ldm["seed"], generator_training_ids(wildcards.dataset)], sort_keys=True)
        digest = hashlib.sha256(key.encode()).hexdigest()[:12]
        return f"results/generator/{wildcards.dataset}/checkpoints/{stage}-{digest}.ckpt"

    return path


def ldm_settings(dataset):
    """The generator settings a training rule uses. In the memorisation sweep with
    equal_steps, a smaller training set gets more epochs, so that every generator of the
    sweep takes the same number of optimiser steps (ceil(n / batch_size) per epoch)."""
    ldm = copy.deepcopy(config["datasets"][dataset]["synthetic"]["ldm"])
    if dataset in SWEEP_DATASETS and SWEEP.get("equal_steps"):
        n_full, n = len(generator_training_ids(SWEEP["dataset"])), len(generator_training_ids(dataset))
        for stage in ("diffusion",):  # the autoencoder is the swept generator's
            batch = ldm[stage].get("batch_size", 2)
            steps_full = ldm[stage].get("epochs", 100) * math.ceil(n_full / batch)
            ldm[stage]["epochs"] = max(1, round(steps_full / math.ceil(n / batch)))
    return ldm


# the sweep's points in order of training-set size: its datasets and the swept generator
SWEEP_POINTS = sorted(SWEEP_DATASETS + [SWEEP["dataset"]], key=lambda d: len(generator_training_ids(d))) if SWEEP_DATASETS else []


# datasets whose label maps the in-workflow U-Net predicts
UNET_DATASETS = [d for d in SEG_DATASETS if config["datasets"][d]["segmentation"]["source"] == "unet"]


# Re-identification privacy filters (privacy.smk): the training sets that get filters,
# their input spaces and the synthetic sets each filters.
PRIVACY = config.get("privacy") or {}
# Feature-space anonymisation (anonymise.smk): datasets whose embeddings are anonymised
ANON = config.get("anonymise") or {"datasets": {}}
ANON_DATASETS = list(ANON["datasets"])
PRIVACY_SETS = list(PRIVACY.get("training_sets") or [])
PRIVACY_AE = PRIVACY.get("latent_autoencoder")


def privacy_spaces(owner):
    """Image space always; latent space when the named generator learns this training set."""
    spaces = [s for s in PRIVACY.get("spaces", []) if s == "image"]
    if "latent" in PRIVACY.get("spaces", []) and PRIVACY_AE and TRAINING_OF.get(PRIVACY_AE) == owner:
        spaces.append("latent")
    return spaces


# the synthetic sets a training set's filters judge (the sweep's are summarised by the sweep)
PRIVACY_TARGETS = {o: [d for d in REVIEWED_DATASETS if TRAINING_OF[d] == o] for o in PRIVACY_SETS}
PRIVACY_FILTERS = [f"filter{i}" for i in range(PRIVACY["consistency"]["n_filters"])] if PRIVACY else []
PRIVACY_RUNS = [(o, s) for o in PRIVACY_SETS for s in privacy_spaces(o)]

for _owner in PRIVACY_SETS:  # refuse data without re-identification pairs before anything runs
    _scans = PLANS[_owner].scans
    try:
        check_patients([s.id for s in _scans], [s.patient_id for s in _scans], [s.role for s in _scans],
                       f"privacy.training_sets: dataset {_owner}")
        patient_split([s.patient_id for s in _scans], [i for i, s in enumerate(_scans) if s.role == "train"],
                      PRIVACY["training"]["validation_fraction"], PRIVACY["training"]["split_seed"])
        if len(PLANS[_owner].heldout) < 2 or len({s.patient_id for s in PLANS[_owner].heldout}) < 2:
            raise PrivacyDataError("calibration needs held-out scans of at least two patients (role heldout)")
    except PrivacyDataError as e:
        raise WorkflowError(f"privacy filter for dataset {_owner}: {e}") from None


def privacy_synthetic_images(wildcards):
    return [p for d in PRIVACY_TARGETS[wildcards.dataset] for p in synthetic_images(d)]


def privacy_truth(owner):
    """Known sources of spiked synthetic volumes: replica of which training patient."""
    out = {}
    for d in PRIVACY_TARGETS[owner]:
        if PLANS[d].spiked:
            plan_ = PLANS[TRAINING_OF[d]]
            out[d] = {r["id"]: {"kind": "replica" if r["kind"] == "replica" else "nonreplica",
                                "source_patient": plan_.scan(r["source_id"]).patient_id} for r in PLANS[d].spiked}
    return out


def anonymise_labels(wildcards):
    """The class-label table: the user's file, or the demo's own (from the simulation truth)."""
    given = ANON["datasets"][wildcards.dataset]["labels"]
    return given if given else f"results/anonymise/{wildcards.dataset}/classes.tsv"


def _check_user_labels():
    """User labels exist before any job: refuse bad ones now, not after the embeddings."""
    from synthaudit.anonymise.data import LabelError, label_problems, read_labels, validation_mask

    for dataset, spec in ANON["datasets"].items():
        if not spec["labels"]:
            continue  # the demo's own table, checked when it exists
        where = f"anonymise.datasets.{dataset}"
        try:
            train, splits = read_labels(spec["labels"], spec["column"], [s.id for s in PLANS[dataset].train],
                                        "training")
            test, _ = read_labels(spec["labels"], spec["column"], [s.id for s in PLANS[dataset].heldout], "held-out")
        except LabelError as e:
            raise WorkflowError(f"{where}: {e}") from None
        try:
            validation = validation_mask(train, [s.patient_id for s in PLANS[dataset].train], splits,
                                         ANON["validation_fraction"], ANON["split_seed"])
        except LabelError:
            validation = None
        problems = label_problems(train, test, ANON["k_same"], validation)
        if problems:
            raise WorkflowError(f"{where} ({spec['labels']}, column {spec['column']!r}):\n  - " + "\n  - ".join(problems))


_check_user_labels()


def augmented_datasets():
    """Spiked datasets with augmented replicas: they get the evaluation per replica kind."""
    return [d for d in SPIKED_DATASETS if (config["datasets"][d]["synthetic"]["spiked"].get("augmented") or {})
            .get("n_per_kind", 0) > 0 and d in RATED_DATASETS]


AUGMENTED_DATASETS = augmented_datasets()
