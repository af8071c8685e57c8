# Thresholds tuned on a rating (RELICT 2.2, step 6) and the filter of later synthetic sets with them
# (relict.review: filter_measures; a dataset's filter_with names the rated set whose thresholds it takes).


rule tuned_thresholds:
    input:
        evaluation="results/relict/{dataset}/evaluation.json",
        rankings=lambda wc: [f"results/relict/{wc.dataset}/ranking_{m}.tsv" for m in MEASURES_BY_DS[wc.dataset]],
    output:
        "results/tables/{dataset}/thresholds.json",
    log:
        "logs/tuned_thresholds/{dataset}.log",
    wildcard_constraints:
        dataset=_alternatives(RATED_DATASETS),
    localrule: True
    conda:
        "../../envs/figures.yaml"
    threads: 1
    resources:
        mem_mb=500,
    params:
        measures=lambda wc: MEASURES_BY_DS[wc.dataset],
    script:
        "../scripts/filter_synthetic.py"


rule filter_synthetic:
    input:
        # no thresholds file when the source is not rated: the script then refuses, naming both datasets
        thresholds=lambda wc: (
            f"results/tables/{config['datasets'][wc.dataset].get('filter_with')}/thresholds.json"
            if config["datasets"][wc.dataset].get("filter_with") in RATED_DATASETS
            else []
        ),
        rankings=lambda wc: [
            f"results/relict/{wc.dataset}/ranking_{m}.tsv" for m in filter_measures(config, wc.dataset)
        ],
        ratings=lambda wc: ratings_file(wc.dataset) or [],
    output:
        kept="results/filter/{dataset}/kept.tsv",
        rejected="results/filter/{dataset}/rejected.tsv",
        summary="results/filter/{dataset}/summary.json",
    log:
        "logs/filter_synthetic/{dataset}.log",
    wildcard_constraints:
        dataset=_alternatives(FILTER_DATASETS),
    conda:
        "../../envs/figures.yaml"
    threads: 1
    resources:
        mem_mb=500,
    params:
        source=lambda wc: config["datasets"][wc.dataset].get("filter_with"),
        measures=lambda wc: filter_measures(config, wc.dataset),
        datasets=DATASETS,
        rated=RATED_DATASETS,
        synthetic_ids=lambda wc: [v.id for v in PLANS[wc.dataset].synthetic],
        replica_min_score=config["relict"]["evaluation"]["replica_min_score"],
    script:
        "../scripts/filter_synthetic.py"


rule filter_summary:
    input:
        summaries=[f"results/filter/{d}/summary.json" for d in FILTER_DATASETS],
    output:
        "results/filter/summary.tsv",
    log:
        "logs/filter_summary.log",
    localrule: True
    conda:
        "../../envs/figures.yaml"
    threads: 1
    resources:
        mem_mb=500,
    script:
        "../scripts/filter_synthetic.py"


rule filter_all:
    input:
        "results/filter/summary.tsv",
