# RELICT's results per dataset: the distance ratio, ranking and calibrated calls of each measure,
# the evaluation against the rating, the metrics, the calibrated copies, the stage's targets and
# the replicas-under-augmentation report.


rule relict_ratio:
    input:
        measure="results/relict/{dataset}/measures/{measure}.npz",
        heldout=heldout_matrix,
        shortlist=lambda wc: PLAN.shortlist_file(wc.dataset, "synthetic", wc.measure),
        heldout_shortlist=lambda wc: PLAN.null_shortlist(wc.dataset, wc.measure),
        alignment_recall=lambda wc: (
            [f"results/relict/{wc.dataset}/alignment_recall.json"] if wc.measure in ALIGNED_MEASURES else []
        ),
        heldout_alignment_recall=lambda wc: PLAN.null_alignment_recall(wc.dataset, wc.measure),
    output:
        ranking="results/relict/{dataset}/ranking_{measure}.tsv",
        null="results/relict/{dataset}/calibration/{measure}.tsv",
        search="results/relict/{dataset}/search/{measure}.json",
    log:
        "logs/relict_ratio/{dataset}/{measure}.log",
    localrule: True
    conda:
        "../../envs/relict.yaml"
    threads: 1
    resources:
        mem_mb=2000,
    params:
        n_closest=config["relict"]["n_closest"],
        rate=CALIBRATION["rate"],
        min_recall=PLAN.search["recall"]["min_recall"],
        heldout_patients=lambda wc: {s.id: s.patient_id for s in PLANS[TRAINING_OF[wc.dataset]].heldout},
        training_patients=lambda wc: {s.id: s.patient_id for s in plan(wc).train},
        source_patients=heldout_source_patients,
    script:
        "../scripts/relict_ratio.py"


rule relict_evaluate_measure:
    input:
        ranking="results/relict/{dataset}/ranking_{measure}.tsv",
        ratings=lambda wc: ratings_file(wc.dataset),
    output:
        summary="results/relict/{dataset}/evaluation/{measure}.json",
        sweep="results/plots/relict_sweep/{dataset}__{measure}.tsv",
    log:
        "logs/relict_evaluate_measure/{dataset}/{measure}.log",
    wildcard_constraints:
        dataset=_alternatives(RATED_DATASETS),
    localrule: True
    conda:
        "../../envs/relict.yaml"
    threads: 1
    resources:
        mem_mb=1000,
    params:
        evaluation=config["relict"]["evaluation"],
        rate=CALIBRATION["rate"],
    script:
        "../scripts/relict_evaluate_measure.py"


rule relict_evaluate:
    input:
        rankings=lambda wc: [f"results/relict/{wc.dataset}/ranking_{m}.tsv" for m in MEASURES_BY_DS[wc.dataset]],
        summaries=lambda wc: [f"results/relict/{wc.dataset}/evaluation/{m}.json" for m in MEASURES_BY_DS[wc.dataset]],
        ratings=lambda wc: ratings_file(wc.dataset),
    output:
        summary="results/relict/{dataset}/evaluation.json",
        scores="results/relict/{dataset}/ratios_with_rating.tsv",
    log:
        "logs/relict_evaluate/{dataset}.log",
    wildcard_constraints:
        dataset=_alternatives(RATED_DATASETS),
    localrule: True
    conda:
        "../../envs/relict.yaml"
    threads: 1
    resources:
        mem_mb=1000,
    params:
        measures=lambda wc: MEASURES_BY_DS[wc.dataset],
        evaluation=config["relict"]["evaluation"],
    script:
        "../scripts/relict_evaluate.py"


