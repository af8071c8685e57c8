# The workflow's plan (synthaudit.workflow_plan: params validated, every dataset's ids and
# the datasets each stage runs on, known at parse time) under the names the rule files use,
# wildcard constraints, and input functions (wildcards -> plan method).

from snakemake.exceptions import WorkflowError
from snakemake.logging import logger

from synthaudit.scheduler_fix import keep_one_reevaluation_timer

# one pending scheduler wake-up at a time: Snakemake 9.27 adds a 1-Hz timer chain per
# finished job (synthaudit/scheduler_fix.py; tests/test_scheduler.py)
_SCHEDULER_FIX = keep_one_reevaluation_timer()
if _SCHEDULER_FIX.startswith("not applied"):
    logger.warning(f"synthaudit scheduler fix {_SCHEDULER_FIX}: Snakemake's own process may poll ever faster")

from synthaudit.config import filter_measures
from synthaudit.devices import describe_here as _describe_device
from synthaudit.resources import provenance

# which synthaudit and which parameters (SHA-256 of params.yaml as loaded, command-line --config
# included): every metrics file and the report's first page record it
_PROVENANCE = provenance(
    {k: v for k, v in config.items() if k not in ("_provenance", "report_verdict")}, device=_describe_device()
)
from synthaudit.workflow_plan import PlanError, WorkflowPlan, alternatives as _alternatives

try:
    PLAN = WorkflowPlan(config)
except PlanError as e:
    raise WorkflowError(str(e)) from None
config.update(PLAN.config)  # the schema's defaults filled (synthaudit.config.fill_defaults): rules read no others
config["_provenance"] = _PROVENANCE  # after the schema check (it allows no unknown keys)
# rules and scripts read the resolved entries (training_from expanded, the sweep's datasets added)
config["datasets"] = PLAN.dataset_cfg

# datasets per stage
PLANS = PLAN.plans
DATASETS = PLAN.datasets
TRAINING_OF = PLAN.training_of
OWN_TRAINING = PLAN.own_training
DEMO_DATASETS = PLAN.demo_datasets
TOF_DATASETS = PLAN.tof_datasets
SPIKED_DATASETS = PLAN.spiked_datasets
PERTURBED_DATASETS = PLAN.perturbed_datasets
LDM_DATASETS = PLAN.ldm_datasets
IMPORTED_DATASETS = PLAN.imported_datasets
LABELLED_DATASETS = PLAN.labelled_datasets
SWEEP = PLAN.sweep
SWEEP_POINTS = PLAN.sweep_points
AE_OWNER = PLAN.ae_owner
AE_DATASETS = PLAN.ae_datasets
REVIEWED_DATASETS = PLAN.reviewed_datasets
RATED_DATASETS = PLAN.rated_datasets
FILTER_DATASETS = PLAN.filter_datasets
AUGMENTED_DATASETS = PLAN.augmented_datasets
SEG_DATASETS = PLAN.seg_datasets
UNET_DATASETS = PLAN.unet_datasets
FEATURE_DATASETS = PLAN.feature_datasets
RECALL_DATASETS = PLAN.recall_datasets
COPIES_DATASETS = PLAN.copies_datasets
CALIBRATION_BASES = PLAN.calibration_bases

# measures
MEASURES = PLAN.measures
MEASURES_BY_DS = PLAN.measures_by_dataset
IMAGE_MEASURES = PLAN.image_measures
FEATURE_MEASURES = PLAN.feature_measures
SEG_MEASURES = PLAN.seg_measures
ALIGN = PLAN.alignment
ALIGNED_DATASETS = PLAN.aligned_datasets
ALIGNED_MEASURES = PLAN.aligned_measures
CALIBRATED = PLAN.calibrated
CALIBRATION = PLAN.calibration
LOCAL = PLAN.local
LOCAL_DATASETS = PLAN.local_datasets
RECALL_CFG = PLAN.recall

