# Local replicas (relict.local; synthaudit.relict.local): block-wise ratios of every synthetic
# volume, and of the held-out scans (the null), against the training set; each volume's lowest
# block relative to the held-out median there, calibrated as a max statistic over the blocks.
rule relict_local:
    input:
        synthetic=lambda wc: synthetic_images(wc.dataset),
        training=lambda wc: preprocessed_images(wc.dataset, role="train"),
        heldout=lambda wc: preprocessed_images(TRAINING_OF[wc.dataset], role="heldout"),
        grid=grid_json,
        # the positive controls centre a donor's region on its label foreground where every scan has one
        labels=lambda wc: training_labels(wc) if TRAINING_OF[wc.dataset] in LABELLED_DATASETS else [],
    output:
        calls="results/relict/{dataset}/local/local_calls.tsv",
        controls="results/relict/{dataset}/local/local_controls.tsv",
        summary="results/relict/{dataset}/local/local.json",
        figure=report_figure("results/figures/{dataset}/local_copies.png", "local_copies.rst", "Local copies"),
        control_figure=report_figure(
            "results/figures/{dataset}/local_controls.png", "local_controls.rst", "Local copies"
        ),
    log:
        "logs/relict_local/{dataset}.log",
    benchmark:
        "benchmarks/relict_local/{dataset}.tsv"
    wildcard_constraints:
        dataset=_alternatives(LOCAL_DATASETS),
    conda:
        "../../envs/relict.yaml"
    threads: 2
    resources:
        mem_mb=8000,
    params:
        local=PLAN.local,
        n_closest=config["relict"]["n_closest"],
        rate=CALIBRATION["rate"],
        synthetic_ids=lambda wc: [v.id for v in plan(wc).synthetic],
        training_ids=lambda wc: [s.id for s in plan(wc).train],
        training_patients=lambda wc: [s.patient_id for s in plan(wc).train],
        heldout_ids=lambda wc: [s.id for s in PLANS[TRAINING_OF[wc.dataset]].heldout],
        heldout_patients=lambda wc: [s.patient_id for s in PLANS[TRAINING_OF[wc.dataset]].heldout],
        source_patients=heldout_source_patients,
    script:
        "../scripts/relict_local.py"
