# Re-identification privacy filters (Packhäuser et al.; Dombrowski et al.; Koeken et al.):
# per training set and input space (image, latent, pretrained), N siamese networks
# with different seeds and one retrieval network, trained on the training patients' scan
# pairs; calibrated on held-out scans; applied to every synthetic set audited against
# that training set; evaluated for verification, retrieval, sensitivity, specificity,
# consistency and recall.


rule privacy_inputs:
    input:
        real=lambda wc: preprocessed_images(wc.dataset),
        autoencoder=lambda wc: f"results/generator/{PRIVACY_AE}/autoencoder.pt" if wc.space == "latent" else [],
    output:
        real="results/privacy/{dataset}/{space}/real.npz",
    log:
        "logs/privacy_inputs/{dataset}/{space}.log",
    wildcard_constraints:
        dataset=_alternatives(PRIVACY_SETS),
        space="image|latent|pretrained",
    conda:
        "../../envs/privacy.yaml"
    threads: 2
    resources:
        mem_mb=4000,
    params:
        ids=lambda wc: [s.id for s in plan(wc).scans],
        patients=lambda wc: [s.patient_id for s in plan(wc).scans],
        roles=lambda wc: [s.role for s in plan(wc).scans],
        downsample=PRIVACY["image_downsample"],
        autoencoder=PRIVACY_AE,
        pretrained=PRIVACY.get("pretrained"),
    script:
        "../scripts/privacy_inputs.py"


# the synthetic sets on the real scans' scale: a separate job, so that adding a synthetic
# set to audit does not retrain the filters (they read real.npz only)
rule privacy_inputs_synthetic:
    input:
        reference="results/privacy/{dataset}/{space}/real.npz",
        synthetic=privacy_synthetic_images,
        autoencoder=lambda wc: f"results/generator/{PRIVACY_AE}/autoencoder.pt" if wc.space == "latent" else [],
    output:
        synthetic="results/privacy/{dataset}/{space}/synthetic.npz",
    log:
        "logs/privacy_inputs_synthetic/{dataset}/{space}.log",
    wildcard_constraints:
        dataset=_alternatives(PRIVACY_SETS),
        space="image|latent|pretrained",
    conda:
        "../../envs/privacy.yaml"
    threads: 2
    resources:
        mem_mb=4000,
    params:
        syn_ids=lambda wc: [v.id for d in PLAN.privacy_targets[wc.dataset] for v in PLANS[d].synthetic],
        syn_datasets=lambda wc: [d for d in PLAN.privacy_targets[wc.dataset] for v in PLANS[d].synthetic],
        downsample=PRIVACY["image_downsample"],
        autoencoder=PRIVACY_AE,
        pretrained=PRIVACY.get("pretrained"),
    script:
        "../scripts/privacy_inputs.py"


rule privacy_train:
    input:
        real="results/privacy/{dataset}/{space}/real.npz",
    output:
        model="results/privacy/{dataset}/{space}/models/{model}.pt",
        history="results/privacy/{dataset}/{space}/models/{model}_history.tsv",
    log:
        "logs/privacy_train/{dataset}/{space}/{model}.log",
    benchmark:
        "benchmarks/privacy_train/{dataset}/{space}/{model}.tsv"
    wildcard_constraints:
        dataset=_alternatives(PRIVACY_SETS),
        space="image|latent|pretrained",
        model=r"filter\d+|retrieval",
    priority: LATER
    conda:
        "../../envs/privacy.yaml"
    threads: 2
    resources:
        mem_mb=6000,
        gpu=1,
    params:
        privacy=PRIVACY,
    script:
        "../scripts/privacy_train.py"


rule privacy_evaluate:
    input:
        real="results/privacy/{dataset}/{space}/real.npz",
        synthetic="results/privacy/{dataset}/{space}/synthetic.npz",
        filters=expand("results/privacy/{{dataset}}/{{space}}/models/{model}.pt", model=PLAN.privacy_filters),
        retrieval="results/privacy/{dataset}/{space}/models/retrieval.pt",
        # the per-epoch times (not in the model files, which must be the same bytes on every run)
        histories=expand("results/privacy/{{dataset}}/{{space}}/models/{model}_history.tsv", model=PLAN.privacy_filters),
    output:
        summary="results/privacy/{dataset}/{space}/evaluation.json",
        timing="results/privacy/{dataset}/{space}/evaluation.timing.json",
        decisions="results/privacy/{dataset}/{space}/decisions.tsv",
        # filter 0's best score of every real scan against each synthetic set: the membership stage's attacker
        membership="results/privacy/{dataset}/{space}/membership.tsv",
        figures=report(
            directory("results/privacy/{dataset}/{space}/figures"),
            patterns=["{name}.png"],
            caption="../report/privacy_space.rst",
            category="Privacy filters",
            subcategory="{dataset} {space}",
        ),
    log:
        "logs/privacy_evaluate/{dataset}/{space}.log",
    wildcard_constraints:
        dataset=_alternatives(PRIVACY_SETS),
        space="image|latent|pretrained",
    conda:
        "../../envs/privacy.yaml"
    threads: 2
    resources:
        mem_mb=4000,
    params:
        privacy=PRIVACY,
        truth=lambda wc: privacy_truth(wc.dataset),
    script:
        "../scripts/privacy_evaluate.py"


rule privacy_metrics:
    input:
        evaluations=[f"results/privacy/{o}/{s}/evaluation.json" for o, s in PLAN.privacy_runs],
        timings=[f"results/privacy/{o}/{s}/evaluation.timing.json" for o, s in PLAN.privacy_runs],
    output:
        metrics="results/metrics/privacy.json",
        runtime="results/privacy/runtime.json",
        table="results/privacy/summary.tsv",
        roc=[
            report(
                f"results/privacy/{o}/roc.png",
                caption="../report/privacy_roc.rst",
                category="Privacy filters",
                subcategory=o,
            )
            for o in PRIVACY_SETS
        ],
        consistency=[
            report(
                f"results/privacy/{o}/consistency.png",
                caption="../report/privacy_consistency.rst",
                category="Privacy filters",
                subcategory=o,
            )
            for o in PRIVACY_SETS
        ],
    log:
        "logs/privacy_metrics.log",
    localrule: True
    conda:
        "../../envs/privacy.yaml"
    threads: 1
    resources:
        mem_mb=1000,
    params:
        owners=PRIVACY_SETS,
    script:
        "../scripts/privacy_metrics.py"


rule privacy_all:
    input:
        "results/provenance.json",
        "results/metrics/privacy.json",
