"""Snakemake adapter: the anonymisation table (paper Table 1 + D + audit) and figures."""

import json

import numpy as np

from synthaudit.anonymise.figures import auc_vs_distance, tsne_panels
from synthaudit.io import write_tsv
from synthaudit.logs import logged

with logged(snakemake.log[0]) as log:
    summary = json.loads(open(snakemake.input.summary).read())
    ds, methods = summary["dataset"], summary["methods"]
    write_tsv(snakemake.output.table, methods)
    title = (f"{ds}: {summary['n_training']} training, {summary['n_test']} test embeddings, "
             f"classes {summary['label_column']}; mean of {len(summary['seeds'])} seeds")
    auc_vs_distance(snakemake.output.scatter, methods, title)
    with np.load(snakemake.input.evaluation) as ev:
        names = [str(m) for m in ev["methods"]]
        shared = {m: (ev[f"shared_{k}"], ev[f"labels_{k}"]) for k, m in enumerate(names) if m != "original"}
        tsne_panels(snakemake.output.tsne, ev["training"], ev["training_labels"], shared, summary["classes"],
                    f"{ds}: real training features and each shared set (seed {summary['seeds'][0]})",
                    seed=snakemake.params.tsne["seed"], perplexity=snakemake.params.tsne["perplexity"])
    log.info("table and figures for %d methods", len(methods))
