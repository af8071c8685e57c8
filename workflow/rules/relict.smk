# RELICT image level (paper 2.3.1, 2.4, 2.7): all-pairs measures between every
# synthetic and every training volume, the distance ratio, ranking, and evaluation
# against the rating. One job per measure so benchmark files give Table 2's runtimes.

rule relict_measure:
    input:
        synthetic=lambda wc: synthetic_images(wc.dataset),
        training=lambda wc: preprocessed_images(wc.dataset, role="train"),
        training_qc=lambda wc: [f"results/preprocessed/{wc.dataset}/qc/{s.id}.json" for s in plan(wc).train],
        grid="results/preprocessed/{dataset}/grid.json",
    output:
        "results/relict/{dataset}/measures/{measure}.npz",
    log:
        "logs/relict_measure/{dataset}/{measure}.log",
    benchmark:
        "benchmarks/relict_measure/{dataset}/{measure}.tsv"
    params:
        synthetic_ids=lambda wc: [v.id for v in plan(wc).synthetic],
        training_ids=lambda wc: [s.id for s in plan(wc).train],
        ssim=config["relict"]["ssim"],
    threads: 2
    resources:
        mem_mb=8000,
    conda:
        "../../envs/relict.yaml"
    script:
        "../scripts/relict_measure.py"


rule relict_ratio:
    input:
        "results/relict/{dataset}/measures/{measure}.npz",
    output:
        "results/relict/{dataset}/ranking_{measure}.tsv",
    log:
        "logs/relict_ratio/{dataset}/{measure}.log",
    params:
        n_closest=config["relict"]["n_closest"],
    threads: 1
    resources:
        mem_mb=2000,
    conda:
        "../../envs/relict.yaml"
    script:
        "../scripts/relict_ratio.py"


rule relict_evaluate:
    input:
        rankings=expand("results/relict/{dataset}/ranking_{measure}.tsv", measure=MEASURES, allow_missing=True),
        ratings=lambda wc: ratings_file(wc.dataset),
    output:
        summary="results/relict/{dataset}/evaluation.json",
        sweeps=expand("results/plots/relict_sweep/{{dataset}}__{measure}.tsv", measure=MEASURES),
        scores="results/relict/{dataset}/ratios_with_rating.tsv",
    log:
        "logs/relict_evaluate/{dataset}.log",
    params:
        measures=MEASURES,
        evaluation=config["relict"]["evaluation"],
    threads: 1
    resources:
        mem_mb=1000,
    wildcard_constraints:
        dataset=_alternatives(RATED_DATASETS),
    conda:
        "../../envs/relict.yaml"
    script:
        "../scripts/relict_evaluate.py"


rule relict_metrics:
    input:
        evaluations=[f"results/relict/{d}/evaluation.json" for d in RATED_DATASETS],
        rankings=[f"results/relict/{d}/ranking_{m}.tsv" for d in DATASETS for m in MEASURES],
    output:
        "results/metrics/relict.json",
    log:
        "logs/relict_metrics.log",
    params:
        datasets=DATASETS,
        rated=RATED_DATASETS,
        measures=MEASURES,
        n_closest=config["relict"]["n_closest"],
    threads: 1
    resources:
        mem_mb=500,
    conda:
        "../../envs/relict.yaml"
    script:
        "../scripts/relict_metrics.py"


rule relict_all:
    input:
        "results/metrics/relict.json",
