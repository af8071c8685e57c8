# Figures and the report: everything drawn from the pipeline's own tables.


rule figure_relict:
    input:
        summary="results/relict/{dataset}/evaluation.json",
        scores="results/relict/{dataset}/ratios_with_rating.tsv",
        sweeps=lambda wc: [f"results/plots/relict_sweep/{wc.dataset}__{m}.tsv" for m in MEASURES_BY_DS[wc.dataset]],
        metrics="results/metrics/relict.json",
    output:
        balanced_accuracy=report(
            "results/figures/{dataset}/balanced_accuracy.png",
            caption="../report/balanced_accuracy.rst",
            category="RELICT",
            subcategory="{dataset}",
        ),
        ratios=report(
            "results/figures/{dataset}/ratio_distribution.png",
            caption="../report/ratio_distribution.rst",
            category="RELICT",
            subcategory="{dataset}",
        ),
    log:
        "logs/figure_relict/{dataset}.log",
    wildcard_constraints:
        dataset=_alternatives(RATED_DATASETS),
    conda:
        "../../envs/figures.yaml"
    threads: 1
    resources:
        mem_mb=1000,
    params:
        measures=lambda wc: MEASURES_BY_DS[wc.dataset],
    script:
        "../scripts/figure_relict.py"


rule ranking_report:
    input:
        lambda wc: [f"results/relict/{wc.dataset}/ranking_{m}.tsv" for m in MEASURES_BY_DS[wc.dataset]],
    output:
        report(
            "results/figures/{dataset}/rankings.html",
            caption="../report/ranking.rst",
            category="RELICT",
            subcategory="{dataset}",
        ),
    log:
        "logs/ranking_report/{dataset}.log",
    localrule: True
    conda:
        "../../envs/figures.yaml"
    threads: 1
    resources:
        mem_mb=500,
    params:
        measures=lambda wc: MEASURES_BY_DS[wc.dataset],
    script:
        "../scripts/ranking_report.py"


rule figures_all:
    input:
        [f"results/figures/{d}/balanced_accuracy.png" for d in RATED_DATASETS],
        [f"results/figures/{d}/rankings.html" for d in REVIEWED_DATASETS],
        [f"results/figures/{d}/generator_losses.png" for d in AE_DATASETS],
        [f"results/preprocessed/{d}/qc_montage.png" for d in OWN_TRAINING],
