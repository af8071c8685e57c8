"""Snakemake adapter: the rating sheet of the k most likely replicas (RELICT 2.2, automation step 5).

Rule ``rating_sheet_page``: one PNG per rank, the synthetic volume and its closest
training volume side by side (axial, coronal, sagittal mid-slices; RELICT's raters
compared such pairs in ITK-SNAP, 2.5). Rule ``rating_sheet``: index.html with every
page, the Likert scale of RELICT Table 1, and an empty rating table for the raters.
"""

import base64
import html
import json

from synthaudit.figures import pair_figure
from synthaudit.io import load_volume, write_text
from synthaudit.logs import logged
from synthaudit.ratings import write_rating_template
from synthaudit.relict import levels, tables


def page(log):
    dataset, rank, measure = snakemake.wildcards.dataset, int(snakemake.wildcards.rank), snakemake.params.measure
    rows = tables.read_ranking(snakemake.input.ranking)
    row = next((r for r in rows if r["rank"] == rank), None)
    if row is None:
        raise tables.ReviewError(f"dataset {dataset}: the {measure} ranking has no rank {rank} "
                                 f"({len(rows)} synthetic volumes)")
    sid, tid = row["synthetic_id"], row["closest_training_id"]
    synthetic, _ = load_volume(tables.paths_by_id(snakemake.input.synthetic)[sid])
    training, _ = load_volume(tables.paths_by_id(snakemake.input.training)[tid])
    vrange = json.loads(open(snakemake.input.grid).read()).get("intensity_range")
    pair_figure(snakemake.output.png, synthetic, training, sid, tid,
                subtitle=f"rank {rank} by {levels.get(measure).label}, score {row['score']:.4g}",
                vrange=None if vrange is None else tuple(vrange))
    log.info("%s rank %d: %s vs %s (score %.4g)", dataset, rank, sid, tid, row["score"])


def index(log):
    dataset, measure, note = snakemake.wildcards.dataset, snakemake.params.measure, snakemake.params.note
    rows = tables.read_ranking(snakemake.input.ranking)[: len(snakemake.input.pages)]
    write_rating_template(snakemake.output.template, [r["synthetic_id"] for r in rows], snakemake.params.raters)
    label = levels.get(measure).label
    kind = tables.score_kind(measure)
    items = []
    for r, png in zip(rows, snakemake.input.pages):
        data = base64.b64encode(open(png, "rb").read()).decode("ascii")
        items.append(
            f"<h3 id='rank{r['rank']}'>Rank {r['rank']}: synthetic {html.escape(r['synthetic_id'])} vs training "
            f"{html.escape(r['closest_training_id'])}</h3><p>{label} {kind}: {r['score']:.4g} "
            f"(file {html.escape(png.split('/')[-1])})</p><img style='max-width:100%' alt='rank {r['rank']}' "
            f"src='data:image/png;base64,{data}'>")
    listing = tables.html_table(
        [{"rank": r["rank"], "synthetic_id": r["synthetic_id"], "closest_training_id": r["closest_training_id"],
          "score": r["score"]} for r in rows], ["rank", "synthetic_id", "closest_training_id", "score"])
    raters = ", ".join(html.escape(x) for x in snakemake.params.raters)
    sections = [
        f"<p>The {len(rows)} synthetic volumes most likely to be replicas by {label} ({kind}, rank 1 = most "
        f"likely), each beside its closest training volume (RELICT 2.2, step 5). "
        f"{'' if note is None else 'Note: ' + html.escape(note)}</p>",
        "<h3>How to rate (RELICT 2.5 and Table 1)</h3>"
        f"<p>Each rater ({raters}) scores every pair independently on the scale below, ideally opening the "
        "two volumes side by side in a viewer (e.g. ITK-SNAP) rather than only these mid-slices. A score of 3 "
        "or 4 calls the synthetic volume a replica. Fill the <code>score</code> column of "
        "<code>ratings_template.tsv</code> (next to this page), set <code>datasets."
        f"{html.escape(dataset)}.ratings</code> in params.yaml to the filled file and run the workflow again: "
        "it reports the agreement of the raters (results/ratings/), the volumes on which their decisions "
        "differ (to be re-rated, as in the paper), and tunes each measure's threshold on the rating "
        f"(results/tables/{html.escape(dataset)}/thresholds.json).</p>",
        tables.likert_html(),
        "<h3>Pairs</h3>", listing, *items,
    ]
    write_text(snakemake.output.html, tables.html_page(f"Rating sheet: {dataset}", sections))
    log.info("%s: rating sheet of %d pairs ranked by %s; template for raters %s", dataset, len(rows), measure,
             list(snakemake.params.raters))


with logged(snakemake.log[0]) as log:
    {"rating_sheet_page": page, "rating_sheet": index}[snakemake.rule](log)
