"""The comparison of the CVAE paper (4.2-4.3) plus a privacy audit of what is shared.

For every seed: the real training features shared as they are (the reference), k-Same
for each k, and the CVAE at each sampling variance, offline (a stored set of N decoded
vectors, Algorithm 1) and online (the probe sees fresh decoder samples every batch).
As in the paper's protocol, every method works from the same training patients (the
validation patients are held back from all of them: the original set, k-Same and the
CVAE alike) and every linear probe is early-stopped on the real validation patients.
Every set is measured on one common scale (``data.CommonScale``):

* **D** - average nearest-neighbour Euclidean distance from the shared vectors to the
  real training vectors (paper Eq. 1);
* **AUC** of a linear probe trained on the shared set, tested on the real test set
  (held-out patients), clean and with Gaussian noise of each sigma added to the test
  features (in training-SD units);
* **audit** - RELICT's feature-level distance ratio of each shared vector against the
  training vectors (``relict.ratio``), a vector counted as a replica when its ratio is
  below the ``replica_percentile``-th percentile of the held-out real patients' ratios;
  and the privacy filters' decision rule (``privacy.filtering.calibrate`` / ``decide``,
  tau at the ``flag_percentile``-th percentile of the held-out patients' best score) on
  a patient-level score: similarity to patient p = -d(a, p) / d(a, second-closest
  patient), with d(a, p) the distance to p's nearest scan. Its best value is minus
  Lowe's ratio: a vector is flagged when it is distinctly closer to one training
  patient than to any other, as a re-identification would be.
  Held-out patients cannot be in the training set, so both rates are calibrated to
  about (100 - percentile) % false alarms on genuinely new patients.

Why not plain distance for the filter rule: the learned filters score "same patient",
not "close". Averaged vectors (k-Same centroids, CVAE samples near a class prototype)
are closer to *every* training vector than a new patient is; with similarity = -distance
every one of them was flagged on the demo and on simulated clusters, for every method.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ..features.compare import all_pairs_feature_measures
from ..privacy.filtering import calibrate, decide
from ..relict.ratio import distance_ratio
from .cvae import Decoder, anonymise, decode, sample_labels, train_cvae
from .data import CommonScale, encode, validation_mask
from .ksame import k_same
from .probe import auc, train_probe, train_probe_online


@dataclass
class Split:
    """One set of real feature vectors: ids, (N, D) features, class labels, patients."""

    ids: list[str]
    features: np.ndarray
    labels: list[str]
    patients: list[str]
    splits: list[str] | None = None


@dataclass
class Audit:
    """Distances of the shared vectors to the training vectors, judged against held-out patients."""

    training: np.ndarray
    training_ids: list[str]
    training_patients: list[str]
    heldout: np.ndarray
    n_closest: int
    replica_percentile: float
    flag_percentile: float
    warn: object = None
    scale: CommonScale | None = None  # with it, D also on the extractor's feature scale (D_raw)

    def __post_init__(self):
        self.patients = sorted(set(self.training_patients))
        if len(self.patients) < 2:
            raise ValueError("the audit needs at least two training patients (the score compares the closest two)")
        self._columns = [np.flatnonzero(np.asarray(self.training_patients) == p) for p in self.patients]
        ref = self._distances(self.heldout)
        self.heldout_ratio = distance_ratio(ref, self.n_closest, warn=self.warn).ratio
        self.ratio_threshold = float(np.percentile(self.heldout_ratio, self.replica_percentile))
        self.tau = calibrate(self._patient_similarity(ref), "heldout_to_training", self.flag_percentile)
        self.reference = {"D": float(ref.min(axis=1).mean()), "median_ratio": float(np.median(self.heldout_ratio)),
                          "ratio_threshold": self.ratio_threshold, "flag_tau": self.tau}
        if self.scale is not None:
            self._raw_training = self.scale.unscale(self.training)
            self.reference["D_raw"] = self._raw_d(self.heldout)

    def _raw_d(self, x: np.ndarray) -> float:
        """D with the common z-scoring undone: the feature scale the extractor gives."""
        raw = self.scale.unscale(x)
        rmse = all_pairs_feature_measures(raw, self._raw_training, ["emb_rmse"])["emb_rmse"]
        return float((rmse * np.sqrt(raw.shape[1])).min(axis=1).mean())

    def _distances(self, x: np.ndarray) -> np.ndarray:
        """Euclidean distances via RELICT's feature-level RMSE (x sqrt(D)): the same code path."""
        rmse = all_pairs_feature_measures(x, self.training, ["emb_rmse"])["emb_rmse"]
        return rmse * np.sqrt(self.training.shape[1])

    def _patient_similarity(self, d: np.ndarray) -> np.ndarray:
        """(N, patients) similarity -d(a, p) / d(a, second-closest patient); 0/0 counts as 1."""
        per_patient = np.stack([d[:, cols].min(axis=1) for cols in self._columns], axis=1)
        second = np.partition(per_patient, 1, axis=1)[:, 1:2]
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = np.where(second > 0, per_patient / second, 1.0)
        return -ratio

    def __call__(self, shared: np.ndarray) -> dict:
        d = self._distances(shared)
        ratio = distance_ratio(d, self.n_closest, warn=lambda m: None)
        flags = decide(self._patient_similarity(d), self.tau, self.patients, self.patients)
        raw = {"D_raw": self._raw_d(shared)} if self.scale is not None else {}
        return {
            "D": float(d.min(axis=1).mean()), **raw,
            "median_ratio": float(np.median(ratio.ratio)),
            "replica_rate": float(np.mean(ratio.ratio < self.ratio_threshold)),
            "flag_rate": float(np.mean(flags["flagged"])),
            "flagged_patients": int(len(set(flags["patient"][flags["flagged"]].tolist()))),
        }


