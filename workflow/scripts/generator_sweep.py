"""Snakemake adapter: the memorisation sweep's table, metrics and figure (synthaudit.relict.sweep)."""

from synthaudit.io import TIMING_KEYS, without_timings, write_metrics, write_tsv
from synthaudit.logs import logged
from synthaudit.relict.sweep import COLUMNS, seconds, sweep_figure, sweep_metrics, sweep_rows

with logged(snakemake.log[0]) as log:
    i, p = snakemake.input, snakemake.params
    rows = sweep_rows(p.datasets, p.n_training, p.filtered, i.recall, iter(i.filtered), i.diffusion, i.sampling)
    write_tsv(snakemake.output.table, without_timings(rows), [c for c in COLUMNS if c not in TIMING_KEYS])
    write_tsv(snakemake.output.timing, rows, COLUMNS)
    t_ae = seconds(i.autoencoder[0]) if i.autoencoder else 0.0
    write_metrics(snakemake.output.metrics, sweep_metrics(rows, p.base, t_ae))  # timings: the table and benchmarks/
    sweep_figure(snakemake.output.figure, rows, p.base)
    for r in rows:
        log.info("n=%d: %s", r["n_training"], {k: r[k] for k in COLUMNS[2:]})
    if not rows:
        log.info("no generator sweep configured")
