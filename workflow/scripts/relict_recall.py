"""Snakemake adapter: generative-model recall and memorisation of one synthetic set
(Dombrowski et al. 4.3, Table 4) from RELICT's all-pairs distances.

Flag (memorised): a synthetic volume whose nearest training volume is closer than the
``flag_percentile``-th percentile of the held-out real volumes' nearest distances,
i.e. closer to the training set than (100 - p)% of real, unseen patients are; the
calibration of the re-identification filters (95th percentile of held-out scores,
Packhäuser et al., Dombrowski et al.) on a distance instead of a network score.
Recall is counted over the generator's own training volumes (all training volumes
unless the generator was trained on a subset).
"""

from synthaudit.io import write_json
from synthaudit.logs import logged
from synthaudit.relict import matrix, recall

with logged(snakemake.log[0]) as log:
    measure, p = snakemake.params.measure, float(snakemake.params.flag_percentile)
    syn = matrix.load(snakemake.input.synthetic)
    held = matrix.load(snakemake.input.heldout, training_ids=syn.training_ids, expected=snakemake.input.synthetic)
    result, subset, fields = recall.recall_against_heldout(syn, held, p, snakemake.params.generator_training_ids)
    recall.write_training_table(snakemake.output.table, result, subset)
    recall.recall_figure(snakemake.output.figure, result, measure,
                         title=f"Generative-model recall: {snakemake.wildcards.dataset}")
    write_json(snakemake.output.summary, {"dataset": snakemake.wildcards.dataset, "measure": measure, **fields})
    log.info("%s: learned %.1f%% of %d training volumes (held-out real %.1f%%), %d of %d synthetic volumes "
             "closer than the %g-th percentile of held-out nearest distances (%.4g)", measure,
             100 * result.learned_fraction, result.n_training, 100 * (result.reference_learned_fraction or 0),
             fields["n_flagged"], result.n_synthetic, p, fields["flag_threshold_distance"])