def _noisy_aucs(model, test: np.ndarray, y_test: np.ndarray, n_classes: int, sigmas: Sequence[float],
                seed: int) -> dict:
    out = {"auc": auc(model, test, y_test, n_classes)}
    for sigma in sigmas:
        rng = np.random.default_rng([int(seed), int(round(float(sigma) * 1000))])
        out[f"auc_noise_{sigma:g}"] = auc(model, test + rng.normal(0.0, float(sigma), test.shape), y_test, n_classes)
    return out


def compare(train: Split, test: Split, cfg: Mapping, log=None, device: str = "cpu",
            threads: int = 1) -> tuple[list[dict], dict]:
    """Run every method for every seed.

    Args:
        train: The real training features (what is anonymised).
        test: The real test features (held-out patients): the probe's test set and the
            audit's reference of new patients.
        cfg: params.yaml ``anonymise`` (see there).

    Returns:
        ``(rows, artefacts)``: one row per method, setting and seed; artefacts hold the
        scale, the class names, each seed's decoder and CVAE history, and the first
        seed's shared sets (what a user would hand over).

    The models are tiny (a linear layer, a two-layer CVAE): ``threads`` defaults to one
    torch thread, since more only add synchronisation per step (and on a busy node
    spinning threads made each step 30x slower).
    """
    previous = torch.get_num_threads()
    torch.set_num_threads(max(1, int(threads)))
    try:
        return _compare(train, test, cfg, log, device)
    finally:
        torch.set_num_threads(previous)


