# Preprocessing (RELICT 2.1): affine registration of every scan to the MNI template (or, with
# registration.target: reference, to the dataset's first training scan, itself registered to the
# template once), resampling onto the ROI grid, intensity window; per-scan QC and a montage.


rule template:
    input:
        reference=grid_reference,
    output:
        grid="results/preprocessed/{dataset}/grid.json",
        template="results/preprocessed/{dataset}/template.nii.gz",
        template_roi="results/preprocessed/{dataset}/template_roi.nii.gz",
    log:
        "logs/template/{dataset}.log",
    conda:
        "../../envs/imaging.yaml"
    threads: 1
    resources:
        mem_mb=3000,
    params:
        preprocess=lambda wc: ds_cfg(wc)["preprocess"],
    script:
        "../scripts/template.py"


# registration.target: reference: the first training scan registered to the template once and
# kept in its own space (binned to spacing_mm), with the template's region as the metric's mask;
# every scan is then registered to it and resampled through both transforms at once
rule registration_reference:
    input:
        reference=registration_reference_image,
        template="results/preprocessed/{dataset}/template.nii.gz",
    output:
        image="results/preprocessed/{dataset}/registration_reference.nii.gz",
        mask="results/preprocessed/{dataset}/registration_reference_mask.nii.gz",
        transform="results/preprocessed/{dataset}/registration_reference.tfm",
        qc="results/preprocessed/{dataset}/registration_reference.json",
    log:
        "logs/registration_reference/{dataset}.log",
    conda:
        "../../envs/imaging.yaml"
    threads: 1
    resources:
        mem_mb=4000,
    params:
        preprocess=lambda wc: ds_cfg(wc)["preprocess"],
    script:
        "../scripts/registration_reference.py"


rule preprocess_scan_labelled:
    input:
        unpack(registration_target),  # registration.target: reference: the registered reference scan
        image=raw_image,
        label=raw_label,
        grid="results/preprocessed/{dataset}/grid.json",
        template="results/preprocessed/{dataset}/template.nii.gz",
        template_roi="results/preprocessed/{dataset}/template_roi.nii.gz",
    output:
        image="results/preprocessed/{dataset}/images/{scan}.nii.gz",
        label="results/preprocessed/{dataset}/labels/{scan}.nii.gz",
        transform="results/preprocessed/{dataset}/transforms/{scan}.tfm",
        qc="results/preprocessed/{dataset}/qc/{scan}.json",
    log:
        "logs/preprocess_scan/{dataset}/{scan}.log",
    benchmark:
        "benchmarks/preprocess_scan/{dataset}/{scan}.tsv"
    wildcard_constraints:
        dataset=_alternatives(LABELLED_DATASETS),
    conda:
        "../../envs/imaging.yaml"
    threads: 1
    resources:
        mem_mb=4000,
    params:
        preprocess=lambda wc: ds_cfg(wc)["preprocess"],
        n_classes=declared_classes,
    script:
        "../scripts/preprocess_scan.py"


# datasets where some scans have no label: images and labels in separate jobs
use rule preprocess_scan_labelled as preprocess_scan with:
    input:
        unpack(registration_target),
        image=raw_image,
        grid="results/preprocessed/{dataset}/grid.json",
        template="results/preprocessed/{dataset}/template.nii.gz",
        template_roi="results/preprocessed/{dataset}/template_roi.nii.gz",
    output:
        image="results/preprocessed/{dataset}/images/{scan}.nii.gz",
        transform="results/preprocessed/{dataset}/transforms/{scan}.tfm",
        qc="results/preprocessed/{dataset}/qc/{scan}.json",
    wildcard_constraints:
        dataset=_alternatives(PLAN.unlabelled_datasets),


rule preprocess_label:
    input:
        label=raw_label,
        grid="results/preprocessed/{dataset}/grid.json",
        transform="results/preprocessed/{dataset}/transforms/{scan}.tfm",
    output:
        label="results/preprocessed/{dataset}/labels/{scan}.nii.gz",
    log:
        "logs/preprocess_label/{dataset}/{scan}.log",
    wildcard_constraints:
        dataset=_alternatives(PLAN.unlabelled_datasets),
    conda:
        "../../envs/imaging.yaml"
    threads: 1
    resources:
        mem_mb=2000,
    params:
        preprocess=lambda wc: ds_cfg(wc)["preprocess"],
        n_classes=declared_classes,
    script:
        "../scripts/preprocess_label.py"


rule preprocess_qc:
    input:
        qc=lambda wc: [f"results/preprocessed/{wc.dataset}/qc/{s.id}.json" for s in plan(wc).scans],
        images=lambda wc: preprocessed_images(wc.dataset),
        target=lambda wc: PLAN.qc_target(wc.dataset)["path"],  # the registration's own target, on the grid
    output:
        table="results/preprocessed/{dataset}/qc.tsv",
        montage=report(
            "results/preprocessed/{dataset}/qc_montage.png",
            caption="../report/qc_montage.rst",
            category="Preprocessing",
            subcategory="{dataset}",
        ),
    log:
        "logs/preprocess_qc/{dataset}.log",
    conda:
        "../../envs/imaging.yaml"
    threads: 1
    resources:
        mem_mb=3000,
    params:
        ids=lambda wc: [s.id for s in plan(wc).scans],
        patients=lambda wc: [s.patient_id for s in plan(wc).scans],
        target=lambda wc: PLAN.qc_target(wc.dataset)["name"],
        target_id=lambda wc: PLAN.qc_target(wc.dataset)["id"],
        outlier_mads=lambda wc: PLAN.qc_target(wc.dataset)["qc_outlier_mads"],
        min_correlation=lambda wc: PLAN.qc_target(wc.dataset)["qc_min_correlation"],
    script:
        "../scripts/preprocess_qc.py"


rule preprocess_all:
    input:
        [f"results/preprocessed/{d}/qc.tsv" for d in OWN_TRAINING],
        [lab for d in OWN_TRAINING for lab in preprocessed_labels(d)],
