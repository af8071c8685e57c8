"""Snakemake adapter: the shortlist of one dataset's synthetic volumes or held-out scans (relict.search).

Every training volume and every query is read once and reduced to block means of about
``relict.search.shortlist.block_mm``; each query keeps its K nearest training volumes per
cheap stage (raw means; standardised means for NCC), and a seeded sample of queries is
marked for exhaustive comparison, which measures the shortlist's recall in every run.
"""

import json

from synthaudit.io import check_on_grid, load_volume
from synthaudit.logs import Progress, logged
from synthaudit.relict import search

with logged(snakemake.log[0]) as log:
    cfg = snakemake.params.search
    grid = json.loads(open(snakemake.input.grid).read())
    factors = search.block_factors(float(cfg["shortlist"]["block_mm"]), grid["spacing_mm"], grid["shape"])
    query_ids, training_ids = list(snakemake.params.query_ids), list(snakemake.params.training_ids)
    k = int(snakemake.params.k)

    def vectors(paths):
        def read():
            for path in paths:
                data, affine = load_volume(path)
                check_on_grid(path, data, affine, grid)
                yield search.cheap_vectors(data, factors)
        return read

    log.info("%s: %d volumes x %d training volumes; block means of %s voxels (%s mm; block_mm %s); K = %d "
             "candidates per volume; %d sampled for the exhaustive check", snakemake.wildcards.role, len(query_ids),
             len(training_ids), "x".join(map(str, factors)),
             " x ".join(f"{f * s:.3g}" for f, s in zip(factors, grid["spacing_mm"])), cfg["shortlist"]["block_mm"], k,
             min(int(cfg["recall"]["sample"]), len(query_ids)))
    shortlist = search.build_shortlist(
        query_ids, training_ids, vectors(snakemake.input.queries), vectors(snakemake.input.training), k=k,
        n_sample=int(cfg["recall"]["sample"]), seed=int(cfg["recall"]["seed"]), factors=factors,
        block_mm=float(cfg["shortlist"]["block_mm"]),
        progress=Progress(log, "block means: volumes read", len(query_ids) + len(training_ids)))
    shortlist.save(snakemake.output[0])
    log.info("shortlist: %d x %d candidates per stage (%s) in %.1f s", len(query_ids), shortlist.k,
             ", ".join(sorted(shortlist.candidates)), shortlist.seconds)
