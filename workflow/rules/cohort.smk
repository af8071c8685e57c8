# The embedded demo cohort: simulated NCCT-like patients (baseline + follow-up) from
# nilearn's MNI152 tissue maps, written as raw scans in their own scanner space;
# and a resolved manifest for every dataset.


# The simulation's 1 mm MNI atlas, built once for every patient's job (temp: deleted when the
# last one has read it)
rule demo_atlas:
    output:
        temp("results/cohort/demo_atlas_1mm.npz"),
    log:
        "logs/demo_atlas.log",
    threads: 1
    resources:
        mem_mb=3000,
    conda:
        "../../envs/imaging.yaml"
    script:
        "../scripts/demo_atlas.py"


rule demo_patient:
    input:
        atlas="results/cohort/demo_atlas_1mm.npz",
    output:
        baseline_image="results/cohort/{dataset}/images/{patient}_bl.nii.gz",
        baseline_label="results/cohort/{dataset}/labels/{patient}_bl.nii.gz",
        followup_image="results/cohort/{dataset}/images/{patient}_fu.nii.gz",
        followup_label="results/cohort/{dataset}/labels/{patient}_fu.nii.gz",
        truth="results/cohort/{dataset}/truth/{patient}.json",
    log:
        "logs/demo_patient/{dataset}/{patient}.log",
    benchmark:
        "benchmarks/demo_patient/{dataset}/{patient}.tsv"
    params:
        demo=lambda wc: config["datasets"][wc.dataset]["demo"],
    threads: 1
    resources:
        mem_mb=3000,
    wildcard_constraints:
        dataset=_alternatives(DEMO_DATASETS),
        patient=r"p\d+",
    conda:
        "../../envs/imaging.yaml"
    script:
        "../scripts/demo_patient.py"


rule demo_tof_subject:
    output:
        image="results/cohort/{dataset}/images/{subject}.nii.gz",
        label="results/cohort/{dataset}/labels/{subject}.nii.gz",
        truth="results/cohort/{dataset}/truth/{subject}.json",
    log:
        "logs/demo_tof_subject/{dataset}/{subject}.log",
    params:
        demo=lambda wc: config["datasets"][wc.dataset]["demo"],
    threads: 1
    resources:
        mem_mb=2000,
    wildcard_constraints:
        dataset=_alternatives(TOF_DATASETS),
        subject=r"s\d+",
    conda:
        "../../envs/imaging.yaml"
    script:
        "../scripts/demo_tof_subject.py"


rule dataset_manifest:
    input:
        lambda wc: [raw_image_path(wc.dataset, s.id) for s in plan(wc).scans],
    output:
        "results/cohort/{dataset}/manifest.tsv",
    log:
        "logs/dataset_manifest/{dataset}.log",
    params:
        rows=manifest_rows,
    threads: 1
    resources:
        mem_mb=500,
    conda:
        "../../envs/imaging.yaml"
    script:
        "../scripts/dataset_manifest.py"


rule cohort_all:
    input:
        [f"results/cohort/{d}/manifest.tsv" for d in OWN_TRAINING],
