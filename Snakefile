"""synthaudit: does a synthetic 3D image dataset leak training patients?

Thin entry point: parameters in params.yaml (validated first), rules in workflow/rules/,
one target rule per stage. `snakemake --workflow-profile workflow/profiles/default`
runs everything; `make demo` does that on the embedded demo.
"""

import sys
from pathlib import Path

from snakemake.utils import min_version

min_version("8.0")

# The library is importable without installing it (conda envs need no pip install). This
# file's own folder, also when an audit workspace uses it as a module (synthaudit init).
sys.path.insert(0, str(Path(str(workflow.current_basedir)) / "workflow" / "scripts"))


configfile: "params.yaml"


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/cohort.smk"
include: "workflow/rules/preprocess.smk"
include: "workflow/rules/synthetic.smk"
include: "workflow/rules/generate.smk"
include: "workflow/rules/features.smk"
include: "workflow/rules/segment.smk"
include: "workflow/rules/relict.smk"
include: "workflow/rules/recall.smk"
include: "workflow/rules/figures.smk"
include: "workflow/rules/review.smk"
include: "workflow/rules/privacy.smk"
include: "workflow/rules/anonymise.smk"


# The report's first page starts with the verdict written by rule verdict (read here, after
# params.yaml was validated, when `snakemake --report` parses this file after the run).
_verdict = Path("results/verdict.rst")
config["report_verdict"] = _verdict.read_text() if _verdict.is_file() else \
    "*No verdict yet: run the workflow before making the report.*\n"


rule all:
    default_target: True
    input:
        rules.cohort_all.input,
        rules.preprocess_all.input,
        rules.synthetic_all.input,
        rules.generate_all.input,
        rules.relict_all.input,
        rules.recall_all.input,
        rules.sweep_all.input,
        rules.figures_all.input,
        rules.review_all.input,
        rules.filter_all.input,
        rules.privacy_all.input,
        rules.anonymise_all.input,
        rules.augmentation_all.input,
