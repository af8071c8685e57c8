"""Snakemake adapter: one synthetic set's membership attacks (synthaudit.membership.audit): membership.json
and the per-patient scores (patients.tsv). The training x samples distances are read from the
image level's matrices; the held-out x samples ones are computed here with the same kernels."""

import json

import numpy as np

from synthaudit.features.compare import load_embeddings, standardise
from synthaudit.io import check_on_grid, load_volume, read_tsv, write_json, write_tsv
from synthaudit.logs import logged
from synthaudit.membership import audit as ma
from synthaudit.relict import matrix
from synthaudit.relict.image_measures import all_pairs_image_measures

with logged(snakemake.log[0]) as log:
    p, i = snakemake.params, snakemake.input
    dataset = snakemake.wildcards.dataset
    c = ma.candidates(**p.candidates)
    log.info("%s: %d member patients (%d scans), %d non-member patients (%d scans)%s", dataset,
             len(c.member_patients), sum(c.member), len(c.nonmember_patients), len(c.member) - sum(c.member),
             "".join(f"; left out {len(v)} {k}" for k, v in c.excluded.items()))
    syn_ids = list(p.synthetic_ids)
    heldout_ids = [s for s, _ in p.candidates["heldout"]]
    distances = {}
    if p.measures and c.nonmember_patients:
        grid = json.loads(open(i.grid).read())

        def loaded(path):
            data, affine = load_volume(path)
            check_on_grid(path, data, affine, grid)
            return data

        held = {v: k for k, v in enumerate(heldout_ids)}
        wanted = [s for s, m in zip(c.ids, c.member) if not m]
        heldout = np.stack([loaded(i.heldout[held[s]]) for s in wanted])
        # held-out rows x sample columns: MAE and RMSE are symmetric, so the samples stand where training is
        new = all_pairs_image_measures(heldout, (loaded(path) for path in i.synthetic), p.measures, data_range=1.0,
                                       threads=snakemake.threads, n_training=len(syn_ids),
                                       device=snakemake.config["compute"]["device"])  # as the image level's own
        for m, path in zip(p.measures, i.training_distances):
            trained = matrix.load(path, synthetic_ids=syn_ids)  # samples x training
            col = {v: k for k, v in enumerate(trained.training_ids)}
            members = trained.distances[:, [col[s] for s, is_member in zip(c.ids, c.member) if is_member]].T
            distances[m] = np.vstack([members, new[m]])  # the candidates' order: members first, as c.ids
    embedded = None
    if len(i.embeddings) and c.nonmember_patients:
        (train_ids, train, _), (held_ids, held_x, _), (s_ids, samples, _) = [load_embeddings(x) for x in i.embeddings]
        if s_ids != syn_ids:
            raise ValueError(f"{i.embeddings[2]}: its ids differ from the set's samples; rerun embed")
        rows = {**{v: train[k] for k, v in enumerate(train_ids)}, **{v: held_x[k] for k, v in enumerate(held_ids)}}
        # scaled as the feature level scales, with the samples' statistics: the attacker holds nothing else
        cand, samples_scaled = standardise(np.stack([rows[v] for v in c.ids]), samples, p.scaling)
        reference, _ = standardise(held_x, samples, p.scaling)
        patient_of = dict(p.candidates["heldout"])
        embedded = {"candidates": cand, "samples": samples_scaled, "reference": reference,
                    "reference_patients": [patient_of[v] for v in held_ids]}
    precomputed = {}
    for space, path in zip(p.filter_spaces, i.filter_scores):  # the re-identification filter as the attacker
        best = {r["id"]: float(r["best_score"]) for r in read_tsv(path) if r["dataset"] == dataset}
        missing = [v for v in c.ids if v not in best]
        if missing:
            raise ValueError(f"{path}: no score of {missing[0]!r} against {dataset}'s samples; rerun privacy_evaluate")
        precomputed[f"filter_{space}"] = np.array([best[v] for v in c.ids])
    result, scores = ma.audit(c, distances, embedded, p.settings, len(syn_ids), precomputed)
    result.update({"dataset": dataset, "attacks_settings": {k: p.settings[k] for k in ("density_ratio", "fpr")}})
    write_json(snakemake.output.summary, result)
    rows = ma.patient_rows(c, scores)
    write_tsv(snakemake.output.patients, rows, list(rows[0]) if rows else ["patient_id", "role", "scans"])
    for line in ma.summary_lines(result):
        log.info("%s", line.rstrip())
