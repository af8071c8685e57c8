"""The workflow's plan: which datasets get which stage, with which measures, volumes and paths.

Why: Snakemake needs every id and file when it parses the rules (no checkpoints). Computed
once here from the validated params, the plan is plain Python that tests check without
Snakemake; the rule files (workflow/rules/common.smk) only look it up.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import re
from pathlib import Path

from . import registry
from .config import ParamsError, default_of, resolve_datasets, validate_params, with_sweep
from .generate.config import diffusion_config
from .privacy.data import PrivacyDataError, check_patients, patient_split
from .relict import search as relict_search
from .relict import shards as relict_shards
from .sources import DatasetPlan, SourceError, generator_training_subset, plan_dataset

# generator settings that do not change what a training learns: a checkpoint resumes across them
NOT_SHAPING = ("epochs", "num_inference_steps", "sample_batch_size")


class PlanError(ValueError):
    """The params or the data cannot be planned; the message says what to fix."""


def alternatives(names) -> str:
    """A regex matching exactly these names (a never-matching one when empty)."""
    return "|".join(re.escape(n) for n in names) if names else "(?!x)x"


def label_of(image_path: str) -> str:
    """The label map stored beside an image (…/images/x.nii.gz -> …/labels/x.nii.gz)."""
    path = Path(image_path)
    return str(path.parent.parent / "labels" / path.name)


class WorkflowPlan:
    """Every dataset's volumes and the datasets each stage runs on, from one params dict.

    Raises PlanError when the params are invalid, a dataset's inputs are inconsistent, or
    privacy filters or anonymisation labels cannot work on the data (before any job runs).
    """

    def __init__(self, config: dict):
        try:
            # the schema's defaults filled once (config.fill_defaults): the plan states none itself
            config = self.config = validate_params(config)
            # training_from datasets become full entries that read the training side from the
            # named dataset; generator_sweep adds one dataset per training-set size
            self.dataset_cfg = resolve_datasets(with_sweep(config))
            self.plans: dict[str, DatasetPlan] = {n: plan_dataset(n, ds) for n, ds in self.dataset_cfg.items()}
        except (ParamsError, SourceError) as e:
            raise PlanError(str(e)) from None
        cfg = self.dataset_cfg
        self.datasets = list(self.plans)
        # the dataset whose training set (and preprocessing outputs) a dataset uses
        self.training_of = {d: cfg[d].get("training_from") or d for d in self.datasets}
        self.own_training = [d for d in self.datasets if self.training_of[d] == d]
        self.demo_datasets = [d for d in self.own_training if cfg[d]["source"] == "demo_ncct"]
        self.tof_datasets = [d for d in self.datasets if cfg[d]["source"] == "demo_tof"]
        self.spiked_datasets = [d for d in self.datasets if cfg[d]["synthetic"]["source"] == "spiked"]
        self.perturbed_datasets = [d for d in self.spiked_datasets if d not in self.tof_datasets]
        self.ldm_datasets = [d for d in self.datasets if cfg[d]["synthetic"]["source"] == "ldm"]
        self.imported_datasets = [d for d in self.datasets
                                  if d not in self.spiked_datasets and d not in self.ldm_datasets]
        self.sweep = config.get("generator_sweep") or {}
        self.sweep_datasets = ([f"{self.sweep['dataset']}_n{n}" for n in self.sweep["n_training"]]
                               if self.sweep.get("dataset") else [])
        # a generator's autoencoder (and latents): its own, except in the sweep, where only the
        # diffusion model's training set varies
        self.ae_owner = {d: self.sweep["dataset"] if d in self.sweep_datasets else d for d in self.ldm_datasets}
        self.ae_datasets = [d for d in self.ldm_datasets if self.ae_owner[d] == d]
        # the review outputs: the sweep's datasets are summarised by the sweep instead
        self.reviewed_datasets = [d for d in self.datasets if d not in self.sweep_datasets]

        self.measures = list(config["relict"]["measures"])
        self.alignment = config["relict"]["alignment"]
        self.aligned_datasets = [d for d in self.alignment["datasets"] if d in self.datasets]
        self.aligned_measures = [f"{m}_aligned" for m in self.alignment["measures"]]
        self.measures_by_dataset = {d: self.measures_of(d) + (self.aligned_measures if d in self.aligned_datasets
                                                               else []) for d in self.datasets}
        # measures of the all-pairs jobs (the aligned variants come from relict_align)
        self.image_measures = registry.by_level(self.measures, "image")
        self.feature_measures = registry.by_level(self.measures, "feature")
        self.seg_measures = registry.by_level(self.measures, "segmentation")
        self.seg_datasets = [d for d in self.datasets if set(self.measures_by_dataset[d]) & set(self.seg_measures)]
        self.feature_datasets = [d for d in self.datasets
                                 if set(self.measures_by_dataset[d]) & set(self.feature_measures)]
        self.unet_datasets = [d for d in self.seg_datasets if cfg[d]["segmentation"]["source"] == "unet"]
        self.nnunet_datasets = [d for d in self.seg_datasets if cfg[d]["segmentation"]["source"] == "nnunet"]
        # every scan labelled: labels are carried onto the grid in the image's job (one job per scan)
        self.labelled_datasets = [d for d in self.own_training
                                  if all(self.has_label(d, s.id) for s in self.plans[d].scans)]
        self.unlabelled_datasets = [d for d in self.own_training if d not in self.labelled_datasets]
        self.compute = config["compute"]
        self.rated_datasets = [d for d in self.datasets if self.ratings_file(d) is not None]
        self.filter_datasets = [d for d in self.datasets if cfg[d].get("filter_with")]

        # calibrated replica calls: a training set's held-out scans, scored against it by every
        # measure its synthetic sets use, are the null of "a new patient"
        self.calibration = config["relict"]["calibration"]
        self.calibration_bases = [b for b in self.own_training if self.plans[b].heldout]
        self.heldout_measures = {
            b: [m for m in self.measures + self.aligned_measures
                if any(self.training_of[d] == b and m in self.measures_by_dataset[d] for d in self.datasets)
                and (registry.get(m).level != "segmentation" or self.heldout_labels_available(b))]
            for b in self.calibration_bases}
        self.heldout_seg_bases = [b for b in self.calibration_bases
                                  if set(self.heldout_measures[b]) & set(self.seg_measures)]
        self.heldout_aligned_bases = [b for b in self.calibration_bases
                                      if set(self.heldout_measures[b]) & set(self.aligned_measures)]
        self.calibrated = {d: [m for m in self.measures_by_dataset[d]
                               if m in self.heldout_measures.get(self.training_of[d], [])] for d in self.datasets}
        self.copies_datasets = [d for d in self.reviewed_datasets if self.calibrated[d]]
        # the matched null (relict.calibration.matched_null; relict.texture): per synthetic set, its
        # training set's held-out scans degraded to the samples' own smoothness and noise, scored
        # again by every calibrated measure but the segmentation level's (labels are not blurred)
        self.matched_datasets = ([d for d in self.datasets if self.calibrated[d]]
                                 if self.calibration.get("matched_null") else [])
        self.matched_aligned_datasets = [d for d in self.matched_datasets
                                         if set(self.calibrated[d]) & set(self.aligned_measures)]
        self.texture_datasets = sorted(set(self.copies_datasets) | set(self.matched_datasets))
        self.texture_bases = sorted({self.training_of[d] for d in self.texture_datasets})  # their held-out side
        # local replicas (relict.local): block-wise ratios, calibrated on the same held-out scans
        self.local = config["relict"]["local"]
        # the reviewed sets (the generator sweep's sets are scored for its curve only)
        self.local_datasets = ([d for d in self.reviewed_datasets if self.training_of[d] in self.calibration_bases
                                and self.plans[d].synthetic] if self.local["enabled"] else [])

        # shortlist search (relict.search): one mode per training set, so that a dataset's
        # synthetic volumes and its held-out null are searched alike
        self.search = config["relict"]["search"]
        self.n_closest = int(config["relict"]["n_closest"])
        self.search_mode, self.shortlist_k = {}, {}
        for b in sorted(set(self.training_of.values())):
            users = [d for d in self.datasets if self.training_of[d] == b]
            plan = relict_search.search_plan(max([len(self.plans[d].synthetic) for d in users] or [0]),
                                             len(self.plans[b].heldout), len(self.plans[b].train),
                                             self.n_closest, self.search)
            self.search_mode[b] = plan["mode"]
            self.shortlist_k[b] = relict_search.shortlist_size(self.n_closest, max(1, len(self.plans[b].train)),
                                                               float(self.search["shortlist"]["factor"]))

        # generative-model recall: held-out distances computed once per training set
        self.recall = config["relict"]["recall"]
        self.recall_datasets = [d for d in self.datasets
                                if self.plans[d].heldout and self.recall["measure"] in self.measures_by_dataset[d]]
        self.recall_bases = sorted({self.training_of[d] for d in self.recall_datasets})
        # the sweep's points in order of training-set size: its datasets and the swept generator
        self.sweep_points = (sorted(self.sweep_datasets + [self.sweep["dataset"]],
                                    key=lambda d: len(self.generator_training_ids(d)))
                             if self.sweep_datasets else [])

        # fidelity beside privacy (synthaudit.fidelity): the reviewed sets with feature embeddings and
        # a training set with held-out scans (the floor and C_T's test sample)
        self.fidelity = config["fidelity"]
        self.fidelity_datasets = ([d for d in self.reviewed_datasets if d in self.feature_datasets
                                   and self.training_of[d] in self.calibration_bases and self.plans[d].synthetic]
                                  if self.fidelity["enabled"] else [])
        # FRD within each label class (fidelity.frd_classes): where the segmentation level has label maps
        # of the samples, and of the training set's held-out scans (the floor)
        self.frd_class_datasets = [d for d in self.fidelity_datasets if self.fidelity["frd"]
                                   and self.fidelity["frd_classes"] and d in self.seg_datasets
                                   and self.training_of[d] in self.heldout_seg_bases]

        # membership inference (synthaudit.membership): every set with samples whose training set has held-out
        # scans (the non-members), the generator sweep's too (fewer training patients: more exposed)
        self.membership = config["membership"]
        self.membership_datasets = ([d for d in self.datasets if self.training_of[d] in self.calibration_bases
                                     and self.plans[d].synthetic] if self.membership["enabled"] else [])

        self.privacy = config.get("privacy") or {}
        self.privacy_sets = list(self.privacy.get("training_sets") or [])
        self.privacy_ae = self.privacy.get("latent_autoencoder")
        # the synthetic sets a training set's filters judge (the sweep's are summarised by the sweep)
        self.privacy_targets = {o: [d for d in self.reviewed_datasets if self.training_of[d] == o]
                                for o in self.privacy_sets}
        self.privacy_filters = ([f"filter{i}" for i in range(self.privacy["consistency"]["n_filters"])]
                                if self.privacy else [])
        self.privacy_runs = [(o, s) for o in self.privacy_sets for s in self.privacy_spaces(o)]
        self.anonymise = config.get("anonymise") or {"datasets": {}}
        self.anonymise_datasets = list(self.anonymise["datasets"])
        # spiked datasets with augmented replicas get the evaluation per replica kind
        self.augmented_datasets = [
            d for d in self.spiked_datasets
            if (cfg[d]["synthetic"]["spiked"].get("augmented") or {"n_per_kind": 0})["n_per_kind"] > 0
            and d in self.rated_datasets]
        self.feature_study = config.get("feature_study") or {"datasets": [], "networks": {}}
        self.study_datasets = [d for d in self.feature_study["datasets"] if d in self.datasets]
        self.study_networks = list(self.feature_study["networks"])
        self._check_privacy_data()
        self._check_anonymise_labels()

    # -- measures --------------------------------------------------------------------------

    def measures_of(self, dataset: str) -> list[str]:
        """The measures that apply to a dataset: segmentation level only with a segmentation
        block, multiclass variants only with more than one class."""
        seg = self.dataset_cfg[dataset].get("segmentation")
        chosen = self.dataset_cfg[dataset].get("measures") or self.measures
        out = []
        for m in self.measures:
            if m not in chosen:
                continue
            info = registry.get(m)
            if info.level == "segmentation" and not seg:
                continue
            if info.multiclass and len(seg["classes"]) < 2:
                continue
            out.append(m)
        return out

    def rating_measure(self, dataset: str) -> str:
        """The measure that ranks the rating sheet (the dataset's first when that one is not computed)."""
        wanted = self.config["relict"]["review"]["rating_measure"]
        measures = self.measures_by_dataset[dataset]
        return wanted if wanted in measures else measures[0]

    def measure_shards(self, dataset: str) -> list[str]:
        """Shard names of a dataset's image- and segmentation-level measures (relict.shards)."""
        p = self.plans[dataset]
        return relict_shards.shard_names(len(p.synthetic), len(p.train), self.compute["synthetic_shards"],
                                         self.compute["training_shards"])

    def shard_of(self, dataset: str, shard: str, items, axis: str) -> list:
        """The part of ``items`` (all synthetic or all training volumes, planned order) in ``shard``."""
        p = self.plans[dataset]
        blocks = relict_shards.shard_blocks(shard, len(p.synthetic), len(p.train), self.compute["synthetic_shards"],
                                            self.compute["training_shards"])
        return list(items)[blocks[0] if axis == "synthetic" else blocks[1]]

    def measure_benchmarks(self, dataset: str, measure: str) -> list[str]:
        """Benchmark files of one measure's jobs (one per shard; one file at feature level)."""
        if measure in self.feature_measures:
            return [f"benchmarks/relict_measure/{dataset}/{measure}.tsv"]
        if measure in self.aligned_measures:  # the plain measure's jobs, then the alignment search (shared)
            return (self.measure_benchmarks(dataset, registry.get(measure).aligned_from)
                    + [f"benchmarks/relict_align/{dataset}.tsv"])
        return [f"benchmarks/relict_measure/{dataset}/{measure}/{s}.tsv" for s in self.measure_shards(dataset)]

    def heldout_labels_available(self, base: str) -> bool:
        """Whether the held-out scans of a training set get label maps (the segmentation level's null)."""
        seg = self.dataset_cfg[base].get("segmentation")
        if not seg:
            return False
        heldout = self.plans[base].heldout
        if seg["source"] == "labels":
            return all(self.has_label(base, s.id) for s in heldout)
        if seg["source"] == "nnunet" and seg["nnunet"]["predictions"]:
            return all(Path(seg["nnunet"]["predictions"], f"{s.id}.nii.gz").is_file() for s in heldout)
        return True  # unet, or an nnU-Net command: they label the held-out scans too

    def shortlist_mem_mb(self, grid_path: str, n_queries: int, n_training: int) -> int:
        """Memory of a relict_shortlist job: every volume's block means of both stages in float32,
        the training side again in float64 for the matrix product, and a chunk of distances."""
        grid = json.loads(Path(grid_path).read_text())
        factors = relict_search.block_factors(float(self.search["shortlist"]["block_mm"]), grid["spacing_mm"],
                                              grid["shape"])
        dims = math.prod(math.ceil(n / f) for n, f in zip(grid["shape"], factors))
        volume = math.prod(grid["shape"]) * 8 * 3  # one volume read and its float64 copies
        vectors = 2 * 4 * (n_queries + n_training) * dims + 8 * n_training * dims  # both stages; float64 copy
        return int(1500 + (vectors + 8 * 32e6 + volume) / 2**20)  # + one chunk of distances, one volume

    def shortlisted(self, dataset: str) -> bool:
        """Whether the dataset's training set is searched by shortlist (relict.search)."""
        return self.search_mode.get(self.training_of[dataset]) == "shortlist"

    def shortlist_file(self, dataset: str, role: str, measure: str | None = None) -> list[str]:
        """The shortlist of the dataset's synthetic volumes or (role heldout) of its training set's
        held-out scans; [] when searched exhaustively or the measure is not shortlisted."""
        if not self.shortlisted(dataset) or (measure is not None and not relict_search.is_shortlisted(measure)):
            return []
        if role == "heldout":
            return [f"results/relict/{self.training_of[dataset]}/shortlist/heldout.npz"]
        return [f"results/relict/{dataset}/shortlist/{role}.npz"]  # synthetic, or matched (the degraded null)

    def matched(self, dataset: str, measure: str) -> bool:
        """Whether this dataset's null for this measure is the matched one (held-out scans degraded
        like its samples) rather than the held-out scans as they are."""
        return dataset in self.matched_datasets and registry.get(measure).level != "segmentation"

    def heldout_matrix(self, dataset: str, measure: str):
        """The null's distances to the training set for this measure ([] when not calibrated): the
        held-out scans, or (matched null) those scans degraded like this dataset's samples."""
        if measure not in self.calibrated[dataset]:
            return []
        if self.matched(dataset, measure):
            return f"results/relict/{dataset}/matched/{measure}.npz"
        return f"results/relict/{self.training_of[dataset]}/heldout/{measure}.npz"

    def null_shortlist(self, dataset: str, measure: str) -> list[str]:
        """The shortlist the null's matrix was searched with ([] when exhaustive or not calibrated)."""
        if not self.heldout_matrix(dataset, measure):
            return []
        return self.shortlist_file(dataset, "matched" if self.matched(dataset, measure) else "heldout", measure)

    def null_alignment_recall(self, dataset: str, measure: str) -> list[str]:
        """The recall check of the null's aligned matrix ([] for measures that are not aligned)."""
        if measure not in self.aligned_measures or not self.heldout_matrix(dataset, measure):
            return []
        if self.matched(dataset, measure):
            return [f"results/relict/{dataset}/matched/alignment_recall.json"]
        return [f"results/relict/{self.training_of[dataset]}/heldout/alignment_recall.json"]

    def matched_images(self, dataset: str) -> list[str]:
        """The held-out scans degraded like this dataset's samples (the matched null's volumes)."""
        return [f"results/relict/{dataset}/matched/images/{s.id}.nii.gz"
                for s in self.plans[self.training_of[dataset]].heldout]

    def matched_embedding_reuse(self, dataset: str) -> list[str]:
        """What the matched null's embedding job needs to read the held-out scans' embeddings where the
        null left those scans as they are (synthaudit.features.compare.undegraded_embeddings): the set's
        texture, the training set's held-out embeddings and its held-out scans. [] where those
        embeddings are made for nothing else (fidelity, anonymisation): reusing them never adds a job."""
        base = self.training_of[dataset]
        if base not in self.anonymise_datasets and not any(self.training_of[d] == base for d in self.fidelity_datasets):
            return []
        return [f"results/relict/{dataset}/texture.json", f"results/relict/features/{base}/heldout.npz",
                *[f"results/preprocessed/{base}/images/{s.id}.nii.gz" for s in self.plans[base].heldout]]

    def heldout_source_patients(self, dataset: str) -> dict[str, str]:
        """Synthetic volumes made from a held-out scan (spiked non-replicas) -> that scan's patient."""
        held = {s.id: s.patient_id for s in self.plans[self.training_of[dataset]].heldout}
        return {r["id"]: held[r["source_id"]] for r in self.plans[dataset].spiked if r.get("source_id") in held}

    def membership_measures(self, dataset: str) -> list[str]:
        """The image measures whose closest-sample attack runs on a set: those of membership.attacks that the
        set's all-pairs image level computes (its training x samples matrix is reused)."""
        return [m for m in self.image_measures if f"closest_{m}" in self.membership["attacks"]
                and m in self.measures_by_dataset[dataset]]

    def membership_embeddings(self, dataset: str) -> list[str]:
        """The feature level's embeddings the embedding attacks read (training, held-out, samples); none where
        the set has no feature level or no embedding attack is asked for."""
        if dataset not in self.feature_datasets or not {"closest_emb_rmse", "density_ratio"} & set(
                self.membership["attacks"]):
            return []
        base = self.training_of[dataset]
        return [f"results/relict/features/{base}/train.npz", f"results/relict/features/{base}/heldout.npz",
                f"results/relict/features/{dataset}/synthetic.npz"]

    def membership_filter_scores(self, dataset: str) -> list[str]:
        """The privacy filters' best scores of every real scan against the set's samples (privacy_evaluate), one
        file per filter space: the filter attack, where the training set has filters judging this set."""
        base = self.training_of[dataset]
        if "filter" not in self.membership["attacks"] or dataset not in self.privacy_targets.get(base, []):
            return []
        return [f"results/privacy/{base}/{space}/membership.tsv" for space in self.privacy_spaces(base)]

    def membership_inputs(self, dataset: str) -> dict:
        """Who the attacker's candidates are (synthaudit.membership.audit.candidates): the training and
        held-out scans with their patients, the scans the generator trained on (a sweep's subset) and the
        held-out patients whose scan is in the synthetic set."""
        p = self.plans[dataset]
        trained = self.generator_training_ids(dataset) if dataset in self.ldm_datasets else None
        return {"train": [[s.id, s.patient_id] for s in p.train], "heldout": [[s.id, s.patient_id] for s in p.heldout],
                "trained_ids": trained, "released_patients": sorted(set(self.heldout_source_patients(dataset).values()))}

    def membership_sets(self) -> dict[str, dict]:
        """Every membership set's inputs (synthaudit.membership.stage.SetFiles' fields), for the stage's one
        job."""
        out = {}
        for d in self.membership_datasets:
            filters = self.membership_filter_scores(d)
            out[d] = {"heldout": self.preprocessed_images(d, role="heldout"), "synthetic": self.synthetic_images(d),
                      "synthetic_ids": self.split_ids(d, "synthetic"),
                      "training_distances": [f"results/relict/{d}/measures/{m}.npz" for m in self.membership_measures(d)],
                      "measures": self.membership_measures(d), "embeddings": self.membership_embeddings(d),
                      "filter_scores": filters, "filter_spaces": [Path(p).parent.name for p in filters],
                      "grid": self.grid_json(d), "candidates": self.membership_inputs(d)}
        return out

    def membership_files(self, sets: dict[str, dict] | None = None) -> list[str]:
        """What the membership job reads (its inputs), from :meth:`membership_sets` (or its answer, ``sets``)."""
        sets = (self.membership_sets() if sets is None else sets).values()
        keys = ("heldout", "synthetic", "training_distances", "embeddings", "filter_scores")
        return sorted({p for s in sets for k in keys for p in s[k]} | {s["grid"] for s in sets})

    def ratings_file(self, dataset: str) -> str | None:
        """The rating table that evaluation uses, or None (no evaluation for this dataset)."""
        given = self.dataset_cfg[dataset].get("ratings")
        if given:
            return given
        if dataset in self.spiked_datasets:
            return f"results/synthetic/{dataset}/ratings_reference.tsv"
        return None

    # -- real scans ------------------------------------------------------------------------

    def declared_classes(self, dataset: str) -> int | None:
        """Number of label values a dataset declares (None without a segmentation block: not checked)."""
        seg = self.dataset_cfg[dataset].get("segmentation")
        return len(seg["classes"]) if seg else None

    def raw_image(self, dataset: str, scan_id: str) -> str:
        """The raw image of a real scan: the user's file, or the demo cohort's output."""
        scan = self.plans[dataset].scan(scan_id)
        if scan.image is not None:
            return scan.image
        return f"results/cohort/{dataset}/images/{scan_id}.nii.gz"

    def raw_label(self, dataset: str, scan_id: str) -> str:
        scan = self.plans[dataset].scan(scan_id)
        if scan.image is not None:
            if scan.label is None:
                raise PlanError(f"dataset {dataset}: scan {scan.id} has no label file")
            return scan.label
        return f"results/cohort/{dataset}/labels/{scan_id}.nii.gz"

    def has_label(self, dataset: str, scan_id: str) -> bool:
        s = self.plans[dataset].scan(scan_id)
        return s.image is None or s.label is not None

    def manifest_rows(self, dataset: str) -> list[dict]:
        rows = []
        for s in self.plans[dataset].scans:
            demo = s.image is None
            rows.append({"id": s.id, "patient_id": s.patient_id, "role": s.role, "session": s.session,
                         "image": f"images/{s.id}.nii.gz" if demo else s.image,
                         "label": f"labels/{s.id}.nii.gz" if demo else s.label})
        return rows

    def grid_reference(self, dataset: str):
        """register: false takes the grid of the first training volume; else none is needed."""
        if self.dataset_cfg[dataset]["preprocess"]["register"]:
            return []
        return self.raw_image(dataset, sorted(s.id for s in self.plans[dataset].train)[0])

    def registers_to_reference(self, dataset: str) -> bool:
        """preprocess.registration.target is ``reference`` (each scan registered to a training scan)."""
        pre = self.dataset_cfg[dataset]["preprocess"]
        return bool(pre["register"]) and pre["registration"]["target"] == "reference"

    def registration_reference(self, dataset: str) -> str:
        """The raw scan every scan is registered to with ``registration.target: reference``: the
        first training scan in id order (the same one ``register: false`` takes its grid from)."""
        return self.raw_image(dataset, sorted(s.id for s in self.plans[dataset].train)[0])

    def registration_target(self, dataset: str) -> dict[str, str]:
        """What a scan job registers to, as named inputs: nothing beyond the template, or the
        dataset's registered reference scan (image, metric mask, transform to the template)."""
        if not self.registers_to_reference(dataset):
            return {}
        base = f"results/preprocessed/{self.training_of[dataset]}/registration_reference"
        return {"reference": f"{base}.nii.gz", "reference_mask": f"{base}_mask.nii.gz",
                "reference_transform": f"{base}.tfm"}

    def qc_target(self, dataset: str) -> dict:
        """What the registration QC correlates each scan with: the registration's own target on
        the output grid (the reference scan's preprocessed image with ``registration.target:
        reference``, else the template's ROI), its name, the scan that is the target, and the
        outlier rule's settings (``qc_outlier_mads``, ``qc_min_correlation``)."""
        base = self.training_of[dataset]
        reg = self.dataset_cfg[dataset]["preprocess"].get("registration")  # absent when register: false
        settings = {k: reg[k] if reg else default_of(f"datasets.*.preprocess.registration.{k}")
                    for k in ("qc_outlier_mads", "qc_min_correlation")}
        if self.registers_to_reference(dataset):
            ref = sorted(s.id for s in self.plans[dataset].train)[0]
            return {"path": f"results/preprocessed/{base}/images/{ref}.nii.gz", "name": "reference scan", "id": ref,
                    **settings}
        return {"path": f"results/preprocessed/{base}/template_roi.nii.gz", "name": "template", "id": None, **settings}

    def preprocessed_images(self, dataset: str, role: str | None = None) -> list[str]:
        base = self.training_of[dataset]
        return [f"results/preprocessed/{base}/images/{s.id}.nii.gz"
                for s in self.plans[dataset].scans if role is None or s.role == role]

    def preprocessed_labels(self, dataset: str) -> list[str]:
        base = self.training_of[dataset]
        return [f"results/preprocessed/{base}/labels/{s.id}.nii.gz"
                for s in self.plans[dataset].scans if self.has_label(dataset, s.id)]

    def training_labels(self, dataset: str) -> list[str]:
        return [label_of(p) for p in self.preprocessed_images(dataset, role="train")]

    def grid_json(self, dataset: str) -> str:
        """The preprocessed grid every volume of a dataset lies on (the training dataset's)."""
        return f"results/preprocessed/{self.training_of[dataset]}/grid.json"

    def training_qc(self, dataset: str) -> list[str]:
        base = self.training_of[dataset]
        return [f"results/preprocessed/{base}/qc/{s.id}.json" for s in self.plans[dataset].train]

    def training_features(self, dataset: str) -> str:
        return f"results/relict/features/{self.training_of[dataset]}/train.npz"

    # -- synthetic volumes and splits ------------------------------------------------------

    def synthetic_images(self, dataset: str) -> list[str]:
        return [f"results/synthetic/{dataset}/images/{v.id}.nii.gz" for v in self.plans[dataset].synthetic]

    def spiked_row(self, dataset: str, syn: str) -> dict:
        for r in self.plans[dataset].spiked:
            if r["id"] == syn:
                return r
        raise PlanError(f"dataset {dataset}: no synthetic volume {syn}")

    def spiked_source(self, dataset: str, syn: str) -> str:
        source = self.spiked_row(dataset, syn)["source_id"]
        return f"results/preprocessed/{self.training_of[dataset]}/images/{source}.nii.gz"

    def spiked_source_label(self, dataset: str, syn: str) -> str:
        return label_of(self.spiked_source(dataset, syn))

    def user_synthetic_label(self, dataset: str, syn: str) -> str:
        """A user's label file for a synthetic volume: from the manifest, or the labels folder."""
        vol = self.plans[dataset].synthetic_volume(syn)
        if vol.label:
            return vol.label
        folder = self.dataset_cfg[dataset]["segmentation"].get("synthetic_labels")
        if not folder:
            raise PlanError(f"dataset {dataset}: segmentation.source is labels but synthetic "
                            f"volume {syn} has no label (give segmentation.synthetic_labels)")
        return f"{folder}/{syn}.nii.gz"

    def volume_image(self, dataset: str, vid: str) -> str:
        """Preprocessed image of a real scan or a synthetic volume, by id."""
        if vid in {v.id for v in self.plans[dataset].synthetic}:
            return f"results/synthetic/{dataset}/images/{vid}.nii.gz"
        return f"results/preprocessed/{self.training_of[dataset]}/images/{vid}.nii.gz"

    def split_images(self, dataset: str, split: str) -> list[str]:
        """The volumes of one split: synthetic, train or heldout (real, preprocessed), or matched
        (the held-out scans degraded like the dataset's samples)."""
        if split == "synthetic":
            return self.synthetic_images(dataset)
        if split == "matched":
            return self.matched_images(dataset)
        return self.preprocessed_images(dataset, role=split)

    def split_ids(self, dataset: str, split: str) -> list[str]:
        p = self.plans[dataset]
        if split == "synthetic":
            return [v.id for v in p.synthetic]
        if split == "matched":
            return [s.id for s in self.plans[self.training_of[dataset]].heldout]
        return [s.id for s in (p.train if split == "train" else p.heldout)]

    def split_owner(self, dataset: str, split: str) -> str:
        """Whose job extracts a split's features: the set itself for its samples, its training set for
        the training and held-out scans (made once, shared by the sets that train on them)."""
        return dataset if split == "synthetic" else self.training_of[dataset]

    def fidelity_radiomics(self, dataset: str, split: str) -> list[str]:
        """The FRD features a fidelity job reads: the training set's train and held-out scans', the
        set's own samples'; none where fidelity.frd is off."""
        if not self.fidelity["frd"]:
            return []
        return [f"results/fidelity/radiomics/{self.split_owner(dataset, split)}/{split}.npz"]

    def fidelity_class_radiomics(self, dataset: str, split: str) -> list[str]:
        """The per-class FRD features a fidelity job reads (:meth:`fidelity_radiomics`'s, within each
        label class's region); none where FRD per class does not run for the set."""
        if dataset not in self.frd_class_datasets:
            return []
        return [f"results/fidelity/radiomics/{self.split_owner(dataset, split)}/{split}_classes.npz"]

    def fidelity_slices(self, dataset: str, split: str) -> list[str]:
        """The 2.5D FD's slice features a fidelity job reads; none where fidelity.fd_2p5d has no weights."""
        if not self.fidelity["fd_2p5d"]["weights"]:
            return []
        return [f"results/fidelity/slices/{self.split_owner(dataset, split)}/{split}.npz"]

    def fidelity_inputs(self, dataset: str) -> dict[str, str | list[str]]:
        """What a fidelity job reads, by the names its script uses: the embeddings of the training set's
        train and held-out scans and of the set's samples; FRD's features of each split, whole and within
        each label class; the 2.5D FD's slice features (the last three empty where they do not run)."""
        base = self.training_of[dataset]
        out: dict[str, str | list[str]] = {"train": f"results/relict/features/{base}/train.npz",
                                           "heldout": f"results/relict/features/{base}/heldout.npz",
                                           "synthetic": f"results/relict/features/{dataset}/synthetic.npz"}
        for split in ("train", "heldout", "synthetic"):
            out[f"radiomics_{split}"] = self.fidelity_radiomics(dataset, split)
            out[f"classes_{split}"] = self.fidelity_class_radiomics(dataset, split)
            out[f"slices_{split}"] = self.fidelity_slices(dataset, split)
        return out

    def verdict_inputs(self) -> dict[str, str | list[str]]:
        """What the verdict reads, by the names its script uses: the RELICT metrics and every reviewed set's
        rankings, copies, texture, local level (and its figure), fidelity and membership results."""
        reviewed = self.reviewed_datasets
        local = [d for d in reviewed if d in self.local_datasets]
        return {"metrics": "results/metrics/relict.json",
                "rankings": [f"results/relict/{d}/ranking_{m}.tsv" for d in reviewed
                             for m in self.measures_by_dataset[d]],
                "copies": [f"results/relict/{d}/copies.json" for d in self.copies_datasets],
                "texture": [f"results/relict/{d}/texture.json" for d in self.copies_datasets if d in reviewed],
                "local": [f"results/relict/{d}/local/local.json" for d in local],
                "local_figures": [f"results/figures/{d}/local_copies.png" for d in local],
                "fidelity": [f"results/fidelity/{d}/fidelity.json" for d in self.fidelity_datasets],
                "membership": [f"results/membership/{d}/membership.json" for d in reviewed
                               if d in self.membership_datasets]}

    def split_labels(self, dataset: str, split: str) -> list[str]:
        """The label maps of one split's volumes (:meth:`split_images`' order), as the segmentation
        level reads them."""
        return [self.seg_label_path(dataset, i, split == "synthetic") for i in self.split_ids(dataset, split)]

    # -- segmentation level ----------------------------------------------------------------

    def seg_label_path(self, dataset: str, vid: str, synthetic: bool) -> str:
        """The label map a segmentation-level measure uses for one volume."""
        source = self.dataset_cfg[dataset]["segmentation"]["source"]
        owner = dataset if synthetic else self.training_of[dataset]  # training labels are made once
        if source == "labels":
            kind = "synthetic" if synthetic else "preprocessed"
            return f"results/{kind}/{owner}/labels/{vid}.nii.gz"
        return f"results/relict/segmentation/{owner}/labels/{vid}.nii.gz"

    def seg_labels(self, dataset: str, split: str) -> list[str]:
        p = self.plans[dataset]
        ids = [v.id for v in p.synthetic] if split == "synthetic" else [s.id for s in p.train]
        return [self.seg_label_path(dataset, i, split == "synthetic") for i in ids]

    def all_volume_ids(self, dataset: str) -> list[str]:
        """What a segmentation model must label: the synthetic volumes, and the training and
        held-out volumes unless the dataset shares them (training_from), whose labels exist
        already (held-out label maps calibrate the segmentation level's replica calls)."""
        p = self.plans[dataset]
        own = [s.id for s in p.train + p.heldout] if self.training_of[dataset] == dataset else []
        return own + [v.id for v in p.synthetic]

    def nnunet_prediction(self, dataset: str, vid: str) -> str:
        """The user's prediction file, or (command mode) the folder the nnunet_predict rule writes."""
        nn = self.dataset_cfg[dataset]["segmentation"]["nnunet"]
        if nn["predictions"]:
            return f"{nn['predictions']}/{vid}.nii.gz"
        return f"results/relict/segmentation/{dataset}/nnunet_predictions"

    def segmentation_benchmarks(self, dataset: str) -> list[str]:
        """Table 2's extraction time of the segmentation level: the benchmark files of the jobs
        that make the label maps (none when the user gives them: labels, or nnU-Net predictions)."""
        if dataset not in self.seg_datasets or not registry.by_level(self.measures_by_dataset[dataset],
                                                                     "segmentation"):
            return []
        seg = self.dataset_cfg[dataset]["segmentation"]
        if seg["source"] == "unet":
            return [f"benchmarks/segment_predict/{dataset}/unet.tsv"]
        if seg["source"] == "nnunet" and not (seg.get("nnunet") or {}).get("predictions"):
            return [f"benchmarks/segment_predict/{dataset}/nnunet.tsv"]
        return []

    def segmentation_training_benchmarks(self, dataset: str) -> list[str]:
        """The U-Net's training benchmark (reported apart from the extraction time)."""
        if not self.segmentation_benchmarks(dataset) or self.dataset_cfg[dataset]["segmentation"]["source"] != "unet":
            return []
        return [f"benchmarks/segment_train_unet/{self.training_of[dataset]}.tsv"]

    # -- the in-workflow generator ---------------------------------------------------------

    def generator_training_ids(self, dataset: str, subset_only: bool = False) -> list[str]:
        """The training volumes an in-workflow generator learns from (all, or n_training of
        them); with subset_only, an empty list when that is all of them."""
        ldm = self.dataset_cfg[dataset]["synthetic"].get("ldm")
        ids = sorted(s.id for s in self.plans[dataset].train)
        if not ldm or ldm.get("n_training") is None:
            return [] if subset_only else ids
        return generator_training_subset(ids, ldm["n_training"], ldm["seed"])

    def generator_training_images(self, dataset: str) -> list[str]:
        base = self.training_of[dataset]
        return [f"results/preprocessed/{base}/images/{i}.nii.gz" for i in self.generator_training_ids(dataset)]

    def ldm_checkpoint(self, dataset: str, stage: str) -> str:
        """The training checkpoint of one LDM stage, named by a hash of the settings that shape
        the training (not the epochs): changed settings start a fresh checkpoint, the same
        settings (after an interruption, or with more epochs) resume the old one."""
        ldm = self.dataset_cfg[dataset]["synthetic"]["ldm"]
        shaping = {k: v for k, v in ldm[stage].items() if k not in NOT_SHAPING}
        # the diffusion model learns the autoencoder's latents: any change there is new data
        upstream = ldm["autoencoder"] if stage == "diffusion" else None
        key = json.dumps([shaping, upstream, ldm["seed"], self.generator_training_ids(dataset)], sort_keys=True)
        digest = hashlib.sha256(key.encode()).hexdigest()[:12]
        return f"results/generator/{dataset}/checkpoints/{stage}-{digest}.ckpt"

    def ldm_settings(self, dataset: str) -> dict:
        """The generator settings a training rule uses. In the memorisation sweep with
        equal_steps, a smaller training set gets more epochs, so that every generator of the
        sweep takes the same number of optimiser steps (ceil(n / batch_size) per epoch)."""
        ldm = copy.deepcopy(self.dataset_cfg[dataset]["synthetic"]["ldm"])
        if dataset in self.sweep_datasets and self.sweep.get("equal_steps"):
            n_full = len(self.generator_training_ids(self.sweep["dataset"]))
            n = len(self.generator_training_ids(dataset))
            for stage in ("diffusion",):  # the autoencoder is the swept generator's
                settings = diffusion_config(ldm[stage])  # the generator's own defaults filled
                batch = settings["batch_size"]
                steps_full = settings["epochs"] * math.ceil(n_full / batch)
                ldm[stage]["epochs"] = max(1, round(steps_full / math.ceil(n / batch)))
        return ldm

    # -- privacy filters and anonymisation -------------------------------------------------

    def privacy_spaces(self, owner: str) -> list[str]:
        """Image space and a pretrained encoder's features where listed; latent space when the
        named generator learns this training set."""
        wanted = self.privacy["spaces"]
        spaces = [s for s in wanted if s == "image"]
        if "latent" in wanted and self.privacy_ae and self.training_of.get(self.privacy_ae) == owner:
            spaces.append("latent")
        return spaces + [s for s in wanted if s == "pretrained"]

    def privacy_synthetic_images(self, owner: str) -> list[str]:
        return [p for d in self.privacy_targets[owner] for p in self.synthetic_images(d)]

    def privacy_truth(self, owner: str) -> dict:
        """Known sources of spiked synthetic volumes: replica of which training patient."""
        out = {}
        for d in self.privacy_targets[owner]:
            if self.plans[d].spiked:
                base = self.plans[self.training_of[d]]
                out[d] = {r["id"]: {"kind": "replica" if r["kind"] == "replica" else "nonreplica",
                                    "source_patient": base.scan(r["source_id"]).patient_id}
                          for r in self.plans[d].spiked}
        return out

    def anonymise_labels(self, dataset: str) -> str:
        """The class-label table: the user's file, or the demo's own (from the simulation truth)."""
        given = self.anonymise["datasets"][dataset]["labels"]
        return given if given else f"results/anonymise/{dataset}/classes.tsv"

    def _check_privacy_data(self) -> None:
        """Refuse data without re-identification pairs before anything runs."""
        for owner in self.privacy_sets:
            scans, heldout, training = self.plans[owner].scans, self.plans[owner].heldout, self.privacy["training"]
            try:
                check_patients([s.id for s in scans], [s.patient_id for s in scans], [s.role for s in scans],
                               f"privacy.training_sets: dataset {owner}")
                patient_split([s.patient_id for s in scans], [i for i, s in enumerate(scans) if s.role == "train"],
                              training["validation_fraction"], training["split_seed"])
                if len(heldout) < 2 or len({s.patient_id for s in heldout}) < 2:
                    raise PrivacyDataError("calibration needs held-out scans of at least two patients (role heldout)")
            except PrivacyDataError as e:
                raise PlanError(f"privacy filter for dataset {owner}: {e}") from None

    def _check_anonymise_labels(self) -> None:
        """User labels exist before any job: refuse bad ones now, not after the embeddings."""
        from .anonymise.data import LabelError, label_problems, read_labels, validation_mask

        anon = self.anonymise
        for dataset, spec in anon["datasets"].items():
            if not spec["labels"]:
                continue  # the demo's own table, checked when it exists
            where = f"anonymise.datasets.{dataset}"
            p = self.plans[dataset]
            try:
                train, splits = read_labels(spec["labels"], spec["column"], [s.id for s in p.train], "training")
                test, _ = read_labels(spec["labels"], spec["column"], [s.id for s in p.heldout], "held-out")
            except LabelError as e:
                raise PlanError(f"{where}: {e}") from None
            try:
                validation = validation_mask(train, [s.patient_id for s in p.train], splits,
                                             anon["validation_fraction"], anon["split_seed"])
            except LabelError:
                validation = None
            problems = label_problems(train, test, anon["k_same"], validation)
            if problems:
                raise PlanError(f"{where} ({spec['labels']}, column {spec['column']!r}):\n  - "
                                + "\n  - ".join(problems))
