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
SPIKED_DATASETS = PLAN.spiked_datasets
LDM_DATASETS = PLAN.ldm_datasets
LABELLED_DATASETS = PLAN.labelled_datasets
SWEEP_POINTS = PLAN.sweep_points
AE_OWNER = PLAN.ae_owner
AE_DATASETS = PLAN.ae_datasets
REVIEWED_DATASETS = PLAN.reviewed_datasets
RATED_DATASETS = PLAN.rated_datasets
FILTER_DATASETS = PLAN.filter_datasets
AUGMENTED_DATASETS = PLAN.augmented_datasets
COPIES_DATASETS = PLAN.copies_datasets

# measures
MEASURES_BY_DS = PLAN.measures_by_dataset
IMAGE_MEASURES = PLAN.image_measures
FEATURE_MEASURES = PLAN.feature_measures
SEG_MEASURES = PLAN.seg_measures
ALIGN = PLAN.alignment
ALIGNED_MEASURES = PLAN.aligned_measures
CALIBRATED = PLAN.calibrated
CALIBRATION = PLAN.calibration
LOCAL_DATASETS = PLAN.local_datasets
RECALL_CFG = PLAN.recall

# privacy filters (privacy.smk) and feature-space anonymisation (anonymise.smk)
PRIVACY = PLAN.privacy
PRIVACY_SETS = PLAN.privacy_sets
PRIVACY_AE = PLAN.privacy_ae
ANON = PLAN.anonymise
ANON_DATASETS = PLAN.anonymise_datasets


wildcard_constraints:
    dataset=_alternatives(DATASETS),
    measure=_alternatives(PLAN.measures + ALIGNED_MEASURES),
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
split_labels = PLAN.split_labels
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
def _by_dataset(method):
    """An input function: wildcards -> the plan's answer for the dataset."""
    return lambda wc: method(wc.dataset)


declared_classes = _by_dataset(PLAN.declared_classes)
manifest_rows = _by_dataset(PLAN.manifest_rows)
grid_reference = _by_dataset(PLAN.grid_reference)
registration_reference_image = _by_dataset(PLAN.registration_reference)
registration_target = _by_dataset(PLAN.registration_target)  # named inputs: unpack()
grid_json = _by_dataset(PLAN.grid_json)
training_qc = _by_dataset(PLAN.training_qc)
training_features = _by_dataset(PLAN.training_features)
training_labels = _by_dataset(PLAN.training_labels)
rating_measure = _by_dataset(PLAN.rating_measure)
heldout_source_patients = _by_dataset(PLAN.heldout_source_patients)
generator_training_images = _by_dataset(PLAN.generator_training_images)
privacy_synthetic_images = _by_dataset(PLAN.privacy_synthetic_images)
anonymise_labels = _by_dataset(PLAN.anonymise_labels)


def ds_cfg(wc):
    return PLAN.dataset_cfg[wc.dataset]


def plan(wc):
    return PLAN.plans[wc.dataset]


def raw_image(wc):
    return PLAN.raw_image(wc.dataset, wc.scan)


def raw_label(wc):
    return PLAN.raw_label(wc.dataset, wc.scan)


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


def heldout_matrix(wc):
    return PLAN.heldout_matrix(wc.dataset, wc.measure)


def ldm_checkpoint(stage):
    return lambda wc: PLAN.ldm_checkpoint(wc.dataset, stage)


def report_figure(path, caption, category, subcategory="{dataset}"):
    """A figure in Snakemake's report (--report), its caption one of workflow/report/'s files."""
    return report(path, caption=f"../report/{caption}", category=category, subcategory=subcategory)
