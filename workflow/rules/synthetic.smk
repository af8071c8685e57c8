# The synthetic set to audit: the spiked set with a known truth (replicas = perturbed
# training scans, non-replicas = held-out scans), or volumes from the user's generator.


# One job per spiked set, not per volume: perturbing a volume takes a fraction of a second,
# less than a job's start (Python, NumPy, nibabel, SciPy): the demo's 96 spiked volumes took
# 74 job-seconds as 96 jobs and 17 s as 5 (issue 19). Each volume's random stream is seeded by its id, so the files are those the
# per-volume jobs wrote. The label maps are warped alongside when the training set has them.
for _d in PLAN.perturbed_datasets:
    _labelled = TRAINING_OF[_d] in LABELLED_DATASETS

    rule:
        name:
            f"spike_{_d}"
        input:
            images=[PLAN.spiked_source(_d, v) for v in spiked_ids(_d)],
            labels=[PLAN.spiked_source_label(_d, v) for v in spiked_ids(_d)] if _labelled else [],
        output:
            images=[f"results/synthetic/{_d}/images/{v}.nii.gz" for v in spiked_ids(_d)],
            labels=[f"results/synthetic/{_d}/labels/{v}.nii.gz" for v in spiked_ids(_d)] if _labelled else [],
        log:
            f"logs/spike/{_d}.log",
        benchmark:
            f"benchmarks/spike/{_d}.tsv"
        conda:
            "../../envs/imaging.yaml"
        threads: 1
        resources:
            mem_mb=2000,
        params:
            rows=PLANS[_d].spiked,
            perturbation=config["datasets"][_d]["synthetic"]["spiked"]["perturbation"],
            seed=config["datasets"][_d]["synthetic"]["spiked"]["seed"],
        script:
            "../scripts/spike_dataset.py"


# TOF: an anatomy replica is rendered (a training subject's vessel tree over a new
# background); a non-replica is a held-out scan, copied
for _d in [d for d in PLAN.tof_datasets if d in SPIKED_DATASETS]:
    _copied = [v for v in spiked_ids(_d) if PLAN.spiked_row(_d, v)["kind"] != "replica"]

    rule:
        name:
            f"spike_tof_{_d}"
        input:
            heldout=[PLAN.spiked_source(_d, v) for v in _copied],
            heldout_label=[PLAN.spiked_source_label(_d, v) for v in _copied],
        output:
            images=[f"results/synthetic/{_d}/images/{v}.nii.gz" for v in spiked_ids(_d)],
            labels=[f"results/synthetic/{_d}/labels/{v}.nii.gz" for v in spiked_ids(_d)],
        log:
            f"logs/spike_tof/{_d}.log",
        conda:
            "../../envs/imaging.yaml"
        threads: 1
        resources:
            mem_mb=2000,
        params:
            rows=PLANS[_d].spiked,
            demo=config["datasets"][_d]["demo"],
            seed=config["datasets"][_d]["synthetic"]["spiked"]["seed"],
        script:
            "../scripts/spike_tof_dataset.py"


rule import_synthetic:
    input:
        image=lambda wc: plan(wc).synthetic_volume(wc.syn).image,
        grid=grid_json,
    output:
        image="results/synthetic/{dataset}/images/{syn}.nii.gz",
    log:
        "logs/import_synthetic/{dataset}/{syn}.log",
    wildcard_constraints:
        dataset=_alternatives(PLAN.imported_datasets),
    conda:
        "../../envs/imaging.yaml"
    threads: 1
    resources:
        mem_mb=2000,
    params:
        off_grid=lambda wc: ds_cfg(wc)["synthetic"]["off_grid"],
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
    wildcard_constraints:
        dataset=_alternatives(PLAN.imported_datasets),
    conda:
        "../../envs/imaging.yaml"
    threads: 1
    resources:
        mem_mb=1000,
    params:
        n_classes=lambda wc: len(ds_cfg(wc)["segmentation"]["classes"]),
        off_grid=lambda wc: ds_cfg(wc)["synthetic"]["off_grid"],
    script:
        "../scripts/import_synthetic_label.py"


rule synthetic_table:
    input:
        images=lambda wc: synthetic_images(wc.dataset),
    output:
        table="results/synthetic/{dataset}/synthetic.tsv",
    log:
        "logs/synthetic_table/{dataset}.log",
    localrule: True
    conda:
        "../../envs/imaging.yaml"
    threads: 1
    resources:
        mem_mb=500,
    params:
        spiked=lambda wc: plan(wc).spiked,
        ids=lambda wc: [v.id for v in plan(wc).synthetic],
        source=lambda wc: ds_cfg(wc)["synthetic"]["source"],
    script:
        "../scripts/synthetic_table.py"


rule reference_ratings:
    output:
        "results/synthetic/{dataset}/ratings_reference.tsv",
    log:
        "logs/reference_ratings/{dataset}.log",
    wildcard_constraints:
        dataset=_alternatives(SPIKED_DATASETS),
    localrule: True
    conda:
        "../../envs/imaging.yaml"
    threads: 1
    resources:
        mem_mb=500,
    params:
        spiked=lambda wc: plan(wc).spiked,
    script:
        "../scripts/reference_ratings.py"


rule synthetic_all:
    input:
        "results/generator/generators.tsv",
        [f"results/synthetic/{d}/synthetic.tsv" for d in DATASETS],
        [f"results/synthetic/{d}/ratings_reference.tsv" for d in SPIKED_DATASETS],
