# Generative-model recall and memorisation (Dombrowski et al. 4.3, Table 4): which
# training volumes the synthetic set covers, against held-out real volumes as the
# reference. Reads the held-out real volumes' distances to the training set (relict_null.smk:
# computed once per training set with the same measure code as RELICT).


rule relict_recall:
    input:
        synthetic=lambda wc: f"results/relict/{wc.dataset}/measures/{RECALL_CFG['measure']}.npz",
        heldout=lambda wc: f"results/relict/{TRAINING_OF[wc.dataset]}/heldout/{RECALL_CFG['measure']}.npz",
    output:
        summary="results/relict/{dataset}/recall.json",
        table="results/relict/{dataset}/recall_training.tsv",
        figure=report(
            "results/relict/{dataset}/recall.png",
            caption="../report/recall.rst",
            category="Recall",
            subcategory="{dataset}",
        ),
    log:
        "logs/relict_recall/{dataset}.log",
    wildcard_constraints:
        dataset=_alternatives(PLAN.recall_datasets),
    conda:
        "../../envs/figures.yaml"
    threads: 1
    resources:
        mem_mb=1000,
    params:
        measure=RECALL_CFG["measure"],
        flag_percentile=RECALL_CFG["flag_percentile"],
        generator_training_ids=lambda wc: generator_training_ids(wc.dataset, subset_only=True),
    script:
        "../scripts/relict_recall.py"


rule recall_metrics:
    input:
        [f"results/relict/{d}/recall.json" for d in PLAN.recall_datasets],
    output:
        "results/metrics/recall.json",
    log:
        "logs/recall_metrics.log",
    localrule: True
    conda:
        "../../envs/figures.yaml"
    threads: 1
    resources:
        mem_mb=500,
    script:
        "../scripts/recall_metrics.py"


rule recall_all:
    input:
        "results/provenance.json",
        "results/metrics/recall.json",


# The memorisation sweep: the in-workflow generator trained on nested training sets of
# growing size (generator_sweep), each audited with RELICT and recall.
rule generator_sweep:
    input:
        recall=[f"results/relict/{d}/recall.json" for d in SWEEP_POINTS],
        filtered=[f"results/filter/{d}/summary.json" for d in SWEEP_POINTS if d in FILTER_DATASETS],
        diffusion=[f"benchmarks/ldm_train_diffusion/{d}.tsv" for d in SWEEP_POINTS],
        sampling=[f"benchmarks/ldm_sample/{d}.tsv" for d in SWEEP_POINTS],
        autoencoder=[f"benchmarks/ldm_train_autoencoder/{PLAN.sweep['dataset']}.tsv"] if SWEEP_POINTS else [],
    output:
        table="results/tables/generator_sweep.tsv",
        timing="results/tables/generator_sweep.timing.tsv",  # the times: apart, the table is the same bytes every run
        metrics="results/metrics/generator_sweep.json",
        figure=report(
            "results/figures/generator_sweep.png",
            caption="../report/generator_sweep.rst",
            category="Generator",
            subcategory="sweep",
        ),
    log:
        "logs/generator_sweep.log",
    conda:
        "../../envs/figures.yaml"
    threads: 1
    resources:
        mem_mb=1000,
    params:
        datasets=SWEEP_POINTS,
        n_training=[len(generator_training_ids(d)) for d in SWEEP_POINTS],
        base=PLAN.sweep.get("dataset"),
        filtered=[d in FILTER_DATASETS for d in SWEEP_POINTS],
    script:
        "../scripts/generator_sweep.py"


rule sweep_all:
    input:
        rules.generator_sweep.output,
