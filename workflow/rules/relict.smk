# RELICT (paper 2.3, 2.4, 2.7): all-pairs measures between every synthetic and every
# training volume at image, feature and segmentation level; the distance ratio (or the
# absolute distance at segmentation level), ranking, and evaluation against the rating.
# One job per measure and shard (params.yaml `compute`), gathered into one matrix; the
# shards' benchmark files together give Table 2's runtimes.


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


# The held-out real scans against the training set, once per training set and measure: the
# null of "a new patient" for calibrated replica calls (and the reference of recall).
use rule relict_measure as relict_heldout_measure with:
    input:
        synthetic=lambda wc: preprocessed_images(wc.dataset, role="heldout"),
        training=lambda wc: preprocessed_images(wc.dataset, role="train"),
        training_qc=training_qc,
        grid=grid_json,
        shortlist=lambda wc: PLAN.shortlist_file(wc.dataset, "heldout", wc.measure),
    output:
        "results/relict/{dataset}/heldout/{measure}.npz",
    log:
        "logs/relict_heldout_measure/{dataset}/{measure}.log",
    benchmark:
        "benchmarks/relict_heldout_measure/{dataset}/{measure}.tsv"
    wildcard_constraints:
        dataset=_alternatives(PLAN.calibration_bases),
        measure=_alternatives(IMAGE_MEASURES),
    params:
        synthetic_ids=lambda wc: [s.id for s in plan(wc).heldout],
        training_ids=lambda wc: [s.id for s in plan(wc).train],
        ssim=config["relict"]["ssim"],


use rule relict_feature_measure as relict_heldout_feature_measure with:
    input:
        synthetic="results/relict/features/{dataset}/heldout.npz",
        training="results/relict/features/{dataset}/train.npz",
    output:
        "results/relict/{dataset}/heldout/{measure}.npz",
    log:
        "logs/relict_heldout_feature_measure/{dataset}/{measure}.log",
    benchmark:
        "benchmarks/relict_heldout_measure/{dataset}/{measure}.tsv"
    wildcard_constraints:
        dataset=_alternatives(PLAN.calibration_bases),
        measure=_alternatives(FEATURE_MEASURES),


use rule relict_segmentation_measure as relict_heldout_segmentation_measure with:
    input:
        synthetic=lambda wc: [seg_label_path(wc.dataset, s.id, False) for s in plan(wc).heldout],
        training=lambda wc: seg_labels(wc.dataset, "train"),
        grid=grid_json,
    output:
        "results/relict/{dataset}/heldout/{measure}.npz",
    log:
        "logs/relict_heldout_segmentation_measure/{dataset}/{measure}.log",
    benchmark:
        "benchmarks/relict_heldout_measure/{dataset}/{measure}.tsv"
    wildcard_constraints:
        dataset=_alternatives(PLAN.heldout_seg_bases),
        measure=_alternatives(SEG_MEASURES),
    params:
        synthetic_ids=lambda wc: [s.id for s in plan(wc).heldout],
        training_ids=lambda wc: [s.id for s in plan(wc).train],
        classes=lambda wc: ds_cfg(wc)["segmentation"]["classes"],


use rule relict_align as relict_heldout_align with:
    input:
        synthetic=lambda wc: preprocessed_images(wc.dataset, role="heldout"),
        training=lambda wc: preprocessed_images(wc.dataset, role="train"),
        plain=lambda wc: [f"results/relict/{wc.dataset}/heldout/{m}.npz" for m in ALIGN["measures"]],
        grid=grid_json,
        shortlist=lambda wc: PLAN.shortlist_file(wc.dataset, "heldout"),
    output:
        measures=[f"results/relict/{{dataset}}/heldout/{m}.npz" for m in ALIGNED_MEASURES],
        table="results/relict/{dataset}/heldout/alignment.tsv",
        recall="results/relict/{dataset}/heldout/alignment_recall.json",
    log:
        "logs/relict_heldout_align/{dataset}.log",
    benchmark:
        "benchmarks/relict_heldout_align/{dataset}.tsv"
    wildcard_constraints:
        dataset=_alternatives(PLAN.heldout_aligned_bases),
    params:
        alignment=ALIGN,
        measures=ALIGN["measures"],
        synthetic_ids=lambda wc: [s.id for s in plan(wc).heldout],
        training_ids=lambda wc: [s.id for s in plan(wc).train],
        n_closest=config["relict"]["n_closest"],


