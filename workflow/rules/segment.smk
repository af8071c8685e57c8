# Segmentation level (RELICT 2.3.3): label maps for the training and the synthetic
# volumes from one source per dataset: a MONAI 3D U-Net trained here, an nnU-Net v2
# model's predictions, or label files supplied by the user.


rule segment_train_unet:
    input:
        images=lambda wc: preprocessed_images(wc.dataset, role="train"),
        labels=training_labels,
    output:
        model="results/relict/segmentation/{dataset}/unet/model.pt",
        history="results/relict/segmentation/{dataset}/unet/history.tsv",
    log:
        "logs/segment_train_unet/{dataset}.log",
    benchmark:
        "benchmarks/segment_train_unet/{dataset}.tsv"
    conda:
        "../../envs/relict.yaml"
    threads: 2
    resources:
        mem_mb=8000,
        gpu=1,
    params:
        unet=lambda wc: ds_cfg(wc)["segmentation"]["unet"],
        classes=lambda wc: ds_cfg(wc)["segmentation"]["classes"],
        checkpoint="results/relict/segmentation/{dataset}/unet/checkpoint.pt",
    script:
        "../scripts/segment_train_unet.py"


# one prediction job per dataset writes every label map (the model loads once; per-volume
# jobs spent most of their time importing MONAI)
for _d in PLAN.unet_datasets:

    rule:
        name:
            f"segment_predict_unet_{_d}"
        input:
            model=f"results/relict/segmentation/{TRAINING_OF[_d]}/unet/model.pt",
            images=[volume_image(_d, v) for v in all_volume_ids(_d)],
        output:
            [f"results/relict/segmentation/{_d}/labels/{v}.nii.gz" for v in all_volume_ids(_d)],
        log:
            f"logs/segment_predict_unet/{_d}.log",
        benchmark:
            f"benchmarks/segment_predict/{_d}/unet.tsv"
        conda:
            "../../envs/relict.yaml"
        threads: 2
        resources:
            mem_mb=4000,
        params:
            patch_size=config["datasets"][_d]["segmentation"]["unet"]["patch_size"],
            ids=all_volume_ids(_d),
        script:
            "../scripts/segment_predict_unet.py"


rule nnunet_predict:
    input:
        images=lambda wc: [volume_image(wc.dataset, v) for v in all_volume_ids(wc.dataset)],
    output:
        directory("results/relict/segmentation/{dataset}/nnunet_predictions"),
    log:
        "logs/nnunet_predict/{dataset}.log",
    benchmark:
        "benchmarks/segment_predict/{dataset}/nnunet.tsv"
    conda:
        "../../envs/imaging.yaml"
    threads: 2
    resources:
        mem_mb=8000,
        gpu=1,
    params:
        command=lambda wc: ds_cfg(wc)["segmentation"]["nnunet"]["command"],
        ids=lambda wc: all_volume_ids(wc.dataset),
    script:
        "../scripts/nnunet_predict.py"


rule import_nnunet_label:
    input:
        label=nnunet_prediction,
        grid=grid_json,
    output:
        label="results/relict/segmentation/{dataset}/labels/{vid}.nii.gz",
    log:
        "logs/import_nnunet_label/{dataset}/{vid}.log",
    wildcard_constraints:
        dataset=_alternatives(PLAN.nnunet_datasets),
    conda:
        "../../envs/imaging.yaml"
    threads: 1
    resources:
        mem_mb=1000,
    params:
        n_classes=lambda wc: len(ds_cfg(wc)["segmentation"]["classes"]),
        off_grid="error",  # predictions of the preprocessed volumes: on their grid, or refused (not a parameter)
    script:
        "../scripts/import_synthetic_label.py"


rule segment_all:
    input:
        [p for d in PLAN.seg_datasets for s in ("train", "synthetic") for p in seg_labels(d, s)],
