"""Snakemake adapter: results/metrics/relict.json and copies.json (synthaudit.relict.metrics):
reads the rankings, search reports, evaluations and summaries, writes the aggregates (for
`dvc metrics diff`). Two files so that every entry of relict.json is a measure."""

import json

from synthaudit.features.compare import load_embeddings
from synthaudit.io import write_metrics
from synthaudit.logs import logged
from synthaudit.relict import metrics as agg
from synthaudit.relict.ranking import read_ranking

with logged(snakemake.log[0]) as log:
    inp, p = snakemake.input, snakemake.params

    def read(paths, names):
        return {d: json.loads(open(f).read()) for d, f in zip(names, paths)}

    evaluations = read(inp.evaluations, p.rated)
    augmentation = read(inp.augmentation, p.augmented)
    copies = read(inp.copies, p.copies_datasets)
    local = read(inp.local, p.local_datasets)
    embedding_meta = {d: load_embeddings(f)[2] for d, f in zip(p.feature_datasets, inp.features)}
    rankings, searches = iter(inp.rankings), iter(inp.searches)
    metrics = {}
    for d in p.datasets:
        metrics[d] = {m: agg.measure_entry(m, read_ranking(next(rankings)), json.loads(open(next(searches)).read()),
                                           copies.get(d), embedding_meta.get(d), evaluations.get(d))
                      for m in p.measures[d]}
        if d in augmentation:
            agg.add_augmentation(metrics[d], augmentation[d])
    copy_counts = {d: agg.copies_entry(s) for d, s in copies.items()}
    for d, summary in local.items():
        copy_counts.setdefault(d, {}).update(agg.local_entry(summary))
    write_metrics(snakemake.output.relict, metrics)
    write_metrics(snakemake.output.copies, copy_counts)
    log.info("metrics for %d dataset(s): %s", len(metrics), snakemake.output.relict)
