"""Snakemake adapter: calibrate the filters of one input space, filter every synthetic
set, and run the verification, retrieval, tripartite and recall evaluation."""

from pathlib import Path

import numpy as np
import torch

from synthaudit.plotting import loss_figure
from synthaudit.io import atomic_directory, read_tsv, write_json, write_tsv
from synthaudit.logs import logged
from synthaudit.privacy import figures
from synthaudit.privacy.evaluate import evaluate_space
from synthaudit.privacy.model import load_network

with logged(snakemake.log[0]) as log:
    torch.set_num_threads(snakemake.threads)
    cfg = snakemake.params.privacy
    space_name, owner = snakemake.wildcards.space, snakemake.wildcards.dataset
    real, syn = dict(np.load(snakemake.input.real)), dict(np.load(snakemake.input.synthetic))
    space = {"space": str(real["space"]), "key": str(real["key"])}
    filters, histories = [], {}
    role = dict(zip((str(i) for i in real["ids"]), (str(r) for r in real["roles"])))
    for path in snakemake.input.filters:
        model, meta = load_network(path, space)
        foreign = sorted(i for i in meta["train_ids"] + meta["val_ids"] if role.get(i) != "train")
        if foreign:
            raise ValueError(f"{path} was trained on scans that are not training scans of {owner} now "
                             f"(manifest changed?): {foreign[:5]}; delete the filter to retrain it")
        filters.append(model)
        histories[Path(path).stem] = meta["history"]
    retrieval, _ = load_network(snakemake.input.retrieval, space)
    log.info("%s space: %d filters, %d real scans, %d synthetic volumes", space_name, len(filters),
             len(real["ids"]), len(syn["ids"]))
    result = evaluate_space(real, syn, filters, retrieval, cfg, truth=snakemake.params.truth)
    summary = result["summary"]
    summary.update({"training_set": owner, "space": space_name, "key": space["key"],
                    "input_shape": list(real["x"].shape[1:]),
                    "epochs": {name: len(h) for name, h in histories.items()},
                    "roc": result["roc"]})
    write_json(snakemake.output.summary, summary)
    # times apart: evaluation.json is the same bytes on every run (dvc status), this file is not
    write_json(snakemake.output.timing, {"seconds_per_epoch": {
        Path(p).name.removesuffix("_history.tsv"): float(np.mean([float(r["seconds"]) for r in read_tsv(p)]))
        for p in snakemake.input.histories}})
    write_tsv(snakemake.output.decisions, result["decisions"])
    write_tsv(snakemake.output.membership, result["membership"], ["dataset", "id", "best_score"])

    out = Path(snakemake.output.figures)
    with atomic_directory(out) as tmp:
        loss_figure(tmp / "training_loss.png", histories, f"{owner}: re-identification networks, {space_name} space")
        groups = {"held-out real": result["scores"]["heldout"], **result["scores"]["synthetic"]}
        figures.flag_score_figure(tmp / "best_scores.png", groups, summary["tau"],
                                  f"{owner}, {space_name} space: best score against the training set",
                                  f"best {summary['head']} score")
        feats = result["features"]
        for name, learned in result["learned"].items():
            rows = np.array([d == name for d in feats["synthetic_datasets"]])
            figures.tsne_figure(tmp / f"tsne_{name}.png", feats["training"], feats["synthetic"][rows], learned,
                                f"synthetic set {name} and the {owner} training scans\n({space_name}-space filter features)",
                                seed=cfg["tsne"]["seed"], perplexity=cfg["tsne"]["perplexity"])
    ver = summary["verification"] or {}
    log.info("verification AUC %s, tau %.4g, specificity %s; flagged: %s", ver.get("auc"), summary["tau"],
             summary["specificity"]["specificity"],
             {n: f"{e['n_flagged']}/{e['n']}" for n, e in summary["synthetic"].items()})
