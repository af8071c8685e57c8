"""Which reading of Di Salvo et al.'s "MSE + beta KL" reproduces the paper's beta (issue 32, item 4).

Why: the paper trains its CVAE with "the MSE loss" plus a KL term weighted beta = 0.1,
"prioritizing the reconstruction", and reports that the sampling variance (0.5, 1.0, 1.5)
moves the generated vectors between the class prototypes and the data ("a lower sampling
variance ... yields samples closer to the class prototypes, and vice versa", Table 1: the
AUC changes by several points between variances). With the squared error summed over the
features (``anonymise.cvae.reconstruction: sum``) beta = 0.1 does prioritise the
reconstruction; averaged over the 256 projected features (``mean``, "MSE" read literally)
the KL weighs 256x more and can switch the latent code off (posterior collapse), and then
the sampling variance changes nothing. This bench measures both on one feature set:

* active latent units (mean KL per unit over the training vectors > 0.01 nats),
* how far decodes move with the sampling variance (mean distance of a decode at variance
  1.5 and 0.5 from the decode at z = 0, the class prototype),
* the workflow's own comparison (``anonymise.evaluate.compare``): D and the probe's AUC,
  clean and at the largest noise, for each variance.

The features are simulated at the size of the paper's smaller datasets (about 1,000
training vectors of 768 dimensions, imbalanced classes, patients on a low-rank manifold
within each class), projected to 256 dimensions as the workflow does; the demo's own
cohort (22 training vectors) is too small to train a CVAE that says anything.

    PYTHONPATH=bench python -m synthaudit_bench.cvae_reconstruction --out results/bench/cvae_reconstruction.json
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from pathlib import Path

import numpy as np
import torch
import yaml

from synthaudit.io import write_json


def simulated_features(n_patients: int, n_test_patients: int, dim: int = 768, rank: int = 24,
                       classes: tuple[float, ...] = (0.45, 0.3, 0.15, 0.1), seed: int = 0):
    """Two scans per patient; a class is a mean plus a rank-``rank`` manifold of patients."""
    from synthaudit.anonymise.evaluate import Split

    rng = np.random.default_rng(seed)
    means = rng.standard_normal((len(classes), dim)) * 0.6
    bases = rng.standard_normal((len(classes), rank, dim)) / np.sqrt(rank)

    def cohort(n, offset):
        ids, x, labels, patients = [], [], [], []
        cls = rng.choice(len(classes), size=n, p=np.asarray(classes) / sum(classes))
        for p, c in enumerate(cls):
            base = means[c] + rng.standard_normal(rank) @ bases[c] * 1.5 + 0.3 * rng.standard_normal(dim)
            for s in range(2):
                ids.append(f"p{p + offset}_{s}")
                patients.append(f"p{p + offset}")
                labels.append(f"class{c}")
                x.append(base + 0.25 * rng.standard_normal(dim))
        return Split(ids, np.array(x, np.float32), labels, patients)

    return cohort(n_patients, 0), cohort(n_test_patients, 100_000)


def latent_diagnostics(train, cfg: dict, seed: int, variances) -> dict:
    """Active units and the decodes' movement with the sampling variance, for one trained CVAE."""
    from synthaudit.anonymise.cvae import train_cvae
    from synthaudit.anonymise.data import CommonScale, encode, validation_mask

    y, classes = encode(train.labels)
    scale = CommonScale.fit(train.features, cfg["projection"]["dim"], cfg["projection"]["seed"])
    f = scale.transform(train.features)
    val = validation_mask(train.labels, train.patients, None, cfg["validation_fraction"], cfg["split_seed"])
    start = time.perf_counter()
    model, history = train_cvae(f[~val], y[~val], f[val], y[val], len(classes), cfg["cvae"], seed)
    seconds = time.perf_counter() - start
    with torch.no_grad():
        xt, yt = torch.as_tensor(f[~val], dtype=torch.float32), torch.as_tensor(y[~val])
        h = model.encoder(torch.cat([xt, torch.nn.functional.one_hot(yt, len(classes)).float()], 1))
        mu, log_var = model.mu(h), model.log_var(h)
        kl_unit = (-0.5 * (1 + log_var - mu ** 2 - log_var.exp())).mean(0).numpy()
        gen = torch.Generator().manual_seed(seed)
        labels = yt[:256]
        prototype = model.decoder(torch.zeros(len(labels), model.latent), labels)
        move = {}
        for v in variances:
            z = torch.randn(len(labels), model.latent, generator=gen) * float(v) ** 0.5
            move[f"{v:g}"] = float((model.decoder(z, labels) - prototype).norm(dim=1).mean())
        recon = model.decoder(mu, yt)
        rel_error = float(((recon - xt) ** 2).sum(1).mean() / (xt - xt.mean(0)).pow(2).sum(1).mean())
    return {"epochs": len(history), "train_seconds": seconds, "active_units": int((kl_unit > 0.01).sum()),
            "latent": int(model.latent), "kl_per_sample": float(kl_unit.sum()),
            "reconstruction_error_fraction": rel_error, "decode_distance_from_prototype": move}


def run(n_patients: int, n_test_patients: int, seeds, out: Path) -> dict:
    from synthaudit.anonymise.evaluate import compare, summarise

    params = yaml.safe_load((Path(__file__).resolve().parents[2] / "params.yaml").read_text())
    base = copy.deepcopy(params["anonymise"])
    base["seeds"] = list(seeds)
    base["k_same"] = [2, 5]
    train, test = simulated_features(n_patients, n_test_patients)
    report = {"data": {"training_vectors": len(train.ids), "test_vectors": len(test.ids),
                       "dim": int(train.features.shape[1]), "projection_dim": base["projection"]["dim"],
                       "classes": sorted(set(train.labels))},
              "cvae": {k: base["cvae"][k] for k in ("hidden", "latent", "beta", "learning_rate", "batch_size",
                                                     "patience")},
              "modes": {}}
    for mode in ("sum", "mean"):
        cfg = copy.deepcopy(base)
        cfg["cvae"]["reconstruction"] = mode
        diag = [latent_diagnostics(train, cfg, s, cfg["sampling_variances"]) for s in seeds]
        start = time.perf_counter()
        rows, _ = compare(train, test, cfg)
        summary = summarise(rows, cfg["noise_sigmas"])
        noisiest = f"auc_noise_{cfg['noise_sigmas'][-1]:g}"
        report["modes"][mode] = {
            "latent": diag,
            "methods": {s["method"]: {k: s.get(k) for k in ("D", "D_raw", "auc", noisiest, "replica_rate")}
                        for s in summary},
            "compare_seconds": time.perf_counter() - start,
        }
        print(mode, json.dumps({"active_units": [d["active_units"] for d in diag],
                                "move": [d["decode_distance_from_prototype"] for d in diag]}), flush=True)
    write_json(out, report)
    return report


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("results/bench/cvae_reconstruction.json"))
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    run(500, 150, [0, 1, 2], a.out)  # patients (two vectors each), test patients, seeds


if __name__ == "__main__":
    main()
