"""The membership stage's one job: every synthetic set's attacks (:mod:`.audit`), from the files the
workflow already wrote, plus the held-out x samples image distances it computes itself.

Why one job for every set, not one per set: a set's attacks take a fraction of a second, and a job's
Python, NumPy and numba start-up about two seconds; on the demo's eight sets the start-ups were most of
the stage (issue 64: under 10 % of the image level). In one job, what sets share is also read once: the
demo's six NCCT sets share one training set, so one set of held-out volumes and embeddings
(:class:`Shared`). A set's result depends on its own inputs only, as in a job of its own.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import audit as ma


@dataclass
class SetFiles:
    """One set's inputs, as the workflow's plan names them (workflow_plan.membership_sets)."""

    heldout: list[str]  # the training set's held-out volumes, in the candidates' held-out order
    synthetic: list[str]  # the samples, in synthetic_ids' order
    synthetic_ids: list[str]
    training_distances: list[str]  # the image level's samples x training matrix of each measure
    measures: list[str]
    embeddings: list[str]  # training, held-out, samples (feature level); [] without the embedding attacks
    filter_scores: list[str]  # the privacy filters' best scores, one file per filter space
    filter_spaces: list[str]
    grid: str
    candidates: dict  # audit.candidates' arguments


def _on_grid(path: str, grid: dict) -> np.ndarray:
    """A volume, refused unless it lies on the audit's grid (as every job that reads volumes does)."""
    from ..io import check_on_grid, load_volume

    data, affine = load_volume(path)
    check_on_grid(path, data, affine, grid)
    return data


class Shared:
    """The grid, volumes and embeddings read once for every set that names them (sets are grouped by
    training set, so one training set's are held while its sets run, then let go)."""

    def __init__(self):
        self._volumes: dict[str, np.ndarray] = {}
        self._embeddings: dict[str, tuple] = {}
        self._grid_path: str | None = None
        self.grid: dict = {}

    def use(self, grid_path: str) -> None:
        """Hold this training set's grid (grid.json), letting another set's volumes and embeddings go."""
        if grid_path != self._grid_path:
            self._volumes.clear()
            self._embeddings.clear()
            self._grid_path, self.grid = grid_path, json.loads(Path(grid_path).read_text())

    def volume(self, path: str) -> np.ndarray:
        if path not in self._volumes:
            self._volumes[path] = _on_grid(path, self.grid)
        return self._volumes[path]

    def embeddings(self, path: str) -> tuple:
        from ..features.compare import load_embeddings

        if path not in self._embeddings:
            self._embeddings[path] = load_embeddings(path)
        return self._embeddings[path]


def _image_distances(s: SetFiles, c: ma.Candidates, shared: Shared, threads: int, device: str) -> dict:
    """Candidates x samples distances per image measure: the members' rows from the image level's matrices,
    the non-members' computed here with the image level's kernels."""
    from ..relict import matrix
    from ..relict.image_measures import all_pairs_image_measures

    held = {v: k for k, v in enumerate(v for v, _ in s.candidates["heldout"])}
    heldout = np.stack([shared.volume(s.heldout[held[v]]) for v, m in zip(c.ids, c.member) if not m])
    samples = (_on_grid(path, shared.grid) for path in s.synthetic)
    # held-out rows x sample columns: MAE and RMSE are symmetric, so the samples stand where training is
    new = all_pairs_image_measures(heldout, samples, s.measures, data_range=1.0, threads=threads,
                                   n_training=len(s.synthetic_ids), device=device)  # as the image level's own
    out = {}
    for m, path in zip(s.measures, s.training_distances):
        trained = matrix.load(path, synthetic_ids=s.synthetic_ids)  # samples x training
        col = {v: k for k, v in enumerate(trained.training_ids)}
        members = trained.distances[:, [col[v] for v, is_member in zip(c.ids, c.member) if is_member]].T
        out[m] = np.vstack([members, new[m]])  # the candidates' order: members first, as c.ids
    return out


def _embedded(s: SetFiles, c: ma.Candidates, shared: Shared, scaling: str) -> dict:
    from ..features.compare import standardise

    (train_ids, train, _), (held_ids, held_x, _), (s_ids, samples, _) = [shared.embeddings(x) for x in s.embeddings]
    if s_ids != s.synthetic_ids:
        raise ValueError(f"{s.embeddings[2]}: its ids differ from the set's samples; rerun embed")
    # scaled as the feature level scales, with the samples' statistics: the attacker holds nothing else (every
    # scaling treats each row on its own, so the real scans are scaled together, once)
    real, samples_scaled = standardise(np.concatenate([train, held_x]), samples, scaling)
    row = {v: k for k, v in enumerate([*train_ids, *held_ids])}
    patient_of = dict(s.candidates["heldout"])
    return {"candidates": real[[row[v] for v in c.ids]], "samples": samples_scaled, "reference": real[len(train_ids):],
            "reference_patients": [patient_of[v] for v in held_ids]}


def _filter_scores(dataset: str, s: SetFiles, c: ma.Candidates) -> dict[str, np.ndarray]:
    from ..io import read_tsv

    out = {}
    for space, path in zip(s.filter_spaces, s.filter_scores):  # the re-identification filter as the attacker
        best = {r["id"]: float(r["best_score"]) for r in read_tsv(path) if r["dataset"] == dataset}
        missing = [v for v in c.ids if v not in best]
        if missing:
            raise ValueError(f"{path}: no score of {missing[0]!r} against {dataset}'s samples; rerun privacy_evaluate")
        out[f"filter_{space}"] = np.array([best[v] for v in c.ids])
    return out


def by_training_set(sets: Mapping[str, SetFiles]) -> list[str]:
    """The sets in the order to run them: those of one training set (one grid) after each other, so that
    :class:`Shared` holds one training set's volumes at a time."""
    grids = list(dict.fromkeys(s.grid for s in sets.values()))
    return [d for g in grids for d, s in sets.items() if s.grid == g]


def run_set(dataset: str, s: SetFiles, settings: Mapping, scaling: str, shared: Shared, *, threads: int = 1,
            device: str = "cpu", log=None) -> tuple[dict, list[dict]]:
    """One set's ``membership.json`` content and its per-patient rows."""
    c = ma.candidates(**s.candidates)
    shared.use(s.grid)
    if log is not None:
        log.info("%s: %d member patients (%d scans), %d non-member patients (%d scans)%s", dataset,
                 len(c.member_patients), sum(c.member), len(c.nonmember_patients), len(c.member) - sum(c.member),
                 "".join(f"; left out {len(v)} {k}" for k, v in c.excluded.items()))
    distances = _image_distances(s, c, shared, threads, device) if s.measures and c.nonmember_patients else {}
    embedded = _embedded(s, c, shared, scaling) if s.embeddings and c.nonmember_patients else None
    result, scores = ma.audit(c, distances, embedded, dict(settings), len(s.synthetic_ids),
                              _filter_scores(dataset, s, c))
    result.update({"dataset": dataset, "attacks_settings": {k: settings[k] for k in ("density_ratio", "fpr")}})
    return result, ma.patient_rows(c, scores)