def _compare(train: Split, test: Split, cfg: Mapping, log, device: str) -> tuple[list[dict], dict]:
    y, classes = encode(train.labels)
    y_test, _ = encode(test.labels, classes)
    n_classes = len(classes)
    proj = cfg["projection"]
    scale = CommonScale.fit(train.features, proj["dim"], proj["seed"])
    f = scale.transform(train.features)
    t = scale.transform(test.features)
    val = validation_mask(train.labels, train.patients, train.splits, cfg["validation_fraction"], cfg["split_seed"])
    # Di Salvo et al.'s protocol: every method anonymises the same training patients (the
    # validation patients are held back from all of them), and every probe is early-stopped
    # on those real validation patients
    fit, y_fit, patients_fit = f[~val], y[~val], [p for p, v in zip(train.patients, val) if not v]
    f_val, y_val = f[val], y[val]
    audit = Audit(fit, [i for i, v in zip(train.ids, val) if not v], patients_fit, t, cfg["audit"]["n_closest"],
                  cfg["audit"]["replica_percentile"], cfg["audit"]["flag_percentile"],
                  warn=(log.warning if log is not None else None), scale=scale)
    probe_cfg, sigmas = cfg["probe"], cfg["noise_sigmas"]
    class_counts = np.bincount(y_fit, minlength=n_classes)
    rows, artefacts = [], {"scale": scale, "classes": classes, "decoders": {}, "histories": {}, "shared": {},
                           "validation_ids": [i for i, v in zip(train.ids, val) if v], "train_scaled": fit,
                           "train_labels": y_fit, "heldout_reference": audit.reference}

    def offline(method: str, family: str, setting, seed: int, shared: np.ndarray, labels: np.ndarray) -> None:
        model, info = train_probe(shared, labels, f_val, y_val, n_classes, probe_cfg, seed)
        row = {"method": method, "family": family, "setting": setting, "seed": seed, "n_shared": len(shared),
               **_noisy_aucs(model, t, y_test, n_classes, sigmas, seed), **audit(shared), "probe_epochs": info["epochs"]}
        rows.append(row)
        if seed == cfg["seeds"][0]:
            artefacts["shared"][method] = (shared, labels)
        if log is not None:
            log.info("%s seed %d: D %.3f, AUC %.3f, replicas %.2f, flagged %.2f", method, seed, row["D"], row["auc"],
                     row["replica_rate"], row["flag_rate"])

    for seed in cfg["seeds"]:
        offline("original", "original", None, seed, fit, y_fit)
        for k in cfg["k_same"]:
            shared, _ = k_same(fit, y_fit, int(k), seed, classes)
            offline(f"{k}-Same", "k-Same", int(k), seed, shared, y_fit)
        model, history = train_cvae(fit, y_fit, f_val, y_val, n_classes, cfg["cvae"], seed, device, log)
        artefacts["decoders"][seed], artefacts["histories"][seed] = model.decoder, history
        for variance in cfg["sampling_variances"]:
            shared, labels = anonymise(model.decoder, class_counts, len(fit), float(variance), seed)
            offline(f"CVAE offline var {variance:g}", "CVAE offline", float(variance), seed, shared, labels)
            online(model.decoder, float(variance), seed, class_counts, len(fit), n_classes, probe_cfg, t, y_test,
                   sigmas, rows, log, validation=(f_val, y_val))
    return rows, artefacts


def online(decoder: Decoder, variance: float, seed: int, class_counts: np.ndarray, n: int, n_classes: int,
           probe_cfg: Mapping, test: np.ndarray, y_test: np.ndarray, sigmas, rows: list, log=None,
           validation: tuple[np.ndarray, np.ndarray] | None = None) -> None:
    """Online anonymisation: the probe never sees a stored set, only fresh decoder samples
    (early-stopped on ``validation``, the real validation patients)."""

    def sample(m: int, generator: torch.Generator):
        rng = np.random.default_rng(int(torch.randint(0, 2**62, (1,), generator=generator)))
        labels = sample_labels(class_counts, m, rng, exact=False)  # Algorithm 1, step 3
        return decode(decoder, labels, variance, generator), labels

    if validation is None:
        raise ValueError("the online probe is early-stopped on real validation features; give validation=(x, y)")
    model, info = train_probe_online(sample, n, decoder.n_features, n_classes, validation[0], validation[1],
                                     probe_cfg, seed)
    row = {"method": f"CVAE online var {variance:g}", "family": "CVAE online", "setting": variance, "seed": seed,
           "n_shared": 0, **_noisy_aucs(model, test, y_test, n_classes, sigmas, seed), "probe_epochs": info["epochs"]}
    rows.append(row)
    if log is not None:
        log.info("%s seed %d: AUC %.3f", row["method"], seed, row["auc"])


def summarise(rows: Sequence[dict], sigmas: Sequence[float]) -> list[dict]:
    """Mean and SD over seeds per method, in the order methods first appear."""
    fields = ["D", "D_raw", "auc", *[f"auc_noise_{s:g}" for s in sigmas], "replica_rate", "flag_rate", "flagged_patients",
              "median_ratio"]
    out = []
    for method in dict.fromkeys(r["method"] for r in rows):
        mine = [r for r in rows if r["method"] == method]
        entry = {"method": method, "family": mine[0]["family"], "setting": mine[0]["setting"], "n_seeds": len(mine),
                 "n_shared": mine[0]["n_shared"]}
        for key in fields:
            values = [r[key] for r in mine if key in r]
            entry[key] = float(np.mean(values)) if values else None
            entry[f"{key}_sd"] = float(np.std(values)) if values else None
        out.append(entry)
    return out
