# Feature level (RELICT 2.3.2): one embedding file per dataset split, so feature-level
# comparisons never touch the volumes again.


rule embed:
    input:
        images=lambda wc: split_images(wc.dataset, wc.split),
    output:
        "results/relict/features/{dataset}/{split}.npz",
    log:
        "logs/embed/{dataset}/{split}.log",
    benchmark:
        "benchmarks/embed/{dataset}/{split}.tsv"
    params:
        features=config["relict"]["features"],
        ids=lambda wc: split_ids(wc.dataset, wc.split),
    threads: 2
    resources:
        mem_mb=6000,
    conda:
        "../../envs/relict.yaml"
    script:
        "../scripts/embed.py"


rule features_all:
    input:
        [f"results/relict/features/{d}/{s}.npz" for d in DATASETS for s in ("train", "synthetic")
         if any(m in FEATURE_MEASURES for m in MEASURES_BY_DS[d]) and (s == "synthetic" or d in OWN_TRAINING)],
        # the anonymisation stage's real test set: held-out patients' embeddings
        [f"results/relict/features/{d}/{s}.npz" for d in ANON_DATASETS for s in ("train", "heldout")],
