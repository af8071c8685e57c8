"""Snakemake adapter: the rating sheet of the k most likely replicas (RELICT 2.2, automation step 5).

One PNG per rank in pages/, the synthetic volume and its closest training volume side
by side (axial, coronal, sagittal mid-slices; RELICT's raters compared such pairs in
ITK-SNAP, 2.5); index.html with every page, the Likert scale of RELICT Table 1, and an
empty rating table for the raters.
"""

import base64
import html
import json
from pathlib import Path

from synthaudit.relict.figures import pair_figure
from synthaudit.io import load_volume, write_text
from synthaudit.logs import Progress, logged
from synthaudit.ratings import write_rating_template
from synthaudit import registry
from synthaudit.review import tables
from synthaudit.relict.ranking import read_ranking


def main(log):
    dataset, measure, note = snakemake.wildcards.dataset, snakemake.params.measure, snakemake.params.note
    rows = read_ranking(snakemake.input.ranking)[: snakemake.params.top_k]
    synthetic_paths = tables.paths_by_id(snakemake.input.synthetic)
    training_paths = tables.paths_by_id(snakemake.input.training)
    vrange = json.loads(open(snakemake.input.grid).read()).get("intensity_range")
    label = registry.get(measure).label
    kind = tables.score_kind(measure)
    pages = Path(snakemake.output.pages)
    pages.mkdir(parents=True, exist_ok=True)
    items = []
    progress = Progress(log, f"{dataset} rating sheet", len(rows))
    for done, r in enumerate(rows, 1):
        sid, tid = r["synthetic_id"], r["closest_training_id"]
        png = pages / f"{r['rank']:02d}.png"
        pair_figure(png, load_volume(synthetic_paths[sid])[0], load_volume(training_paths[tid])[0], sid, tid,
                    subtitle=f"rank {r['rank']} by {label}, score {r['score']:.4g}",
                    vrange=None if vrange is None else tuple(vrange))
        data = base64.b64encode(png.read_bytes()).decode("ascii")
        items.append(
            f"<h3 id='rank{r['rank']}'>Rank {r['rank']}: synthetic {html.escape(sid)} vs training "
            f"{html.escape(tid)}</h3><p>{label} {kind}: {r['score']:.4g} "
            f"(file pages/{png.name})</p><img style='max-width:100%' alt='rank {r['rank']}' "
            f"src='data:image/png;base64,{data}'>")
        progress(done)
    write_rating_template(snakemake.output.template, [r["synthetic_id"] for r in rows], snakemake.params.raters)
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
    main(log)
