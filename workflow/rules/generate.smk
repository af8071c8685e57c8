# Generative sampling in the workflow (design card DAG: preprocessing -> generative
# sampling -> features -> RELICT): a 3D latent diffusion model (MONAI) trained on the
# generator's training volumes; the autoencoder, its latents and both checkpoints are
# outputs, so the feature level and privacy filters can reuse the latent space.


rule ldm_train_autoencoder:
    input:
        images=generator_training_images,
    output:
        model="results/generator/{dataset}/autoencoder.pt",
        history="results/generator/{dataset}/autoencoder_history.tsv",
    log:
        "logs/ldm_train_autoencoder/{dataset}.log",
    benchmark:
        "benchmarks/ldm_train_autoencoder/{dataset}.tsv"
    wildcard_constraints:
        dataset=_alternatives(AE_DATASETS),
    priority: LATER
    conda:
        "../../envs/relict.yaml"
    threads: 2
    resources:
        mem_mb=8000,
        gpu=1,
    params:
        ldm=lambda wc: ldm_settings(wc.dataset),
        # kept outside the outputs: Snakemake never deletes it, so a killed job resumes
        checkpoint=ldm_checkpoint("autoencoder"),
    script:
        "../scripts/ldm_train.py"


rule ldm_encode:
    input:
        model="results/generator/{dataset}/autoencoder.pt",
        images=generator_training_images,
    output:
        "results/generator/{dataset}/latents.npz",
    log:
        "logs/ldm_encode/{dataset}.log",
    wildcard_constraints:
        dataset=_alternatives(AE_DATASETS),
    conda:
        "../../envs/relict.yaml"
    threads: 2
    resources:
        mem_mb=4000,
    params:
        ids=lambda wc: generator_training_ids(wc.dataset),
    script:
        "../scripts/ldm_train.py"


rule ldm_train_diffusion:
    input:
        # the sweep's generators share the swept generator's autoencoder and latents
        latents=lambda wc: f"results/generator/{AE_OWNER[wc.dataset]}/latents.npz",
    output:
        model="results/generator/{dataset}/diffusion.pt",
        history="results/generator/{dataset}/diffusion_history.tsv",
    log:
        "logs/ldm_train_diffusion/{dataset}.log",
    benchmark:
        "benchmarks/ldm_train_diffusion/{dataset}.tsv"
    wildcard_constraints:
        dataset=_alternatives(LDM_DATASETS),
    priority: LATER
    conda:
        "../../envs/relict.yaml"
    threads: 2
    resources:
        mem_mb=8000,
        gpu=1,
    params:
        ldm=lambda wc: ldm_settings(wc.dataset),
        checkpoint=ldm_checkpoint("diffusion"),
        ids=lambda wc: generator_training_ids(wc.dataset),
    script:
        "../scripts/ldm_train.py"


# one sampling job per dataset writes every sample (the models load once); a rule per
# dataset because the sample files are known only per dataset
for _d in LDM_DATASETS:

    rule:
        name:
            f"ldm_sample_{_d}"
        input:
            autoencoder=f"results/generator/{AE_OWNER[_d]}/autoencoder.pt",
            diffusion=f"results/generator/{_d}/diffusion.pt",
            grid=f"results/preprocessed/{TRAINING_OF[_d]}/grid.json",
        output:
            synthetic_images(_d),
        log:
            f"logs/ldm_sample/{_d}.log",
        benchmark:
            f"benchmarks/ldm_sample/{_d}.tsv"
        conda:
            "../../envs/relict.yaml"
        threads: 2
        resources:
            mem_mb=8000,
            gpu=1,
        params:
            ldm=ldm_settings(_d),
            ids=[v.id for v in PLANS[_d].synthetic],
        script:
            "../scripts/ldm_sample.py"


rule ldm_losses:
    input:
        autoencoder="results/generator/{dataset}/autoencoder_history.tsv",
        diffusion="results/generator/{dataset}/diffusion_history.tsv",
    output:
        report(
            "results/figures/{dataset}/generator_losses.png",
            caption="../report/generator_losses.rst",
            category="Generator",
            subcategory="{dataset}",
        ),
    log:
        "logs/ldm_losses/{dataset}.log",
    wildcard_constraints:
        dataset=_alternatives(AE_DATASETS),
    conda:
        "../../envs/figures.yaml"
    threads: 1
    resources:
        mem_mb=1000,
    script:
        "../scripts/ldm_losses.py"


rule generator_index:
    input:
        [f"results/generator/{d}/diffusion.pt" for d in LDM_DATASETS],
    output:
        # always written (header only without generators), so DVC can track results/generator
        "results/generator/generators.tsv",
    log:
        "logs/generator_index.log",
    localrule: True
    conda:
        "../../envs/figures.yaml"
    threads: 1
    resources:
        mem_mb=500,
    params:
        rows=[
            {
                "dataset": d,
                "autoencoder_of": AE_OWNER[d],
                "n_training": len(generator_training_ids(d)),
                "n_samples": len(PLANS[d].synthetic),
            }
            for d in LDM_DATASETS
        ],
    script:
        "../scripts/generator_index.py"


rule generate_all:
    input:
        "results/generator/generators.tsv",
        [p for d in LDM_DATASETS for p in synthetic_images(d)],
