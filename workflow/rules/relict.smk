# RELICT (paper 2.3): all-pairs measures between every synthetic and every training volume at image,
# feature and segmentation level, and the alignment-aware image level. One job per measure and shard
# (params.yaml `compute`), gathered into one matrix; the shards' benchmark files together give Table 2's
# runtimes. The null of the calibrated calls: relict_null.smk; the ratio, ranking and evaluation (paper
# 2.4, 2.7): relict_review.smk; the local level: relict_local.smk.


# Shortlist search (params relict.search; synthaudit.relict.search): above a pair count, each
# synthetic volume (and held-out scan) keeps its K nearest training volumes by block means, and
# the image-level measures run on those pairs and on a seeded sample of whole rows only.
rule relict_shortlist:
    input:
        queries=lambda wc: PLAN.split_images(wc.dataset, wc.role),
        training=lambda wc: preprocessed_images(wc.dataset, role="train"),
        grid=grid_json,
    output:
        "results/relict/{dataset}/shortlist/{role}.npz",
    log:
        "logs/relict_shortlist/{dataset}/{role}.log",
    benchmark:
        "benchmarks/relict_shortlist/{dataset}/{role}.tsv"
    wildcard_constraints:
        role="synthetic|heldout|matched",
    conda:
        "../../envs/relict.yaml"
    threads: 1
    resources:
        mem_mb=lambda wc, input: PLAN.shortlist_mem_mb(input.grid, len(input.queries), len(input.training)),
    params:
        query_ids=lambda wc: PLAN.split_ids(wc.dataset, wc.role),
        training_ids=lambda wc: [s.id for s in plan(wc).train],
        k=lambda wc: PLAN.shortlist_k[TRAINING_OF[wc.dataset]],
        search=PLAN.search,
    script:
        "../scripts/relict_shortlist.py"


rule relict_measure:
    input:
        synthetic=lambda wc: shard_of(wc, synthetic_images(wc.dataset), "synthetic"),
        training=lambda wc: shard_of(wc, preprocessed_images(wc.dataset, role="train"), "training"),
        training_qc=training_qc,
        grid=grid_json,
        shortlist=lambda wc: PLAN.shortlist_file(wc.dataset, "synthetic", wc.measure),
    output:
        temp("results/relict/{dataset}/shards/{measure}/{shard}.npz"),
    log:
        "logs/relict_measure/{dataset}/{measure}/{shard}.log",
    benchmark:
        "benchmarks/relict_measure/{dataset}/{measure}/{shard}.tsv"
    wildcard_constraints:
        measure=_alternatives(IMAGE_MEASURES),
        shard=r"s\d+-t\d+",
    conda:
        "../../envs/relict.yaml"
    threads: 2
    resources:
        mem_mb=8000,
    params:
        synthetic_ids=lambda wc: shard_of(wc, [v.id for v in plan(wc).synthetic], "synthetic"),
        training_ids=lambda wc: shard_of(wc, [s.id for s in plan(wc).train], "training"),
        ssim=config["relict"]["ssim"],
    script:
        "../scripts/relict_measure.py"


rule relict_feature_measure:
    input:
        synthetic="results/relict/features/{dataset}/synthetic.npz",
        training=training_features,
    output:
        "results/relict/{dataset}/measures/{measure}.npz",
    log:
        "logs/relict_feature_measure/{dataset}/{measure}.log",
    benchmark:
        "benchmarks/relict_measure/{dataset}/{measure}.tsv"
    wildcard_constraints:
        measure=_alternatives(FEATURE_MEASURES),
    conda:
        "../../envs/relict.yaml"
    threads: 2
    resources:
        mem_mb=4000,
    params:
        extractor=config["relict"]["features"]["extractor"],
        scaling=config["relict"]["features"]["scaling"],
    script:
        "../scripts/relict_feature_measure.py"


rule relict_segmentation_measure:
    input:
        synthetic=lambda wc: shard_of(wc, seg_labels(wc.dataset, "synthetic"), "synthetic"),
        training=lambda wc: shard_of(wc, seg_labels(wc.dataset, "train"), "training"),
        grid=grid_json,
    output:
        temp("results/relict/{dataset}/shards/{measure}/{shard}.npz"),
    log:
        "logs/relict_segmentation_measure/{dataset}/{measure}/{shard}.log",
    benchmark:
        "benchmarks/relict_measure/{dataset}/{measure}/{shard}.tsv"
    wildcard_constraints:
        dataset=_alternatives(PLAN.seg_datasets),
        measure=_alternatives(SEG_MEASURES),
        shard=r"s\d+-t\d+",
    conda:
        "../../envs/relict.yaml"
    threads: 2
    resources:
        mem_mb=8000,
    params:
        synthetic_ids=lambda wc: shard_of(wc, [v.id for v in plan(wc).synthetic], "synthetic"),
        training_ids=lambda wc: shard_of(wc, [s.id for s in plan(wc).train], "training"),
        classes=lambda wc: ds_cfg(wc)["segmentation"]["classes"],
    script:
        "../scripts/relict_segmentation_measure.py"


rule relict_gather:
    input:
        lambda wc: [f"results/relict/{wc.dataset}/shards/{wc.measure}/{s}.npz" for s in measure_shards(wc.dataset)],
    output:
        "results/relict/{dataset}/measures/{measure}.npz",
    log:
        "logs/relict_gather/{dataset}/{measure}.log",
    wildcard_constraints:
        measure=_alternatives(IMAGE_MEASURES + SEG_MEASURES),
    localrule: True
    conda:
        "../../envs/relict.yaml"
    threads: 1
    resources:
        mem_mb=2000,
    params:
        synthetic_ids=lambda wc: [v.id for v in plan(wc).synthetic],
        training_ids=lambda wc: [s.id for s in plan(wc).train],
    script:
        "../scripts/relict_gather.py"


rule relict_align:
    input:
        synthetic=lambda wc: synthetic_images(wc.dataset),
        training=lambda wc: preprocessed_images(wc.dataset, role="train"),
        plain=lambda wc: [f"results/relict/{wc.dataset}/measures/{m}.npz" for m in ALIGN["measures"]],
        grid=grid_json,
        shortlist=lambda wc: PLAN.shortlist_file(wc.dataset, "synthetic"),
    output:
        measures=[f"results/relict/{{dataset}}/measures/{m}.npz" for m in ALIGNED_MEASURES],
        table="results/relict/{dataset}/alignment.tsv",
        recall="results/relict/{dataset}/alignment_recall.json",
    log:
        "logs/relict_align/{dataset}.log",
    benchmark:
        "benchmarks/relict_align/{dataset}.tsv"
    wildcard_constraints:
        dataset=_alternatives(PLAN.aligned_datasets),
    conda:
        "../../envs/relict.yaml"
    threads: 2
    resources:
        mem_mb=8000,
    params:
        alignment=ALIGN,
        measures=ALIGN["measures"],
        synthetic_ids=lambda wc: [v.id for v in plan(wc).synthetic],
        training_ids=lambda wc: [s.id for s in plan(wc).train],
        n_closest=config["relict"]["n_closest"],
    script:
        "../scripts/relict_align.py"
