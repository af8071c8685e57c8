"""synthaudit: does a synthetic 3D image dataset leak training patients?

Thin entry point: parameters in params.yaml (validated first), rules in workflow/rules/,
one target rule per stage. `snakemake --workflow-profile workflow/profiles/default`
runs everything; `make demo` does that on the embedded demo.
"""

from pathlib import Path

from snakemake.utils import min_version

# The library is the installed synthaudit package (pip install of the wheel, or `make install`:
# an editable install of src/). Rules with --use-conda import the same one: Snakemake appends
# this process's import path to every script's (snakemake.script: get_snakemake_searchpaths).
import synthaudit

min_version("8.0")


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
include: "workflow/rules/relict_null.smk"
include: "workflow/rules/relict_review.smk"
include: "workflow/rules/relict_local.smk"
include: "workflow/rules/recall.smk"
include: "workflow/rules/fidelity.smk"
include: "workflow/rules/membership.smk"
include: "workflow/rules/figures.smk"
include: "workflow/rules/review.smk"
include: "workflow/rules/filter.smk"
include: "workflow/rules/verdict.smk"
include: "workflow/rules/privacy.smk"
include: "workflow/rules/anonymise.smk"


# The report's first page starts with the verdict written by rule verdict (read here, after
# params.yaml was validated, when `snakemake --report` parses this file after the run).
_verdict = Path("results/verdict.rst")
config["report_verdict"] = (
    _verdict.read_text() if _verdict.is_file() else "*No verdict yet: run the workflow before making the report.*\n"
)


rule all:
    default_target: True
    input:
        rules.cohort_all.input,
        rules.preprocess_all.input,
        rules.synthetic_all.input,
        rules.generate_all.input,
        rules.relict_all.input,
        rules.recall_all.input,
        rules.fidelity_all.input,
        rules.membership_all.input,
        rules.sweep_all.input,
        rules.figures_all.input,
        rules.review_all.input,
        rules.filter_all.input,
        rules.privacy_all.input,
        rules.anonymise_all.input,
        rules.augmentation_all.input,
