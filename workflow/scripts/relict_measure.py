"""Snakemake adapter: one image-level measure between every synthetic and training volume."""

import json
import time

import numpy as np

from synthaudit.io import check_on_grid, load_volume
from synthaudit.logs import Progress, logged
from synthaudit.relict.image_measures import all_pairs_image_measures
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


with logged(snakemake.log[0]) as log:
    measure = snakemake.wildcards.measure
    grid = json.loads(open(snakemake.input.grid).read())

    def loaded(path):
        data, affine = load_volume(path)
        check_on_grid(path, data, affine, grid)
        return data

    synthetic = np.stack([loaded(p) for p in snakemake.input.synthetic])
    n_train = len(snakemake.input.training)
    rng, rng_from = data_range(snakemake.params.ssim, grid, snakemake.input.training_qc)
    log.info("%s: %d synthetic x %d training volumes of %s (SSIM data range %.4g from %s)", measure,
             len(synthetic), n_train, list(synthetic.shape[1:]), rng, rng_from)
    start = time.perf_counter()
    values = all_pairs_image_measures(
        synthetic, (loaded(p) for p in snakemake.input.training), [measure], data_range=rng,
        ssim_sigma=snakemake.params.ssim["sigma"], ssim_truncate=snakemake.params.ssim["truncate"],
        use_sample_covariance=snakemake.params.ssim["use_sample_covariance"],
        progress=Progress(log, f"{measure}: training volumes compared", n_train), n_training=n_train,
        threads=snakemake.threads, device=snakemake.config.get("compute", {}).get("device", "auto"),
    )[measure]
    seconds = time.perf_counter() - start
    MeasureMatrix(values, measure, snakemake.params.synthetic_ids, snakemake.params.training_ids, seconds,
                  extras={"data_range": rng}).save(snakemake.output[0])
    log.info("%s: %d pairs in %.1f s", measure, values.size, seconds)
