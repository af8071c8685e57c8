"""Snakemake adapter: RELICT Table 2, the runtime of every measure, from the benchmark files.

Rule ``table_runtime``: one dataset (compare time + embedding or segmentation time).
Rule ``table_runtime_all``: every dataset side by side in minutes, as the paper's Table 2.
"""

from synthaudit.io import read_tsv, write_text, write_tsv
from synthaudit.logs import logged
from synthaudit import registry
from synthaudit.review import tables


def per_dataset(log):
    dataset, measures = snakemake.wildcards.dataset, snakemake.params.measures
    files, compare = list(snakemake.input.compare), {}
    for m, n in zip(measures, snakemake.params.jobs_per_measure):  # one benchmark per shard of a measure
        compare[m], files = tables.combine_benchmarks([tables.read_benchmark(p) for p in files[:n]]), files[n:]
    embed = tables.combine_benchmarks([tables.read_benchmark(p) for p in snakemake.input.embed])
    segment = tables.combine_benchmarks([tables.read_benchmark(p) for p in snakemake.input.segment])
    training = tables.combine_benchmarks([tables.read_benchmark(p) for p in snakemake.input.segment_training])
    source = snakemake.params.segmentation_source
    note = f"label maps were not computed in the workflow (segmentation source: {source}): segmentation time 0"
    if registry.by_level(measures, "segmentation") and segment is None:
        log.warning("%s: %s", dataset, note)
    rows = tables.runtime_table(measures, compare, embed, segment, training, note)
    write_tsv(snakemake.output.table, rows, tables.RUNTIME_COLUMNS)
    intro = ("<p>Runtime of each measure (RELICT Table 2): <b>compare_s</b> is the all-pairs comparison job "
             "(benchmarks/relict_measure), <b>extraction_s</b> what it needs first (embeddings for the feature "
             "level, label maps for the segmentation level), <b>total_min</b> their sum in minutes. CPU time "
             "and peak resident memory (MB) cover both jobs. <b>model_training_s</b>: training of the segmentation "
             "model (once per use case, not in the total).</p>")
    write_text(snakemake.output.html, tables.html_page(f"Runtime per measure: {dataset}",
                                                       [intro, tables.html_table(rows, tables.RUNTIME_COLUMNS)]))
    for r in rows:
        log.info("%s %s: %.1f s compare + %.1f s extraction = %.2f min", dataset, r["measure"], r["compare_s"],
                 r["extraction_s"], r["total_min"])


def overview(log):
    per = {d: read_tsv(p) for d, p in zip(snakemake.params.datasets, snakemake.input)}
    rows, columns = tables.runtime_overview(per)
    write_tsv(snakemake.output.table, rows, columns)
    intro = ("<p>Runtime in minutes per measure (rows) and dataset (columns), comparison plus feature "
             "extraction or segmentation, as in RELICT Table 2; a dash: the measure was not run on that "
             "dataset. Per-dataset details: results/tables/&lt;dataset&gt;/runtime.tsv.</p>")
    write_text(snakemake.output.html, tables.html_page("Runtime per measure (RELICT Table 2)",
                                                       [intro, tables.html_table(rows, columns)]))
    log.info("runtime overview: %d measures x %d datasets", len(rows), len(per))


with logged(snakemake.log[0]) as log:
    {"table_runtime": per_dataset, "table_runtime_all": overview}[snakemake.rule](log)
