"""Snakemake adapter: import a dataset's filled rating table; agreement of the raters and the
volumes to re-rate (RELICT 2.5: two raters, re-rating where their replica decisions differ)."""

from synthaudit.io import write_json, write_text, write_tsv
from synthaudit.logs import logged
from synthaudit.ratings import read_ratings_by_rater
from synthaudit.review import tables

with logged(snakemake.log[0]) as log:
    dataset = snakemake.wildcards.dataset
    by_rater = read_ratings_by_rater(snakemake.input.ratings, snakemake.params.synthetic_ids)
    summary, rows = tables.rating_agreement(by_rater, snakemake.params.replica_min_score)
    summary = {"dataset": dataset, "ratings": snakemake.input.ratings, **summary}
    write_json(snakemake.output.summary, summary)
    write_tsv(snakemake.output.disagreements, rows, tables.DISAGREEMENT_COLUMNS)
    per_rater = [{"rater": r, **v} for r, v in summary["per_rater"].items()]
    headline = [{k: summary[k] for k in ("n", "percent_agreement", "kappa_decision", "kappa_likert",
                                         "n_disagreements")}]
    sections = [
        f"<p>Rating table {summary['ratings']}; a volume is a replica for a rater when the score is at least "
        f"{summary['replica_min_score']} (RELICT 2.5). Agreement compares {' and '.join(summary['compared']) or '-'}"
        f" on the volumes both rated: percent agreement and Cohen's kappa of the replica decision, and kappa of "
        f"the Likert scores (RELICT 3.1 reports 92% and 82% agreement).</p>",
        tables.html_table(headline, list(headline[0])),
        "<h3>Raters</h3>", tables.html_table(per_rater, ["rater", "n_rated", "n_replicas", "median_score"]),
        "<h3>Volumes to re-rate (decisions differ)</h3>",
        tables.html_table(rows, tables.DISAGREEMENT_COLUMNS) if rows else "<p>none</p>",
    ]
    if summary["note"]:
        sections.insert(0, f"<p><b>Note:</b> {summary['note']}</p>")
    write_text(snakemake.output.html, tables.html_page(f"Rater agreement: {dataset}", sections))
    if summary["note"]:
        log.info("%s: %s", dataset, summary["note"])
    if summary["percent_agreement"] is not None:
        log.info("%s: raters %s agree on %.1f%% of %d volumes (kappa %.3f); %d to re-rate", dataset,
                 summary["compared"], summary["percent_agreement"], summary["n"],
                 float("nan") if summary["kappa_decision"] is None else summary["kappa_decision"], len(rows))
