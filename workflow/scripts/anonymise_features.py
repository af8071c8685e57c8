"""Snakemake adapter: CVAE anonymisation of one dataset's embeddings against k-Same.

Reads the feature level's training and held-out embeddings (refusing files from another
extractor than the configured one) and the class labels, runs every method for every
seed (``synthaudit.anonymise.evaluate.compare``) and writes: the per-run table, a
summary, the shareable decoder (first seed) and the evaluation arrays the figures need.
"""

import json

import numpy as np

from synthaudit.anonymise.cvae import save_decoder
from synthaudit.anonymise.data import LabelError, label_problems, read_labels, validation_mask
from synthaudit.anonymise.evaluate import Split, compare, summarise
from synthaudit.features.compare import load_embeddings
from synthaudit.io import atomic_path, write_json, write_tsv
from synthaudit.logs import logged

with logged(snakemake.log[0]) as log:
    cfg, spec, extractor = snakemake.params.cfg, snakemake.params.spec, snakemake.params.extractor
    patients = snakemake.params.patients

    def split(path, what):
        ids, x, meta = load_embeddings(path, expect_extractor=extractor)
        labels, splits = read_labels(snakemake.input.labels, spec["column"], ids, what)
        return Split(ids, x, labels, [patients[i] for i in ids], splits), meta

    train, meta = split(snakemake.input.train, "training")
    test, _ = split(snakemake.input.test, "held-out (test)")
    try:
        validation = validation_mask(train.labels, train.patients, train.splits, cfg["validation_fraction"],
                                     cfg["split_seed"])
    except LabelError:
        validation = None  # reported below with the other problems of these labels
    problems = label_problems(train.labels, test.labels, cfg["k_same"], validation)
    if problems:
        raise LabelError(f"anonymisation of {snakemake.wildcards.dataset} (labels {snakemake.input.labels}, column "
                         f"{spec['column']!r}):\n  - " + "\n  - ".join(problems))
    log.info("%d training and %d test embeddings of dimension %d (%s); classes by %r",
             len(train.ids), len(test.ids), train.features.shape[1], meta.get("label", extractor), spec["column"])
    rows, art = compare(train, test, cfg, log=log, threads=snakemake.threads)
    summary = summarise(rows, cfg["noise_sigmas"])

    write_tsv(snakemake.output.runs, rows)
    classes = art["classes"]
    write_json(snakemake.output.summary, {
        "dataset": snakemake.wildcards.dataset, "label_column": spec["column"], "classes": classes,
        "class_counts": np.bincount(art["train_labels"], minlength=len(classes)).tolist(),
        "n_training": len(train.ids), "n_test": len(test.ids), "validation_ids": art["validation_ids"],
        "extractor": meta, "projection": cfg["projection"], "seeds": cfg["seeds"], "methods": summary,
        "heldout_reference": art["heldout_reference"],
        "cvae_epochs": {str(s): len(h) for s, h in art["histories"].items()},
    })
    first = cfg["seeds"][0]
    save_decoder(snakemake.output.decoder, art["decoders"][first], {
        "classes": classes, "class_counts": np.bincount(art["train_labels"], minlength=len(classes)).tolist(),
        "scale": art["scale"].describe(), "extractor": json.dumps(meta, sort_keys=True), "seed": first,
        "usage": "z ~ N(0, variance I) of size latent, label index -> decoder -> features on the scale's z-scores",
    })
    arrays = {"training": art["train_scaled"], "training_labels": art["train_labels"],
              "methods": np.array(list(art["shared"]))}
    for k, (vectors, labels) in enumerate(art["shared"].values()):
        arrays[f"shared_{k}"], arrays[f"labels_{k}"] = vectors, labels
    with atomic_path(snakemake.output.evaluation, suffix=".npz") as tmp:
        np.savez(tmp, **arrays)
    log.info("wrote %d runs of %d methods", len(rows), len(summary))
