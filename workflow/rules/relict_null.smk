# The null of "a new patient" for calibrated replica calls: the held-out real scans against the
# training set (the measures of relict.smk under new names), the matched null of held-out scans
# degraded like the samples, and the smoothness check that decides it.


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
