# Review of the RELICT results (paper 2.2, 2.5, 3 and Table 2): runtime per measure,
# agreement of the closest training volume between measures, the combined ranking,
# Figure 6, the rating sheet for the raters and the import of their filled ratings.
# The thresholds tuned on a rating and the filter of later sets with them: filter.smk; the
# verdict and its page: verdict.smk. Measures per dataset: MEASURES_BY_DS; params: relict.review.

from synthaudit import registry

REVIEW_CFG = config["relict"]["review"]


rule table_runtime:
    input:
        compare=lambda wc: [b for m in MEASURES_BY_DS[wc.dataset] for b in measure_benchmarks(wc.dataset, m)],
        embed=lambda wc: (
            [f"benchmarks/embed/{TRAINING_OF[wc.dataset]}/train.tsv", f"benchmarks/embed/{wc.dataset}/synthetic.tsv"]
            if registry.by_level(MEASURES_BY_DS[wc.dataset], "feature")
            else []
        ),
        # Table 2's extraction time of the segmentation level (the U-Net's training reported apart)
        segment=lambda wc: PLAN.segmentation_benchmarks(wc.dataset),
        segment_training=lambda wc: PLAN.segmentation_training_benchmarks(wc.dataset),
    output:
        table="results/tables/{dataset}/runtime.tsv",
        html=report(
            "results/tables/{dataset}/runtime.html",
            caption="../report/runtime.rst",
            category="RELICT",
            subcategory="tables",
            labels={"dataset": "{dataset}", "table": "runtime per measure"},
        ),
    log:
        "logs/table_runtime/{dataset}.log",
    localrule: True
    conda:
        "../../envs/figures.yaml"
    threads: 1
    resources:
        mem_mb=500,
    params:
        measures=lambda wc: MEASURES_BY_DS[wc.dataset],
        jobs_per_measure=lambda wc: [len(measure_benchmarks(wc.dataset, m)) for m in MEASURES_BY_DS[wc.dataset]],
        segmentation_source=lambda wc: (config["datasets"][wc.dataset].get("segmentation") or {}).get("source"),
    script:
        "../scripts/table_runtime.py"


rule table_runtime_all:
    input:
        [f"results/tables/{d}/runtime.tsv" for d in REVIEWED_DATASETS],
    output:
        table="results/tables/runtime.tsv",
        html=report(
            "results/tables/runtime.html",
            caption="../report/runtime.rst",
            category="RELICT",
            subcategory="tables",
            labels={"dataset": "all", "table": "runtime (Table 2)"},
        ),
    log:
        "logs/table_runtime_all.log",
    conda:
        "../../envs/figures.yaml"
    threads: 1
    resources:
        mem_mb=500,
    params:
        datasets=REVIEWED_DATASETS,
    script:
        "../scripts/table_runtime.py"


rule table_agreement:
    input:
        rankings=lambda wc: [f"results/relict/{wc.dataset}/ranking_{m}.tsv" for m in MEASURES_BY_DS[wc.dataset]],
        evaluation=lambda wc: (f"results/relict/{wc.dataset}/evaluation.json" if wc.dataset in RATED_DATASETS else []),
    output:
        agreement_table="results/tables/{dataset}/closest_agreement.tsv",
        agreement_json="results/tables/{dataset}/closest_agreement.json",
        ranking_table="results/tables/{dataset}/combined_ranking.tsv",
        ranking_html=report(
            "results/tables/{dataset}/combined_ranking.html",
            caption="../report/agreement.rst",
            category="RELICT",
            subcategory="tables",
            labels={"dataset": "{dataset}", "table": "measures compared"},
        ),
    log:
        "logs/table_agreement/{dataset}.log",
    localrule: True
    conda:
        "../../envs/figures.yaml"
    threads: 1
    resources:
        mem_mb=1000,
    params:
        measures=lambda wc: MEASURES_BY_DS[wc.dataset],
        reference_measure=REVIEW_CFG["reference_measure"],
        rated=lambda wc: wc.dataset in RATED_DATASETS,
    script:
        "../scripts/table_agreement.py"


