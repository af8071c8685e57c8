# Fidelity beside privacy (synthaudit.fidelity, docs/fidelity.md): on the feature level's stored
# embeddings, each reviewed synthetic set against its training scans, with the held-out scans as the
# real-vs-real floor and as C_T's test sample.


# FRD's features (synthaudit.fidelity.radiomics): PyRadiomics on every volume of one split, once per
# training set's train and held-out scans and per synthetic set, like the embeddings. Each distinct
# volume is extracted once: results/cache/radiomics keeps the features by the volume's content
# (synthaudit.fidelity.radiomics_cache), so a replica, a sample two sets share or a rerun reads them.
RADIOMICS_CACHE = "results/cache/radiomics"


rule radiomics:
    input:
        images=lambda wc: split_images(wc.dataset, wc.split),
        # the training scans' features first, so that a sample that copies one is read from the cache
        training_first=lambda wc: PLAN.fidelity_radiomics(wc.dataset, "train") if wc.split == "synthetic" else [],
    output:
        "results/fidelity/radiomics/{dataset}/{split}.npz",
    log:
        "logs/radiomics/{dataset}/{split}.log",
    benchmark:
        "benchmarks/radiomics/{dataset}/{split}.tsv"
    wildcard_constraints:
        split="train|heldout|synthetic",
    conda:
        "../../envs/relict.yaml"
    threads: 2
    resources:
        mem_mb=3000,
    params:
        ids=lambda wc: split_ids(wc.dataset, wc.split),
        cache=RADIOMICS_CACHE,
    script:
        "../scripts/radiomics.py"


# FRD within each label class (fidelity.frd_classes): the same features on each class's region of the
# label maps the segmentation level compares (synthaudit.fidelity.radiomics.extract_classes).
rule radiomics_classes:
    input:
        images=lambda wc: split_images(wc.dataset, wc.split),
        labels=lambda wc: split_labels(wc.dataset, wc.split),
        training_first=lambda wc: PLAN.fidelity_class_radiomics(wc.dataset, "train") if wc.split == "synthetic" else [],
    output:
        "results/fidelity/radiomics/{dataset}/{split}_classes.npz",
    log:
        "logs/radiomics_classes/{dataset}/{split}.log",
    benchmark:
        "benchmarks/radiomics_classes/{dataset}/{split}.tsv"
    wildcard_constraints:
        split="train|heldout|synthetic",
    conda:
        "../../envs/relict.yaml"
    threads: 2
    resources:
        mem_mb=3000,
    params:
        ids=lambda wc: split_ids(wc.dataset, wc.split),
        classes=lambda wc: ds_cfg(wc)["segmentation"]["classes"],
        cache=RADIOMICS_CACHE,
    script:
        "../scripts/radiomics_classes.py"


# The 2.5D FD's slice features (synthaudit.fidelity.slices), where fidelity.fd_2p5d names the weights of
# RadImageNet's ResNet-50 (the rule reads them, so a new file reruns it).
rule slice_features:
    input:
        images=lambda wc: split_images(wc.dataset, wc.split),
        weights=PLAN.fidelity["fd_2p5d"]["weights"] or [],
    output:
        "results/fidelity/slices/{dataset}/{split}.npz",
    log:
        "logs/slice_features/{dataset}/{split}.log",
    benchmark:
        "benchmarks/slice_features/{dataset}/{split}.tsv"
    wildcard_constraints:
        split="train|heldout|synthetic",
    conda:
        "../../envs/relict.yaml"
    threads: 2
    resources:
        mem_mb=6000,
    params:
        ids=lambda wc: split_ids(wc.dataset, wc.split),
        settings=PLAN.fidelity["fd_2p5d"],
        device=PLAN.compute["device"],
    script:
        "../scripts/slice_features.py"


rule fidelity:
    input:
        # the embeddings, FRD's features (whole and per class) and the 2.5D FD's slice features of each split
        unpack(lambda wc: PLAN.fidelity_inputs(wc.dataset)),
    output:
        summary="results/fidelity/{dataset}/fidelity.json",
        table="results/fidelity/{dataset}/per_volume.tsv",
        figure=report(
            "results/figures/{dataset}/fidelity.png",
            caption="../report/fidelity.rst",
            category="Fidelity",
            subcategory="{dataset}",
        ),
    log:
        "logs/fidelity/{dataset}.log",
    benchmark:
        "benchmarks/fidelity/{dataset}.tsv"
    wildcard_constraints:
        dataset=_alternatives(PLAN.fidelity_datasets),
    conda:
        "../../envs/relict.yaml"
    threads: 1
    resources:
        mem_mb=2000,
    params:
        settings=PLAN.fidelity,
        scaling=config["relict"]["features"]["scaling"],  # the nearest-neighbour measures compare as the feature level
        patients=lambda wc: {s.id: s.patient_id for s in PLANS[TRAINING_OF[wc.dataset]].scans},
    script:
        "../scripts/fidelity.py"


rule fidelity_metrics:
    input:
        summaries=[f"results/fidelity/{d}/fidelity.json" for d in PLAN.fidelity_datasets],
    output:
        metrics="results/metrics/fidelity.json",
        index="results/fidelity/index.json",  # the folder exists (DVC tracks it) with no set to measure too
    log:
        "logs/fidelity_metrics.log",
    localrule: True
    conda:
        "../../envs/relict.yaml"
    threads: 1
    resources:
        mem_mb=500,
    params:
        datasets=PLAN.fidelity_datasets,
    script:
        "../scripts/fidelity_metrics.py"


rule fidelity_all:
    input:
        "results/metrics/fidelity.json",
        "results/provenance.json",
