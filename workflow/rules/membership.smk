# Membership inference on the released samples (synthaudit.membership, docs/membership.md): per synthetic
# set, can an attacker with a patient's scan tell from the samples alone that the patient trained the
# generator? The training x samples distances are the image level's own matrices; only the held-out scans
# (the non-members) x samples are computed here, with the same kernels. The ROC figures are drawn by the
# verdict (review.smk), in its one job that draws figures anyway.


rule membership:
    input:
        heldout=lambda wc: preprocessed_images(wc.dataset, role="heldout"),
        synthetic=lambda wc: synthetic_images(wc.dataset),
        training_distances=lambda wc: [
            f"results/relict/{wc.dataset}/measures/{m}.npz" for m in PLAN.membership_measures(wc.dataset)
        ],
        embeddings=lambda wc: PLAN.membership_embeddings(wc.dataset),
        filter_scores=lambda wc: PLAN.membership_filter_scores(wc.dataset),
        grid=grid_json,
    output:
        summary="results/membership/{dataset}/membership.json",
        patients="results/membership/{dataset}/patients.tsv",
    log:
        "logs/membership/{dataset}.log",
    benchmark:
        "benchmarks/membership/{dataset}.tsv"
    wildcard_constraints:
        dataset=_alternatives(PLAN.membership_datasets),
    conda:
        "../../envs/relict.yaml"
    threads: 1
    resources:
        mem_mb=2000,
    params:
        settings=PLAN.membership,
        measures=lambda wc: PLAN.membership_measures(wc.dataset),
        candidates=lambda wc: PLAN.membership_inputs(wc.dataset),
        synthetic_ids=lambda wc: split_ids(wc.dataset, "synthetic"),
        filter_spaces=lambda wc: [Path(p).parent.name for p in PLAN.membership_filter_scores(wc.dataset)],
        scaling=config["relict"]["features"]["scaling"],  # the embedding attacks compare as the feature level
    script:
        "../scripts/membership.py"


rule membership_metrics:
    input:
        summaries=[f"results/membership/{d}/membership.json" for d in PLAN.membership_datasets],
    output:
        metrics="results/metrics/membership.json",
        index="results/membership/index.json",  # the folder exists (DVC tracks it) with no set to attack too
    log:
        "logs/membership_metrics.log",
    localrule: True
    conda:
        "../../envs/relict.yaml"
    threads: 1
    resources:
        mem_mb=500,
    params:
        datasets=PLAN.membership_datasets,
    script:
        "../scripts/membership_metrics.py"


rule membership_all:
    input:
        "results/metrics/membership.json",
        "results/provenance.json",
