# Membership inference on the released samples (synthaudit.membership, docs/membership.md): per synthetic
# set, can an attacker with a patient's scan tell from the samples alone that the patient trained the
# generator? The training x samples distances are the image level's own matrices; only the held-out scans
# (the non-members) x samples are computed here, with the same kernels. One job for every set
# (synthaudit.membership.stage: their start-ups were most of the stage's time). The ROC figures are drawn by
# the verdict (review.smk), in its one job that draws figures anyway.

MEMBERSHIP_SETS = PLAN.membership_sets()  # the plan's inputs of every set, built once


rule membership:
    input:
        PLAN.membership_files(MEMBERSHIP_SETS),
    output:
        summaries=[f"results/membership/{d}/membership.json" for d in MEMBERSHIP_SETS],
        patients=[f"results/membership/{d}/patients.tsv" for d in MEMBERSHIP_SETS],
        metrics="results/metrics/membership.json",
        index="results/membership/index.json",  # the folder exists (DVC tracks it) with no set to attack too
    log:
        "logs/membership.log",
    benchmark:
        "benchmarks/membership.tsv"
    conda:
        "../../envs/relict.yaml"
    threads: 1
    resources:
        mem_mb=2000,
    params:
        sets=MEMBERSHIP_SETS,
        settings=PLAN.membership,
        scaling=config["relict"]["features"]["scaling"],  # the embedding attacks compare as the feature level
    script:
        "../scripts/membership.py"


rule membership_all:
    input:
        "results/metrics/membership.json",
        "results/provenance.json",
