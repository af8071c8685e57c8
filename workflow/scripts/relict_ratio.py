"""Snakemake adapter: the ranking, calibrated calls and search report of one measure
(synthaudit.relict.ranking_job.rank_measure): reads the matrices, writes the three files."""

import json

from synthaudit.io import write_json, write_tsv
from synthaudit.logs import logged
from synthaudit.relict import calibration, matrix, ranking, search
from synthaudit.relict.ranking_job import rank_measure

with logged(snakemake.log[0]) as log:
    inp, p = snakemake.input, snakemake.params
    mat = matrix.load(inp.measure)
    held = matrix.load(inp.heldout, training_ids=mat.training_ids, expected=inp.measure) if inp.heldout else None
    shortlist = (search.aligned_to(search.Shortlist.load(inp.shortlist[0]), mat.synthetic_ids, mat.training_ids,
                                   inp.measure) if inp.shortlist else None)
    held_shortlist = (search.aligned_to(search.Shortlist.load(inp.heldout_shortlist[0]), held.synthetic_ids,
                                        mat.training_ids, inp.heldout)
                      if held is not None and inp.heldout_shortlist else None)

    def recall(files):
        return json.loads(open(files[0]).read()) if files else None

    out = rank_measure(mat, p.n_closest, held=held, rate=p.rate, training_patients=p.training_patients,
                       heldout_patients=p.heldout_patients, source_patients=p.source_patients, shortlist=shortlist,
                       held_shortlist=held_shortlist, alignment_recall=recall(inp.get("alignment_recall")),
                       heldout_alignment_recall=recall(inp.get("heldout_alignment_recall")),
                       min_recall=p.min_recall, log=log)
    write_json(snakemake.output.search, out.report)
    ranking.write_ranking(snakemake.output.ranking, out.rows, with_transform=out.aligned,
                          with_empty_pair=out.empty_pairs)
    write_tsv(snakemake.output.null, out.null_rows, calibration.NULL_COLUMNS)
