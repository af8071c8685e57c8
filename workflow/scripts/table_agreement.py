"""Snakemake adapter: agreement of the closest training volume between measures (RELICT 3.2)
and the combined ranking of the synthetic volumes across measures."""

import json

from synthaudit.io import write_json, write_text, write_tsv
from synthaudit.logs import logged
from synthaudit.review import tables

with logged(snakemake.log[0]) as log:
    dataset, measures = snakemake.wildcards.dataset, list(snakemake.params.measures)
    rankings, reference, note = tables.rankings_and_reference(measures, snakemake.input.rankings,
                                                              snakemake.params.reference_measure,
                                                              lambda why: log.warning("%s: %s", dataset, why))

    summary = tables.closest_agreement(rankings, reference)
    summary.update(dataset=dataset, note=note)
    agreement_rows = tables.closest_agreement_rows(summary)
    write_tsv(snakemake.output.agreement_table, agreement_rows, tables.CLOSEST_AGREEMENT_COLUMNS)
    write_json(snakemake.output.agreement_json, summary)
    log.info("%s: all %d measures pick the same closest training volume for %d of %d synthetic volumes "
             "(reference %s)", dataset, len(measures), summary["n_all_agree"], summary["n_synthetic"], reference)

    thresholds = None
    if snakemake.params.rated:
        evaluation = json.loads(open(snakemake.input.evaluation).read())
        thresholds = tables.thresholds_from_evaluation(evaluation, measures)
        for m, t in thresholds.items():
            if t is None:
                log.warning("%s: %s has no optimal threshold (rating with one class): no replica calls", dataset, m)
    rows = tables.combined_ranking(rankings, thresholds)
    columns = tables.combined_ranking_columns(measures)
    write_tsv(snakemake.output.ranking_table, rows, columns)

    calls = ("<b>n_replica_calls</b>: how many measures call the volume a replica at their optimal threshold "
             "(score &le; threshold, thresholds from evaluation.json)" if thresholds is not None else
             "no rating for this dataset, so no optimal thresholds and no replica calls")
    sections = [
        f"<h3>Closest training volume: agreement with {reference}</h3>"
        f"<p>For each measure, the number of synthetic volumes whose closest training volume is the same as "
        f"by {reference} (the rating preselection, RELICT 2.5); <b>all</b>: every measure agrees (RELICT 3.2: "
        f"47 of 50 NCCT volumes). {'' if note is None else 'Note: ' + note}</p>",
        tables.html_table(agreement_rows, tables.CLOSEST_AGREEMENT_COLUMNS),
        "<h3>Combined ranking</h3>"
        f"<p>Synthetic volumes sorted by their mean rank over {len(measures)} measures (rank 1 = most likely "
        f"replica); {calls}.</p>",
        tables.html_table(rows, columns),
    ]
    write_text(snakemake.output.ranking_html, tables.html_page(f"Measures compared: {dataset}", sections))
    log.info("%s: combined ranking of %d volumes; first %s (mean rank %.2f)", dataset, len(rows),
             rows[0]["synthetic_id"], rows[0]["mean_rank"])