# privacy filters (privacy.smk) and feature-space anonymisation (anonymise.smk)
PRIVACY = PLAN.privacy
PRIVACY_SETS = PLAN.privacy_sets
PRIVACY_AE = PLAN.privacy_ae
PRIVACY_TARGETS = PLAN.privacy_targets
PRIVACY_FILTERS = PLAN.privacy_filters
PRIVACY_RUNS = PLAN.privacy_runs
ANON = PLAN.anonymise
ANON_DATASETS = PLAN.anonymise_datasets


wildcard_constraints:
    dataset=_alternatives(DATASETS),
    measure=_alternatives(MEASURES + ALIGNED_MEASURES),
    split="train|synthetic|heldout|matched",
    scan=r"[A-Za-z0-9][A-Za-z0-9._-]*",
    syn=r"[A-Za-z0-9][A-Za-z0-9._-]*",


# Optional long trainings (privacy filters, the in-workflow generator, CVAE anonymisation,
# the feature-level study) run after whatever else is ready: an audit's RELICT rankings,
# ratios and evaluation do not wait behind hours of filter training (Snakemake picks ready
# jobs by priority; the default is 0).
LATER = -10

# plan lookups by dataset (and volume id)
raw_image_path = PLAN.raw_image
preprocessed_images = PLAN.preprocessed_images
preprocessed_labels = PLAN.preprocessed_labels
synthetic_images = PLAN.synthetic_images
split_images = PLAN.split_images
split_ids = PLAN.split_ids
volume_image = PLAN.volume_image
all_volume_ids = PLAN.all_volume_ids
seg_label_path = PLAN.seg_label_path
seg_labels = PLAN.seg_labels
measure_shards = PLAN.measure_shards
measure_benchmarks = PLAN.measure_benchmarks
ratings_file = PLAN.ratings_file
generator_training_ids = PLAN.generator_training_ids
ldm_settings = PLAN.ldm_settings
privacy_truth = PLAN.privacy_truth


# input functions: wildcards -> plan
def ds_cfg(wc):
    return PLAN.dataset_cfg[wc.dataset]


def plan(wc):
    return PLAN.plans[wc.dataset]


def declared_classes(wc):
    return PLAN.declared_classes(wc.dataset)


def raw_image(wc):
    return PLAN.raw_image(wc.dataset, wc.scan)


def raw_label(wc):
    return PLAN.raw_label(wc.dataset, wc.scan)


def manifest_rows(wc):
    return PLAN.manifest_rows(wc.dataset)


def grid_reference(wc):
    return PLAN.grid_reference(wc.dataset)


def registration_reference_image(wc):
    return PLAN.registration_reference(wc.dataset)


def registration_target(wc):
    return PLAN.registration_target(wc.dataset)  # named inputs: unpack()


def grid_json(wc):
    return PLAN.grid_json(wc.dataset)


def training_qc(wc):
    return PLAN.training_qc(wc.dataset)


def training_features(wc):
    return PLAN.training_features(wc.dataset)


def training_labels(wc):
    return PLAN.training_labels(wc.dataset)


def shard_of(wc, items, axis):
    return PLAN.shard_of(wc.dataset, wc.shard, items, axis)


def spiked_ids(dataset):
    return [r["id"] for r in PLANS[dataset].spiked]


def demo_subjects(dataset):
    return sorted({s.patient_id for s in PLANS[dataset].scans})  # simulated patients


def user_synthetic_label(wc):
    return PLAN.user_synthetic_label(wc.dataset, wc.syn)


def nnunet_prediction(wc):
    return PLAN.nnunet_prediction(wc.dataset, wc.vid)


def rating_measure(wc):
    return PLAN.rating_measure(wc.dataset)


def heldout_matrix(wc):
    return PLAN.heldout_matrix(wc.dataset, wc.measure)


def heldout_source_patients(wc):
    return PLAN.heldout_source_patients(wc.dataset)


def generator_training_images(wc):
    return PLAN.generator_training_images(wc.dataset)


def ldm_checkpoint(stage):
    return lambda wc: PLAN.ldm_checkpoint(wc.dataset, stage)


def privacy_synthetic_images(wc):
    return PLAN.privacy_synthetic_images(wc.dataset)


def anonymise_labels(wc):
    return PLAN.anonymise_labels(wc.dataset)
