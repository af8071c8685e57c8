# The synthetic set to audit: the spiked set with a known truth (replicas = perturbed
# training scans, non-replicas = held-out scans), or volumes from the user's generator.


rule spike_volume_labelled:
    input:
        image=spiked_source,
        label=spiked_source_label,
    output:
        image="results/synthetic/{dataset}/images/{syn}.nii.gz",
        label="results/synthetic/{dataset}/labels/{syn}.nii.gz",
    log:
        "logs/spike_volume/{dataset}/{syn}.log",
    params:
        row=spiked_row,
        perturbation=lambda wc: ds_cfg(wc)["synthetic"]["spiked"]["perturbation"],
        seed=lambda wc: ds_cfg(wc)["synthetic"]["spiked"]["seed"],
    threads: 1
    resources:
        mem_mb=2000,
    wildcard_constraints:
        dataset=_alternatives([d for d in PERTURBED_DATASETS if TRAINING_OF[d] in LABELLED_DATASETS]),
    conda:
        "../../envs/imaging.yaml"
    script:
        "../scripts/spike_volume.py"


# training scans without label maps: the image only
use rule spike_volume_labelled as spike_volume with:
    input:
        image=spiked_source,
    output:
        image="results/synthetic/{dataset}/images/{syn}.nii.gz",
    wildcard_constraints:
        dataset=_alternatives([d for d in PERTURBED_DATASETS if TRAINING_OF[d] not in LABELLED_DATASETS]),


rule spike_tof_volume:
    input:
        heldout=tof_heldout_image,
        heldout_label=tof_heldout_label,
    output:
        image="results/synthetic/{dataset}/images/{syn}.nii.gz",
        label="results/synthetic/{dataset}/labels/{syn}.nii.gz",
    log:
        "logs/spike_tof_volume/{dataset}/{syn}.log",
    params:
        row=spiked_row,
        demo=lambda wc: ds_cfg(wc)["demo"],
        seed=lambda wc: ds_cfg(wc)["synthetic"]["spiked"]["seed"],
    threads: 1
    resources:
        mem_mb=2000,
    wildcard_constraints:
        dataset=_alternatives(TOF_DATASETS),
    conda:
        "../../envs/imaging.yaml"
    script:
        "../scripts/spike_tof_volume.py"


rule import_synthetic:
    input:
        image=lambda wc: plan(wc).synthetic_volume(wc.syn).image,
        grid=grid_json,
    output:
        image="results/synthetic/{dataset}/images/{syn}.nii.gz",
    log:
        "logs/import_synthetic/{dataset}/{syn}.log",
    params:
        off_grid=lambda wc: ds_cfg(wc)["synthetic"].get("off_grid", "error"),
    threads: 1
    resources:
        mem_mb=2000,
    wildcard_constraints:
        dataset=_alternatives(IMPORTED_DATASETS),
    conda:
        "../../envs/imaging.yaml"
    script:
        "../scripts/import_synthetic.py"


rule import_synthetic_label:
    input:
        label=user_synthetic_label,
        grid=grid_json,
    output:
        label="results/synthetic/{dataset}/labels/{syn}.nii.gz",
    log:
        "logs/import_synthetic_label/{dataset}/{syn}.log",
    params:
        n_classes=lambda wc: len(ds_cfg(wc)["segmentation"]["classes"]),
        off_grid=lambda wc: ds_cfg(wc)["synthetic"].get("off_grid", "error"),
    threads: 1
    resources:
        mem_mb=1000,
    wildcard_constraints:
        dataset=_alternatives(IMPORTED_DATASETS),
    conda:
        "../../envs/imaging.yaml"
    script:
        "../scripts/import_synthetic_label.py"


rule synthetic_table:
    input:
        images=lambda wc: synthetic_images(wc.dataset),
    output:
        table="results/synthetic/{dataset}/synthetic.tsv",
    log:
        "logs/synthetic_table/{dataset}.log",
    params:
        spiked=lambda wc: plan(wc).spiked,
        ids=lambda wc: [v.id for v in plan(wc).synthetic],
        source=lambda wc: ds_cfg(wc)["synthetic"]["source"],
    threads: 1
    resources:
        mem_mb=500,
    conda:
        "../../envs/imaging.yaml"
    script:
        "../scripts/synthetic_table.py"


rule reference_ratings:
    output:
        "results/synthetic/{dataset}/ratings_reference.tsv",
    log:
        "logs/reference_ratings/{dataset}.log",
    params:
        spiked=lambda wc: plan(wc).spiked,
    threads: 1
    resources:
        mem_mb=500,
    wildcard_constraints:
        dataset=_alternatives(SPIKED_DATASETS),
    conda:
        "../../envs/imaging.yaml"
    script:
        "../scripts/reference_ratings.py"


rule synthetic_all:
    input:
        "results/generator/generators.tsv",
        [f"results/synthetic/{d}/synthetic.tsv" for d in DATASETS],
        [f"results/synthetic/{d}/ratings_reference.tsv" for d in SPIKED_DATASETS],