# The matched null (relict.calibration.matched_null; synthaudit.relict.texture): a generator's
# samples are smoother than scans, and calls calibrated on sharp scans take new patients. Per
# synthetic set, its held-out scans are degraded to the samples' own blur and noise (fitted in
# relict_texture, from the samples only) and scored again, the same measures, search and code.
# One job per synthetic set: each scan is a blur and a draw of noise (well under a second), which
# as a job of its own paid Python's start and the imports 20 times over (172 of the demo's 625 jobs).
for _d in PLAN.matched_datasets:

    rule:
        name:
            f"relict_matched_heldout_{_d}"
        input:
            texture=f"results/relict/{_d}/texture.json",
            scans=[f"results/preprocessed/{TRAINING_OF[_d]}/images/{s}.nii.gz" for s in PLAN.split_ids(_d, "matched")],
        output:
            PLAN.matched_images(_d),
        log:
            f"logs/relict_matched_heldout/{_d}.log",
        benchmark:
            f"benchmarks/relict_matched_heldout/{_d}.tsv"
        conda:
            "../../envs/relict.yaml"
        threads: 1
        resources:
            mem_mb=2000,
        params:
            # scan k of the set's held-out scans draws its noise from matched_seed + k
            seeds=[CALIBRATION["matched_seed"] + k for k, _ in enumerate(PLAN.split_ids(_d, "matched"))],
        script:
            "../scripts/relict_matched_heldout.py"


use rule relict_measure as relict_matched_measure with:
    input:
        synthetic=lambda wc: PLAN.matched_images(wc.dataset),
        training=lambda wc: preprocessed_images(wc.dataset, role="train"),
        training_qc=training_qc,
        grid=grid_json,
        shortlist=lambda wc: PLAN.shortlist_file(wc.dataset, "matched", wc.measure),
    output:
        "results/relict/{dataset}/matched/{measure}.npz",
    log:
        "logs/relict_matched_measure/{dataset}/{measure}.log",
    benchmark:
        "benchmarks/relict_matched_measure/{dataset}/{measure}.tsv"
    wildcard_constraints:
        dataset=_alternatives(PLAN.matched_datasets),
        measure=_alternatives(IMAGE_MEASURES),
    params:
        synthetic_ids=lambda wc: PLAN.split_ids(wc.dataset, "matched"),
        training_ids=lambda wc: [s.id for s in plan(wc).train],
        ssim=config["relict"]["ssim"],


use rule relict_feature_measure as relict_matched_feature_measure with:
    input:
        synthetic="results/relict/features/{dataset}/matched.npz",
        training=training_features,
    output:
        "results/relict/{dataset}/matched/{measure}.npz",
    log:
        "logs/relict_matched_feature_measure/{dataset}/{measure}.log",
    benchmark:
        "benchmarks/relict_matched_measure/{dataset}/{measure}.tsv"
    wildcard_constraints:
        dataset=_alternatives(PLAN.matched_datasets),
        measure=_alternatives(FEATURE_MEASURES),


use rule relict_align as relict_matched_align with:
    input:
        synthetic=lambda wc: PLAN.matched_images(wc.dataset),
        training=lambda wc: preprocessed_images(wc.dataset, role="train"),
        plain=lambda wc: [f"results/relict/{wc.dataset}/matched/{m}.npz" for m in ALIGN["measures"]],
        grid=grid_json,
        shortlist=lambda wc: PLAN.shortlist_file(wc.dataset, "matched"),
    output:
        measures=[f"results/relict/{{dataset}}/matched/{m}.npz" for m in ALIGNED_MEASURES],
        table="results/relict/{dataset}/matched/alignment.tsv",
        recall="results/relict/{dataset}/matched/alignment_recall.json",
    log:
        "logs/relict_matched_align/{dataset}.log",
    benchmark:
        "benchmarks/relict_matched_align/{dataset}.tsv"
    wildcard_constraints:
        dataset=_alternatives(PLAN.matched_aligned_datasets),
    params:
        alignment=ALIGN,
        measures=ALIGN["measures"],
        synthetic_ids=lambda wc: PLAN.split_ids(wc.dataset, "matched"),
        training_ids=lambda wc: [s.id for s in plan(wc).train],
        n_closest=config["relict"]["n_closest"],


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


