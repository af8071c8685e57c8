# Feature level (RELICT 2.3.2): one embedding file per dataset split, so feature-level
# comparisons never touch the volumes again.


rule embed:
    input:
        images=lambda wc: split_images(wc.dataset, wc.split),
        # the matched null's split: its texture, the held-out embeddings and scans, so that a null that
        # left the scans as they are reads their embeddings instead of computing them again
        reuse=lambda wc: PLAN.matched_embedding_reuse(wc.dataset) if wc.split == "matched" else [],
    output:
        "results/relict/features/{dataset}/{split}.npz",
    log:
        "logs/embed/{dataset}/{split}.log",
    benchmark:
        "benchmarks/embed/{dataset}/{split}.tsv"
    conda:
        "../../envs/relict.yaml"
    threads: 2
    resources:
        mem_mb=6000,
    params:
        features=config["relict"]["features"],
        ids=lambda wc: split_ids(wc.dataset, wc.split),
        batch_size=PLAN.compute["embed_batch_size"],
    script:
        "../scripts/embed.py"


rule features_all:
    input:
        [
            f"results/relict/features/{d}/{s}.npz"
            for d in DATASETS
            for s in ("train", "synthetic")
            if any(m in FEATURE_MEASURES for m in MEASURES_BY_DS[d]) and (s == "synthetic" or d in OWN_TRAINING)
        ],
        # the anonymisation stage's real test set: held-out patients' embeddings
        [f"results/relict/features/{d}/{s}.npz" for d in ANON_DATASETS for s in ("train", "heldout")],


# Choosing the feature level by measurement (params.yaml `feature_study`): every
# candidate network embeds a dataset once, its feature map pooled onto every grid;
# each (network, grid, scaling, measure) is scored against the dataset's truth or
# rating exactly as the workflow scores a measure. `make feature-study`; results/feature_study/.
STUDY = PLAN.feature_study
STUDY_DATASETS = PLAN.study_datasets
STUDY_NETWORKS = PLAN.study_networks


rule feature_study:
    input:
        training=lambda wc: preprocessed_images(wc.dataset, role="train"),
        synthetic=lambda wc: synthetic_images(wc.dataset),
        ratings=lambda wc: ratings_file(wc.dataset),
    output:
        "results/feature_study/{dataset}/{network}.tsv",
    log:
        "logs/feature_study/{dataset}/{network}.log",
    benchmark:
        "benchmarks/feature_study/{dataset}/{network}.tsv"
    wildcard_constraints:
        dataset=_alternatives(STUDY_DATASETS),
        network=_alternatives(STUDY_NETWORKS),
    priority: LATER
    conda:
        "../../envs/relict.yaml"
    threads: 2
    resources:
        mem_mb=8000,
    params:
        name=lambda wc: wc.network,
        network=lambda wc: STUDY["networks"][wc.network],
        grids=STUDY.get("grids"),
        scalings=STUDY.get("scalings"),
        n_closest=config["relict"]["n_closest"],
        threshold_step=config["relict"]["evaluation"]["threshold_step"],
        replica_min_score=config["relict"]["evaluation"]["replica_min_score"],
        synthetic_ids=lambda wc: [v.id for v in plan(wc).synthetic],
    script:
        "../scripts/feature_study.py"


rule feature_study_table:
    input:
        [f"results/feature_study/{d}/{n}.tsv" for d in STUDY_DATASETS for n in STUDY_NETWORKS],
    output:
        table="results/feature_study/table.tsv",
        markdown="results/feature_study/table.md",
        metrics="results/metrics/feature_study.json",
        figure=report(
            "results/feature_study/feature_study.png", caption="../report/feature_study.rst", category="Feature level"
        ),
    log:
        "logs/feature_study_table.log",
    conda:
        "../../envs/relict.yaml"
    threads: 1
    resources:
        mem_mb=1000,
    params:
        default=config["relict"]["features"],
        networks=STUDY["networks"],
    script:
        "../scripts/feature_study_table.py"


rule feature_study_all:
    input:
        "results/provenance.json",
        rules.feature_study_table.output if STUDY_DATASETS and STUDY_NETWORKS else [],
