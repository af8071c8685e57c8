"""Snakemake adapter: one dataset's evaluation: every measure's summary, and the joined score table."""

import json

from synthaudit.io import write_json, write_tsv
from synthaudit.logs import logged
from synthaudit.ratings import consensus, rating_rule, read_ratings, rerating_list
from synthaudit.relict.ranking import read_ranking

with logged(snakemake.log[0]) as log:
    measures = snakemake.params.measures
    rankings = {m: read_ranking(p) for m, p in zip(measures, snakemake.input.rankings)}
    ids = [r["synthetic_id"] for r in rankings[measures[0]]]
    min_score = snakemake.params.evaluation["replica_min_score"]
    cons = consensus(read_ratings(snakemake.input.ratings, ids), min_score)
    rule, rerate = rating_rule(min_score), rerating_list(cons)
    log.info("rating rule: %s", rule)
    if rerate:
        log.warning("%d volume(s) flagged for re-rating (raters disagree on the decision or by >= 2 points): %s",
                    len(rerate), ", ".join(rerate))
    joined = {i: {"synthetic_id": i, "rating": cons[i]["score"] if i in cons else None,
                  "replica": int(cons[i]["replica"]) if i in cons else None} for i in ids}
    for m, rows in rankings.items():
        for r in rows:
            joined[r["synthetic_id"]][f"{m}_score"] = r["score"]
            joined[r["synthetic_id"]][f"{m}_closest"] = r["closest_training_id"]
    cols = ["synthetic_id", "rating", "replica"] + [f"{m}_{k}" for m in measures for k in ("score", "closest")]
    write_tsv(snakemake.output.scores, list(joined.values()), cols)
    summary = {m: json.loads(open(p).read()) for m, p in zip(measures, snakemake.input.summaries)}
    write_json(snakemake.output.summary, {"ratings": snakemake.input.ratings, "rating_rule": rule,
                                          "rerate": rerate, "measures": summary})
    log.info("evaluated %d measures on %d rated volumes", len(measures), len(cons))
