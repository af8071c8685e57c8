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

import numpy as np

from synthaudit.io import write_json
from synthaudit.logs import logged
from synthaudit.relict import recall

with logged(snakemake.log[0]) as log:
    measure, p = snakemake.params.measure, float(snakemake.params.flag_percentile)
    syn, held = np.load(snakemake.input.synthetic), np.load(snakemake.input.heldout)
    train_ids = [str(x) for x in syn["training_ids"]]
    if [str(x) for x in held["training_ids"]] != train_ids:
        raise ValueError(f"{snakemake.input.heldout} and {snakemake.input.synthetic} list different training volumes")
    d_syn, d_held = syn["distances"].astype(np.float64), held["distances"].astype(np.float64)
    threshold = float(np.percentile(d_held.min(axis=1), p))
    flagged = d_syn.min(axis=1) < threshold
    subset = snakemake.params.generator_training_ids or train_ids
    missing = sorted(set(subset) - set(train_ids))
    if missing:
        raise ValueError(f"generator training volumes {missing[:5]} are not in {snakemake.input.synthetic}")
    cols = [train_ids.index(t) for t in subset]
    result = recall.generative_recall(d_syn[:, cols], flagged, d_held[:, cols])
    recall.write_training_table(snakemake.output.table, result, subset)
    recall.recall_figure(snakemake.output.figure, result, measure,
                         title=f"Generative-model recall: {snakemake.wildcards.dataset}")
    summary = {"dataset": snakemake.wildcards.dataset, "measure": measure, "flag_percentile": p,
               "flag_threshold_distance": threshold, "n_flagged": int(flagged.sum()),
               "flagged_ids": [str(i) for i, f in zip(syn["synthetic_ids"], flagged) if f],
               "generator_training_subset": bool(snakemake.params.generator_training_ids),
               **result.summary()}
    write_json(snakemake.output.summary, summary)
    log.info("%s: learned %.1f%% of %d training volumes (held-out real %.1f%%), %d of %d synthetic volumes "
             "closer than the %g-th percentile of held-out nearest distances (%.4g)", measure,
             100 * result.learned_fraction, result.n_training, 100 * (result.reference_learned_fraction or 0),
             flagged.sum(), len(flagged), p, threshold)
