"""Snakemake adapter: alignment-aware image measures of one dataset
(synthaudit.relict.alignment_job.align_dataset): reads the plain matrices and the shortlist,
writes the aligned matrices, alignment.tsv and alignment_recall.json."""

import json

import numpy as np

from synthaudit.io import check_on_grid, load_volume, write_json, write_tsv
from synthaudit.logs import logged
from synthaudit.relict import alignment as al
from synthaudit.relict import matrix
from synthaudit.relict import search as relict_search
from synthaudit.relict.alignment_job import align_dataset

with logged(snakemake.log[0]) as log:
    cfg, p = snakemake.params.alignment, snakemake.params
    grid = json.loads(open(snakemake.input.grid).read())
    measures = list(p.measures)
    syn_ids, train_ids = list(p.synthetic_ids), list(p.training_ids)
    # a pair the shortlist search (relict.search) did not compute is +inf: never among the n closest
    # unless its alignment is computed here
    plain = {m: np.asarray(matrix.load(path, syn_ids, train_ids, expected="the dataset's plan").distances, np.float64)
             for m, path in zip(measures, snakemake.input.plain)}

    def loaded(path):
        data, affine = load_volume(path)
        check_on_grid(path, data, affine, grid)
        return data, affine

    mask = None
    if snakemake.input.get("shortlist"):
        mask = relict_search.aligned_to(relict_search.Shortlist.load(snakemake.input.shortlist[0]), syn_ids, train_ids,
                                        "the dataset's plan").pairs("raw")
    out = align_dataset(snakemake.input.synthetic, snakemake.input.training, loaded, plain, cfg, grid, syn_ids,
                        train_ids, p.n_closest, float(snakemake.resources.mem_mb), threads=snakemake.threads,
                        shortlist_mask=mask, log=log)
    for m, path in zip(measures, snakemake.output.measures):
        matrix.MeasureMatrix(out.matrices[m], f"{m}_aligned", syn_ids, train_ids, out.seconds,
                             distances=out.matrices[m],
                             extras={"transform": out.matrices[f"{m}_transform"], "plain": plain[m]}).save(path)
    write_tsv(snakemake.output.table, out.table, al.alignment_columns(measures))
    write_json(snakemake.output.recall, out.recall)  # no time in it: the same bytes on every run (dvc status)