# the held-out scans' side of that check (their texture and blur curve), once per training set
rule relict_heldout_texture:
    input:
        heldout=lambda wc: preprocessed_images(wc.dataset, "heldout"),
    output:
        "results/relict/{dataset}/heldout/texture.json",
    log:
        "logs/relict_heldout_texture/{dataset}.log",
    wildcard_constraints:
        dataset=_alternatives(PLAN.texture_bases),
    conda:
        "../../envs/relict.yaml"
    threads: 1
    resources:
        mem_mb=3000,
    script:
        "../scripts/relict_heldout_texture.py"


# the synthetic set's smoothness and noise against the held-out scans that calibrate its calls
# (synthaudit.relict.texture): a generator's samples are smoother than scans, and calls calibrated
# on sharp scans may not hold their false-positive rate on them; the verdict says so
rule relict_texture:
    input:
        synthetic=lambda wc: synthetic_images(wc.dataset),
        heldout_texture=lambda wc: f"results/relict/{TRAINING_OF[wc.dataset]}/heldout/texture.json",
        heldout=lambda wc: preprocessed_images(TRAINING_OF[wc.dataset], "heldout"),
    output:
        summary="results/relict/{dataset}/texture.json",
        table="results/relict/{dataset}/texture.tsv",
    log:
        "logs/relict_texture/{dataset}.log",
    wildcard_constraints:
        dataset=_alternatives(PLAN.texture_datasets),
    conda:
        "../../envs/relict.yaml"
    threads: 1
    resources:
        mem_mb=3000,
    params:
        percentiles=CALIBRATION["texture_range_percentiles"],
        seed=CALIBRATION["matched_seed"],
        matched=lambda wc: wc.dataset in PLAN.matched_datasets,
    script:
        "../scripts/relict_texture.py"


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


# Local replicas (relict.local; synthaudit.relict.local): block-wise ratios of every synthetic
# volume, and of the held-out scans (the null), against the training set; each volume's lowest
# block relative to the held-out median there, calibrated as a max statistic over the blocks.
rule relict_local:
    input:
        synthetic=lambda wc: synthetic_images(wc.dataset),
        training=lambda wc: preprocessed_images(wc.dataset, role="train"),
        heldout=lambda wc: preprocessed_images(TRAINING_OF[wc.dataset], role="heldout"),
        grid=grid_json,
        # the positive controls centre a donor's region on its label foreground where every scan has one
        labels=lambda wc: training_labels(wc) if TRAINING_OF[wc.dataset] in LABELLED_DATASETS else [],
    output:
        calls="results/relict/{dataset}/local/local_calls.tsv",
        controls="results/relict/{dataset}/local/local_controls.tsv",
        summary="results/relict/{dataset}/local/local.json",
        figure=report(
            "results/figures/{dataset}/local_copies.png",
            category="Local copies",
            subcategory="{dataset}",
            caption="../report/local_copies.rst",
        ),
        control_figure=report(
            "results/figures/{dataset}/local_controls.png",
            category="Local copies",
            subcategory="{dataset}",
            caption="../report/local_controls.rst",
        ),
    log:
        "logs/relict_local/{dataset}.log",
    benchmark:
        "benchmarks/relict_local/{dataset}.tsv"
    wildcard_constraints:
        dataset=_alternatives(LOCAL_DATASETS),
    conda:
        "../../envs/relict.yaml"
    threads: 2
    resources:
        mem_mb=8000,
    params:
        local=PLAN.local,
        n_closest=config["relict"]["n_closest"],
        rate=CALIBRATION["rate"],
        synthetic_ids=lambda wc: [v.id for v in plan(wc).synthetic],
        training_ids=lambda wc: [s.id for s in plan(wc).train],
        training_patients=lambda wc: [s.patient_id for s in plan(wc).train],
        heldout_ids=lambda wc: [s.id for s in PLANS[TRAINING_OF[wc.dataset]].heldout],
        heldout_patients=lambda wc: [s.patient_id for s in PLANS[TRAINING_OF[wc.dataset]].heldout],
        source_patients=heldout_source_patients,
    script:
        "../scripts/relict_local.py"


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
