"""Snakemake adapter: one image-level measure between every synthetic and training volume."""

import json
import time

import numpy as np

from synthaudit.io import check_on_grid, load_volume
from synthaudit.logs import Progress, logged
from synthaudit import registry
from synthaudit.relict import search
from synthaudit.relict.image_measures import shortlisted_image_measures
from synthaudit.relict.matrix import MeasureMatrix


def data_range(ssim_cfg, grid, qc_files):
    """SSIM's data range: params, else the preprocessed intensity range, else the training min..max."""
    if ssim_cfg["data_range"] is not None:
        return float(ssim_cfg["data_range"]), "params"
    if grid["intensity_range"] is not None:
        lo, hi = grid["intensity_range"]
        return float(hi - lo), "preprocessing window"
    qcs = [json.loads(open(p).read()) for p in qc_files]
    return float(max(q["max"] for q in qcs) - min(q["min"] for q in qcs)), "training min..max"


def shortlist_pairs(path, synthetic_ids, training_ids, measure):
    """This shard's mask of pairs to compute: the shortlist's candidates and its sampled rows' every pair."""
    shortlist = search.Shortlist.load(path)
    rows = {v: i for i, v in enumerate(shortlist.query_ids)}
    cols = {v: i for i, v in enumerate(shortlist.training_ids)}
    missing = [v for v in synthetic_ids if v not in rows] + [v for v in training_ids if v not in cols]
    if missing:
        raise ValueError(f"{path}: {missing[0]!r} is not in the shortlist; it is stale: rerun relict_shortlist")
    mask = shortlist.pairs(search.stage_of(measure))
    return mask[np.ix_([rows[v] for v in synthetic_ids], [cols[v] for v in training_ids])]


with logged(snakemake.log[0]) as log:
    measure = snakemake.wildcards.measure
    grid = json.loads(open(snakemake.input.grid).read())
    syn_ids, train_ids = list(snakemake.params.synthetic_ids), list(snakemake.params.training_ids)

    def loaded(path):
        data, affine = load_volume(path)
        check_on_grid(path, data, affine, grid)
        return data

    synthetic = np.stack([loaded(p) for p in snakemake.input.synthetic])
    n_train = len(snakemake.input.training)
    pairs = None
    if snakemake.input.get("shortlist"):
        pairs = shortlist_pairs(snakemake.input.shortlist[0], syn_ids, train_ids, measure)
        log.info("%s: shortlist search (relict.search): %d of %d pairs (%.1f %%), %d of %d training volumes read",
                 measure, int(pairs.sum()), pairs.size, 100.0 * pairs.sum() / max(pairs.size, 1),
                 int(pairs.any(axis=0).sum()), n_train)
    rng, rng_from = data_range(snakemake.params.ssim, grid, snakemake.input.training_qc)
    log.info("%s: %d synthetic x %d training volumes of %s (SSIM data range %.4g from %s)", measure,
             len(synthetic), n_train, list(synthetic.shape[1:]), rng, rng_from)
    start = time.perf_counter()
    # training volumes no pair needs are never read (the shortlist search)
    values = shortlisted_image_measures(
        synthetic, lambda c: loaded(snakemake.input.training[c]), n_train, [measure], pairs, data_range=rng,
        ssim_sigma=snakemake.params.ssim["sigma"], ssim_truncate=snakemake.params.ssim["truncate"],
        use_sample_covariance=snakemake.params.ssim["use_sample_covariance"],
        progress=Progress(log, f"{measure}: training volumes compared", None),
        threads=snakemake.threads, device=snakemake.config["compute"]["device"],
    )[measure]
    seconds = time.perf_counter() - start
    distances = registry.to_distance(measure, values)
    if pairs is not None:
        distances[~pairs] = np.inf  # not computed: never among the n closest (relict.ratio)
    MeasureMatrix(values, measure, syn_ids, train_ids, seconds, extras={"data_range": rng},
                  distances=distances).save(snakemake.output[0])
    computed = values.size if pairs is None else int(pairs.sum())
    log.info("%s: %d pairs in %.1f s", measure, computed, seconds)
