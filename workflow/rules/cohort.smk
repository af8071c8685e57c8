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
    conda:
        "../../envs/imaging.yaml"
    threads: 1
    resources:
        mem_mb=3000,
    script:
        "../scripts/demo_atlas.py"


# One job per simulated dataset, not per patient: each job paid Python's start and the
# imports of NumPy, nibabel and SciPy again (issue 19; the demo's 22 patients: 29 job-seconds
# as 22 jobs, 20 s as one). Each patient's stream is seeded by its number, so the files are
# those the per-patient jobs wrote.
for _d in PLAN.demo_datasets:

    rule:
        name:
            f"demo_patients_{_d}"
        input:
            atlas="results/cohort/demo_atlas_1mm.npz",
        output:
            baseline_image=[f"results/cohort/{_d}/images/{p}_bl.nii.gz" for p in demo_subjects(_d)],
            baseline_label=[f"results/cohort/{_d}/labels/{p}_bl.nii.gz" for p in demo_subjects(_d)],
            followup_image=[f"results/cohort/{_d}/images/{p}_fu.nii.gz" for p in demo_subjects(_d)],
            followup_label=[f"results/cohort/{_d}/labels/{p}_fu.nii.gz" for p in demo_subjects(_d)],
            truth=[f"results/cohort/{_d}/truth/{p}.json" for p in demo_subjects(_d)],
        log:
            f"logs/demo_patients/{_d}.log",
        benchmark:
            f"benchmarks/demo_patients/{_d}.tsv"
        conda:
            "../../envs/imaging.yaml"
        threads: 1
        resources:
            mem_mb=3000,
        params:
            demo=config["datasets"][_d]["demo"],
            patients=demo_subjects(_d),
        script:
            "../scripts/demo_patients.py"


# the TOF-like cohort, likewise (36 subjects: 40 job-seconds as 36 jobs, 12 s as one)
for _d in [d for d in PLAN.tof_datasets if d in OWN_TRAINING]:

    rule:
        name:
            f"demo_tof_subjects_{_d}"
        output:
            image=[f"results/cohort/{_d}/images/{s}.nii.gz" for s in demo_subjects(_d)],
            label=[f"results/cohort/{_d}/labels/{s}.nii.gz" for s in demo_subjects(_d)],
            truth=[f"results/cohort/{_d}/truth/{s}.json" for s in demo_subjects(_d)],
        log:
            f"logs/demo_tof_subjects/{_d}.log",
        benchmark:
            f"benchmarks/demo_tof_subjects/{_d}.tsv"
        conda:
            "../../envs/imaging.yaml"
        threads: 1
        resources:
            mem_mb=2000,
        params:
            demo=config["datasets"][_d]["demo"],
            subjects=demo_subjects(_d),
        script:
            "../scripts/demo_tof_subjects.py"


rule dataset_manifest:
    input:
        lambda wc: [raw_image_path(wc.dataset, s.id) for s in plan(wc).scans],
    output:
        "results/cohort/{dataset}/manifest.tsv",
    log:
        "logs/dataset_manifest/{dataset}.log",
    localrule: True
    conda:
        "../../envs/imaging.yaml"
    threads: 1
    resources:
        mem_mb=500,
    params:
        rows=manifest_rows,
    script:
        "../scripts/dataset_manifest.py"


rule cohort_all:
    input:
        [f"results/cohort/{d}/manifest.tsv" for d in OWN_TRAINING],
