"""Snakemake adapter: RELICT Figure 6, one synthetic volume and its closest training volume by each measure."""

import json

from synthaudit.relict.figures import closest_by_measure_figure
from synthaudit.io import load_volume, write_json
from synthaudit.logs import logged
from synthaudit.review import tables

with logged(snakemake.log[0]) as log:
    dataset, measures = snakemake.wildcards.dataset, list(snakemake.params.measures)
    rankings, reference, note = tables.rankings_and_reference(measures, snakemake.input.rankings,
                                                              snakemake.params.reference_measure,
                                                              lambda why: log.warning("%s: %s", dataset, why))
    synthetic_paths = tables.paths_by_id(snakemake.input.synthetic)
    training_paths = tables.paths_by_id(snakemake.input.training)

    chosen = tables.figure6_choice(snakemake.params.synthetic, dataset)
    if chosen is None:
        chosen = rankings[reference][0]["synthetic_id"]
        log.info("%s: Figure 6 shows %s, ranked first by %s", dataset, chosen, reference)
    elif chosen not in synthetic_paths:
        raise tables.ReviewError(f"dataset {dataset}: relict.review.figure6_synthetic {chosen!r} is not a "
                                 f"synthetic volume of this dataset (e.g. {sorted(synthetic_paths)[:5]})")

    grid = json.loads(open(snakemake.input.grid).read())
    synthetic, _ = load_volume(synthetic_paths[chosen])
    closest, loaded = {}, {}
    for m in measures:
        tid = next(r["closest_training_id"] for r in rankings[m] if r["synthetic_id"] == chosen)
        if tid not in loaded:
            loaded[tid] = load_volume(training_paths[tid])[0]
        closest[m] = (tid, loaded[tid])
    vrange = grid.get("intensity_range")
    if vrange is None:
        vols = [synthetic, *loaded.values()]
        vrange = (float(min(v.min() for v in vols)), float(max(v.max() for v in vols)))
    closest_by_measure_figure(snakemake.output.figure, synthetic, closest, chosen, vrange=tuple(vrange))
    write_json(snakemake.output.choice, {"dataset": dataset, "synthetic_id": chosen, "reference": reference,
                                         "note": note, "closest": {m: t for m, (t, _) in closest.items()},
                                         "n_distinct_closest": len(loaded)})
    log.info("%s: %s has %d distinct closest training volume(s) over %d measures: %s", dataset, chosen,
             len(loaded), len(measures), {m: t for m, (t, _) in closest.items()})
