# Feature-space anonymisation (Di Salvo et al.): a CVAE on the feature level's embeddings
# against k-Same, measured as in the paper and audited with RELICT's feature level and
# the privacy filters' calibration. `snakemake anonymise_all` (`make anonymise`).


rule demo_classes:
    input:
        lambda wc: sorted({f"results/cohort/{wc.dataset}/truth/{s.patient_id}.json" for s in plan(wc).scans}),
    output:
        "results/anonymise/{dataset}/classes.tsv",
    log:
        "logs/demo_classes/{dataset}.log",
    wildcard_constraints:
        dataset=_alternatives(PLAN.demo_datasets),
    conda:
        "../../envs/imaging.yaml"
    threads: 1
    resources:
        mem_mb=500,
    script:
        "../scripts/demo_classes.py"


rule anonymise:
    input:
        train="results/relict/features/{dataset}/train.npz",
        test="results/relict/features/{dataset}/heldout.npz",
        labels=anonymise_labels,
    output:
        runs="results/anonymise/{dataset}/runs.tsv",
        summary="results/anonymise/{dataset}/summary.json",
        decoder="results/anonymise/{dataset}/decoder.pt",
        evaluation="results/anonymise/{dataset}/evaluation.npz",
    log:
        "logs/anonymise/{dataset}.log",
    benchmark:
        "benchmarks/anonymise/{dataset}.tsv"
    wildcard_constraints:
        dataset=_alternatives(ANON_DATASETS),
    priority: LATER
    conda:
        "../../envs/privacy.yaml"
    threads: 1
    resources:
        mem_mb=4000,
    params:
        cfg=ANON,
        spec=lambda wc: ANON["datasets"][wc.dataset],
        extractor=config["relict"]["features"]["extractor"],
        patients=lambda wc: {s.id: s.patient_id for s in plan(wc).scans},
    script:
        "../scripts/anonymise_features.py"


rule anonymise_report:
    input:
        summary="results/anonymise/{dataset}/summary.json",
        evaluation="results/anonymise/{dataset}/evaluation.npz",
    output:
        table=report(
            "results/anonymise/{dataset}/table.tsv",
            category="Anonymisation",
            subcategory="{dataset}",
            caption="../report/anonymise_table.rst",
        ),
        scatter=report(
            "results/anonymise/{dataset}/auc_vs_D.png",
            category="Anonymisation",
            subcategory="{dataset}",
            caption="../report/anonymise_scatter.rst",
        ),
        tsne=report(
            "results/anonymise/{dataset}/tsne.png",
            category="Anonymisation",
            subcategory="{dataset}",
            caption="../report/anonymise_tsne.rst",
        ),
    log:
        "logs/anonymise_report/{dataset}.log",
    wildcard_constraints:
        dataset=_alternatives(ANON_DATASETS),
    conda:
        "../../envs/privacy.yaml"
    threads: 1
    resources:
        mem_mb=2000,
    params:
        tsne=ANON.get("tsne"),
    script:
        "../scripts/anonymise_report.py"


rule anonymise_metrics:
    input:
        [f"results/anonymise/{d}/summary.json" for d in ANON_DATASETS],
    output:
        metrics="results/metrics/anonymise.json",
        index="results/anonymise/index.json",
    log:
        "logs/anonymise_metrics.log",
    localrule: True
    conda:
        "../../envs/figures.yaml"
    threads: 1
    resources:
        mem_mb=500,
    script:
        "../scripts/anonymise_metrics.py"


rule anonymise_all:
    input:
        "results/provenance.json",
        [f"results/anonymise/{d}/table.tsv" for d in ANON_DATASETS],
        "results/metrics/anonymise.json",