rule figure_closest:
    input:
        rankings=lambda wc: [f"results/relict/{wc.dataset}/ranking_{m}.tsv" for m in MEASURES_BY_DS[wc.dataset]],
        synthetic=lambda wc: synthetic_images(wc.dataset),
        training=lambda wc: preprocessed_images(wc.dataset, role="train"),
        grid=grid_json,
    output:
        figure=report(
            "results/figures/{dataset}/closest_by_measure.png",
            caption="../report/closest.rst",
            category="RELICT",
            subcategory="{dataset}",
        ),
        choice="results/figures/{dataset}/closest_by_measure.json",
    log:
        "logs/figure_closest/{dataset}.log",
    conda:
        "../../envs/figures.yaml"
    threads: 1
    resources:
        mem_mb=2000,
    params:
        measures=lambda wc: MEASURES_BY_DS[wc.dataset],
        reference_measure=REVIEW_CFG["reference_measure"],
        synthetic=REVIEW_CFG["figure6_synthetic"],
    script:
        "../scripts/figure_closest.py"


rule rating_sheet:
    input:
        ranking=lambda wc: f"results/relict/{wc.dataset}/ranking_{rating_measure(wc)}.tsv",
        synthetic=lambda wc: synthetic_images(wc.dataset),
        training=lambda wc: preprocessed_images(wc.dataset, role="train"),
        grid=grid_json,
    output:
        html=report(
            "results/rating_sheet/{dataset}/index.html",
            caption="../report/rating_sheet.rst",
            category="Rating sheet",
            subcategory="{dataset}",
            labels={"page": "index"},
        ),
        pages=directory("results/rating_sheet/{dataset}/pages"),
        template="results/rating_sheet/{dataset}/ratings_template.tsv",
    log:
        "logs/rating_sheet/{dataset}.log",
    conda:
        "../../envs/figures.yaml"
    threads: 1
    resources:
        mem_mb=2000,
    params:
        measure=rating_measure,
        top_k=REVIEW_CFG["top_k"],
        note=lambda wc: (
            None
            if REVIEW_CFG["rating_measure"] in MEASURES_BY_DS[wc.dataset]
            else f"{REVIEW_CFG['rating_measure']} is not computed for {wc.dataset}; ranked by {rating_measure(wc)}"
        ),
        raters=REVIEW_CFG["raters"],
    script:
        "../scripts/rating_sheet.py"


rule rating_import:
    input:
        ratings=lambda wc: ratings_file(wc.dataset),
    output:
        summary="results/ratings/{dataset}/agreement.json",
        disagreements="results/ratings/{dataset}/disagreements.tsv",
        html=report(
            "results/ratings/{dataset}/agreement.html",
            caption="../report/agreement.rst",
            category="RELICT",
            subcategory="tables",
            labels={"dataset": "{dataset}", "table": "rater agreement"},
        ),
    log:
        "logs/rating_import/{dataset}.log",
    wildcard_constraints:
        dataset=_alternatives(RATED_DATASETS),
    conda:
        "../../envs/figures.yaml"
    threads: 1
    resources:
        mem_mb=500,
    params:
        synthetic_ids=lambda wc: [v.id for v in PLANS[wc.dataset].synthetic],
        replica_min_score=config["relict"]["evaluation"]["replica_min_score"],
    script:
        "../scripts/rating_import.py"


rule review_all:
    input:
        "results/verdict.rst",
        "results/verdict.html",
        "results/tables/runtime.tsv",
        [f"results/tables/{d}/runtime.tsv" for d in REVIEWED_DATASETS],
        [f"results/tables/{d}/combined_ranking.tsv" for d in REVIEWED_DATASETS],
        [f"results/figures/{d}/closest_by_measure.png" for d in REVIEWED_DATASETS],
        [f"results/rating_sheet/{d}/index.html" for d in REVIEWED_DATASETS],
        [f"results/ratings/{d}/agreement.json" for d in RATED_DATASETS],
        [f"results/tables/{d}/thresholds.json" for d in RATED_DATASETS],