rule relict_metrics:
    input:
        evaluations=[f"results/relict/{d}/evaluation.json" for d in RATED_DATASETS],
        rankings=[f"results/relict/{d}/ranking_{m}.tsv" for d in DATASETS for m in MEASURES_BY_DS[d]],
        # how each measure was searched, and the recall of the shortlist (relict.search)
        searches=[f"results/relict/{d}/search/{m}.json" for d in DATASETS for m in MEASURES_BY_DS[d]],
        # each dataset's embeddings name the extractor and the pooling grid used on its grid
        features=[f"results/relict/features/{d}/synthetic.npz" for d in PLAN.feature_datasets],
        augmentation=[f"results/relict/{d}/augmentation.json" for d in AUGMENTED_DATASETS],
        copies=[f"results/relict/{d}/copies.json" for d in COPIES_DATASETS],
        local=[f"results/relict/{d}/local/local.json" for d in LOCAL_DATASETS],
    output:
        relict="results/metrics/relict.json",
        copies="results/metrics/copies.json",
    log:
        "logs/relict_metrics.log",
    localrule: True
    conda:
        "../../envs/relict.yaml"
    threads: 1
    resources:
        mem_mb=500,
    params:
        datasets=DATASETS,
        rated=RATED_DATASETS,
        augmented=AUGMENTED_DATASETS,
        feature_datasets=PLAN.feature_datasets,
        copies_datasets=COPIES_DATASETS,
        local_datasets=LOCAL_DATASETS,
        measures=MEASURES_BY_DS,
        n_closest=config["relict"]["n_closest"],
    script:
        "../scripts/relict_metrics.py"


rule relict_copies:
    input:
        rankings=lambda wc: [f"results/relict/{wc.dataset}/ranking_{m}.tsv" for m in CALIBRATED[wc.dataset]],
        nulls=lambda wc: [f"results/relict/{wc.dataset}/calibration/{m}.tsv" for m in CALIBRATED[wc.dataset]],
        ratings=lambda wc: ratings_file(wc.dataset) or [],
    output:
        calls="results/relict/{dataset}/calibrated_calls.tsv",
        table=report(
            "results/relict/{dataset}/copies.tsv",
            caption="../report/copies.rst",
            category="Calibrated calls",
            subcategory="{dataset}",
        ),
        summary="results/relict/{dataset}/copies.json",
        figure=report(
            "results/figures/{dataset}/calibration.png",
            caption="../report/calibration.rst",
            category="Calibrated calls",
            subcategory="{dataset}",
        ),
    log:
        "logs/relict_copies/{dataset}.log",
    wildcard_constraints:
        dataset=_alternatives(COPIES_DATASETS),
    conda:
        "../../envs/relict.yaml"
    threads: 1
    resources:
        mem_mb=1000,
    params:
        measures=lambda wc: CALIBRATED[wc.dataset],
        rate=CALIBRATION["rate"],
        patient_of=lambda wc: {s.id: s.patient_id for s in plan(wc).train},
        source_patients=heldout_source_patients,
        replica_min_score=config["relict"]["evaluation"]["replica_min_score"],
        matched=lambda wc: [m for m in CALIBRATED[wc.dataset] if PLAN.matched(wc.dataset, m)],
    script:
        "../scripts/relict_copies.py"


rule relict_all:
    input:
        "results/provenance.json",
        "results/metrics/relict.json",
        expand("results/relict/{dataset}/local/local_calls.tsv", dataset=LOCAL_DATASETS),
        expand("results/relict/{dataset}/texture.json", dataset=COPIES_DATASETS),


rule relict_augmentation:
    input:
        rankings=lambda wc: [f"results/relict/{wc.dataset}/ranking_{m}.tsv" for m in MEASURES_BY_DS[wc.dataset]],
        summaries=lambda wc: [f"results/relict/{wc.dataset}/evaluation/{m}.json" for m in MEASURES_BY_DS[wc.dataset]],
        ratings=lambda wc: ratings_file(wc.dataset),
    output:
        table="results/relict/{dataset}/augmentation.tsv",
        summary="results/relict/{dataset}/augmentation.json",
        figure="results/relict/{dataset}/augmentation.png",
    log:
        "logs/relict_augmentation/{dataset}.log",
    wildcard_constraints:
        dataset=_alternatives(AUGMENTED_DATASETS),
    conda:
        "../../envs/relict.yaml"
    threads: 1
    resources:
        mem_mb=1000,
    params:
        measures=lambda wc: MEASURES_BY_DS[wc.dataset],
        spiked=lambda wc: plan(wc).spiked,
        patient_of=lambda wc: {s.id: s.patient_id for s in PLANS[TRAINING_OF[wc.dataset]].scans},
        replica_min_score=config["relict"]["evaluation"]["replica_min_score"],
    script:
        "../scripts/relict_augmentation.py"


rule augmentation_all:
    input:
        [f"results/relict/{d}/augmentation.json" for d in AUGMENTED_DATASETS],
