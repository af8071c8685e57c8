# The verdict (synthaudit.review.verdict): per synthetic set the calls, the copied patients, fidelity,
# membership and the most likely replicas, read from the run's own files; its page; and the provenance
# file beside the metrics.


rule verdict:
    input:
        **PLAN.verdict_inputs(),
        # an audit workspace's input warnings (synthaudit init), which the verdict repeats
        warnings=lambda wc: [p for p in ["data/input_warnings.tsv"] if Path(p).is_file()],
        # its time estimate, which the verdict sets beside the jobs' benchmark files
        estimate=lambda wc: [p for p in ["data/estimate.json"] if Path(p).is_file()],
    output:
        rst="results/verdict.rst",
        figures=[
            report_figure(f"results/figures/{d}/verdict.png", "verdict.rst", "Verdict", d) for d in REVIEWED_DATASETS
        ],
        membership_figures=[
            report_figure(f"results/figures/{d}/membership_roc.png", "membership_roc.rst", "Membership", d)
            for d in REVIEWED_DATASETS
            if d in PLAN.membership_datasets
        ],
    log:
        "logs/verdict.log",
    localrule: True
    conda:
        "../../envs/relict.yaml"
    threads: 1
    resources:
        mem_mb=2000,
    params:
        datasets=REVIEWED_DATASETS,
        measures=PLAN.measures,
        training_of=TRAINING_OF,
        aligned=PLAN.aligned_datasets,  # searched for flipped/shifted/rotated copies; the verdict says which were not
        membership=[d for d in REVIEWED_DATASETS if d in PLAN.membership_datasets],  # their ROC figures, in order
        # path templates for the script (functions: Snakemake would fill "{...}" as wildcards)
        synthetic_image=lambda wc: "results/synthetic/{dataset}/images/{id}.nii.gz",
        training_image=lambda wc: "results/preprocessed/{dataset}/images/{id}.nii.gz",
    script:
        "../scripts/verdict.py"


# the page a person reads first (synthaudit.review.page): the gate's decision, then each set's verdict
# and figures at full width; standalone, linked from the report's first line
rule verdict_page:
    input:
        rst="results/verdict.rst",
        metrics="results/metrics/relict.json",  # and copies.json, written beside it
        fidelity=["results/metrics/fidelity.json"] if PLAN.fidelity_datasets else [],
        privacy=["results/metrics/privacy.json"] if PLAN.privacy_runs else [],
        fidelity_figures=[f"results/figures/{d}/fidelity.png" for d in PLAN.fidelity_datasets],
        membership=["results/metrics/membership.json"] if PLAN.membership_datasets else [],
    output:
        "results/verdict.html",
    log:
        "logs/verdict_page.log",
    conda:
        "../../envs/relict.yaml"
    threads: 1
    resources:
        mem_mb=500,
    params:
        datasets=REVIEWED_DATASETS,
        measures=PLAN.measures,
        aligned=PLAN.aligned_datasets,
    script:
        "../scripts/verdict_page.py"


# Which synthaudit, parameters, numerics and device produced results/metrics: one file beside them
# (Git-tracked), so that `dvc metrics diff` shows science and a parameter change touches this file,
# not every metrics file.
rule provenance:
    output:
        "results/provenance.json",
    log:
        "logs/provenance.log",
    localrule: True
    conda:
        "../../envs/figures.yaml"
    threads: 1
    resources:
        mem_mb=200,
    params:
        provenance=config["_provenance"],  # rerun when params.yaml changes: the file records its hash
    script:
        "../scripts/provenance.py"
