"""Feature-space anonymisation: labels and splits, the common scale, k-Same, the CVAE, the
probe, the audit, and the paper's trends on simulated class clusters."""

import numpy as np
import pytest
from synthaudit.anonymise.cvae import anonymise, load_decoder, sample_labels, save_decoder, train_cvae
from synthaudit.anonymise.data import CommonScale, LabelError, encode, read_labels, validation_split
from synthaudit.anonymise.evaluate import Audit, Split, compare, summarise
from synthaudit.anonymise.ksame import k_same
from synthaudit.anonymise.probe import auc, train_probe
from synthaudit.config import ParamsError, load_params, validate_params

CVAE_CFG = {"hidden": 64, "latent": 16, "beta": 0.1, "learning_rate": 1e-3, "batch_size": 32, "max_epochs": 300,
            "patience": 20}
PROBE_CFG = {"learning_rate": 1e-3, "batch_size": 32, "max_epochs": 200, "patience": 20}


def clusters(n_patients, seed=0, dim=300, classes=2, offset=0, centres=None):
    """Patients with two scans each (scan noise << patient spread); classes shift the mean."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((classes, dim)) * 0.35 if centres is None else centres
    ids, x, labels, patients = [], [], [], []
    for p in range(n_patients):
        c = p % classes
        base = centres[c] + rng.standard_normal(dim)
        for s in range(2):
            ids.append(f"p{p + offset}_{s}")
            patients.append(f"p{p + offset}")
            labels.append(f"class{c}")
            x.append(base + 0.15 * rng.standard_normal(dim))
    return Split(ids, np.array(x), labels, patients), centres


def write(path, text):
    path.write_text(text)
    return path


# --- labels and splits ---------------------------------------------------------------

def test_labels_are_read_from_any_table_with_an_id_column(tmp_path):
    f = write(tmp_path / "manifest.tsv", "id\timage\tdiagnosis\tsplit\na\ta.nii\tx\ttrain\nb\tb.nii\ty\tval\n")
    labels, splits = read_labels(f, "diagnosis", ["b", "a"], "training")
    assert labels == ["y", "x"] and splits == ["val", "train"]


@pytest.mark.parametrize("text, message", [
    ("id\tother\na\t1\n", "no column(s) ['diagnosis']"),
    ("id\tdiagnosis\na\tx\n", "1 training volume(s) have no row"),
    ("id\tdiagnosis\na\tx\nb\t\n", "empty 'diagnosis'"),
    ("id\tdiagnosis\tsplit\na\tx\ttest\nb\ty\ttrain\n", "may hold 'train' or 'val'"),
])
def test_bad_label_tables_are_refused_naming_the_problem(tmp_path, text, message):
    f = write(tmp_path / "labels.tsv", text)
    with pytest.raises(LabelError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        read_labels(f, "diagnosis", ["a", "b"], "training")


def test_missing_label_file_and_single_class_are_refused(tmp_path):
    with pytest.raises(LabelError, match="not found"):
        read_labels(tmp_path / "nope.tsv", "c", ["a"], "training")
    with pytest.raises(LabelError, match="at least two classes"):
        encode(["a", "a"])
    with pytest.raises(LabelError, match=r"\['z'\] are not among the training classes"):
        encode(["a", "z"], ["a", "b"])


def test_validation_split_keeps_patients_whole_and_covers_every_class():
    labels = np.array([0] * 20 + [1] * 20)
    groups = [f"p{i // 2}" for i in range(40)]  # 20 patients, 2 scans each
    val = validation_split(labels, groups, 0.1, seed=3)
    for p in set(groups):
        rows = [i for i, g in enumerate(groups) if g == p]
        assert len(set(val[rows])) == 1, p
    assert set(labels[val]) == {0, 1} and val.sum() == 4  # one patient of 10 per class
    assert np.array_equal(val, validation_split(labels, groups, 0.1, seed=3))
    with pytest.raises(LabelError, match="no validation split possible"):
        validation_split(np.array([0, 0, 1, 1]), ["a", "a", "b", "b"], 0.1, seed=0)


# --- common scale --------------------------------------------------------------------

def test_common_scale_is_fitted_once_and_keeps_distances():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((40, 5000)) * rng.uniform(0.5, 2.0, 5000)
    scale = CommonScale.fit(x, 512, projection_seed=7)
    z = scale.transform(x)
    assert z.shape == (40, 512)
    np.testing.assert_allclose(z.mean(axis=0), 0, atol=1e-9)
    np.testing.assert_allclose(z.std(axis=0), 1, atol=1e-9)
    # another set goes through the *same* transform (not re-standardised): a shifted copy stays shifted
    shifted = scale.transform(x + 3.0)
    assert np.abs(shifted.mean(axis=0)).mean() > 1  # per dimension, in training-SD units
    # Johnson-Lindenstrauss: projected distances follow the originals (before z-scoring)
    raw = scale._project(x)
    d_orig = np.linalg.norm(x[:20] - x[20:], axis=1)
    d_proj = np.linalg.norm(raw[:20] - raw[20:], axis=1)
    assert np.all(np.abs(d_proj / d_orig - 1) < 0.2)
    assert np.array_equal(scale.matrix(), CommonScale.fit(x, 512, 7).matrix())  # recreated from the seed
    with pytest.raises(ValueError, match="fitted on 5000-d"):
        scale.transform(x[:, :10])
    assert CommonScale.fit(x[:, :100], 512, 0).projection_dim is None  # nothing to reduce


# --- k-Same --------------------------------------------------------------------------

def test_k_same_groups_k_to_2k_minus_1_same_class_vectors_into_centroids():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((23, 6))
    y = np.array([0] * 12 + [1] * 11)
    out, group = k_same(x, y, 5, seed=0)
    for g in np.unique(group):
        rows = np.flatnonzero(group == g)
        assert 5 <= len(rows) <= 9 and len(set(y[rows])) == 1
        np.testing.assert_allclose(out[rows], np.tile(x[rows].mean(axis=0), (len(rows), 1)))
    assert out.shape == x.shape and (group >= 0).all()
    with pytest.raises(LabelError, match=r"k=12: class\(es\) \{'b': 11\} have fewer than 12"):
        k_same(x, y, 12, seed=0, class_names=["a", "b"])


def test_k_same_check_counts_the_vectors_outside_the_validation_patients():
    from synthaudit.anonymise.data import label_problems, validation_mask

    labels = ["a"] * 6 + ["b"] * 6
    val = [True, True] + [False] * 4 + [True, True] + [False] * 4
    assert label_problems(labels, ["a", "b"], [5]) == []
    problems = label_problems(labels, ["a", "b"], [5], val)
    assert problems == ["k-Same with k=5: class(es) {'a': 4, 'b': 4} have fewer than 5 training vectors outside "
                        "the validation patients; lower or remove that k (anonymise.k_same)"]
    patients = [f"p{i // 2}" for i in range(12)]
    mask = validation_mask(labels, patients, None, 0.34, 0)  # whole patients, every class validated
    assert {labels[i] for i in np.flatnonzero(mask)} == {"a", "b"} and mask.sum() == 4
    assert validation_mask(labels, patients, ["val"] + ["train"] * 11, 0.34, 0).tolist() == [True] + [False] * 11


# --- CVAE and probe ------------------------------------------------------------------

def test_cvae_learns_shares_its_decoder_and_samples_the_class_proportions(tmp_path):
    train, _ = clusters(30, dim=40)
    x = CommonScale.fit(train.features, None, 0).transform(train.features)
    y, classes = encode(train.labels)
    val = validation_split(y, train.patients, 0.1, 0)
    model, history = train_cvae(x[~val], y[~val], x[val], y[val], 2, CVAE_CFG, seed=0)
    assert history[-1]["val_loss"] < history[0]["val_loss"]
    best = min(h["val_loss"] for h in history)
    assert len(history) < CVAE_CFG["max_epochs"] or history[-1]["val_loss"] == best  # early stopping
    save_decoder(tmp_path / "decoder.pt", model.decoder, {"classes": classes})
    decoder, meta = load_decoder(tmp_path / "decoder.pt")
    assert meta["classes"] == classes
    a, la = anonymise(model.decoder, np.array([45, 15]), 60, 1.0, seed=4)
    b, lb = anonymise(decoder, np.array([45, 15]), 60, 1.0, seed=4)
    np.testing.assert_allclose(a, b, atol=1e-6)
    assert np.array_equal(la, lb) and np.bincount(la).tolist() == [45, 15]
    # class-conditional: decoded class means sit nearer their own class's real mean
    for c in (0, 1):
        own = np.linalg.norm(a[la == c].mean(0) - x[y == c].mean(0))
        other = np.linalg.norm(a[la == c].mean(0) - x[y != c].mean(0))
        assert own < other, c


def test_sampled_labels_follow_the_class_distribution():
    rng = np.random.default_rng(0)
    exact = sample_labels(np.array([1, 2, 7]), 20, rng, exact=True)
    assert np.bincount(exact).tolist() == [2, 4, 14]
    drawn = sample_labels(np.array([1, 3]), 4000, rng, exact=False)
    assert abs(drawn.mean() - 0.75) < 0.03


def test_probe_auc_binary_and_multiclass():
    train, centres = clusters(60, seed=2, dim=20, classes=3)
    test, _ = clusters(30, seed=3, dim=20, classes=3, centres=centres * 6)
    scale = CommonScale.fit(train.features, None, 0)
    y, classes = encode(train.labels)
    x = scale.transform(train.features)
    strong = scale.transform(clusters(60, seed=2, dim=20, classes=3, centres=centres * 6)[0].features)
    model, info = train_probe(strong, y, strong, y, 3, PROBE_CFG, seed=0)
    assert auc(model, scale.transform(test.features), encode(test.labels, classes)[0], 3) > 0.9
    with pytest.raises(ValueError, match="single class"):
        auc(model, x[:2], np.array([0, 0]), 3)
    assert info["epochs"] >= 1


# --- audit and the whole comparison --------------------------------------------------

def test_audit_flags_copies_of_one_patient_and_not_new_patients():
    train, centres = clusters(20, seed=5)
    heldout, _ = clusters(10, seed=6, offset=100, centres=centres)
    fresh, _ = clusters(10, seed=7, offset=200, centres=centres)
    audit = Audit(train.features, train.ids, train.patients, heldout.features, n_closest=10,
                  replica_percentile=5, flag_percentile=95)
    copies = audit(train.features[:10] + 0.01)
    assert copies["flag_rate"] == 1.0 and copies["replica_rate"] == 1.0 and copies["flagged_patients"] == 5
    new = audit(fresh.features)
    assert new["flag_rate"] <= 0.3 and new["replica_rate"] <= 0.3
    assert audit.reference["D"] > 0 and new["D"] > copies["D"]


def test_d_raw_is_the_nearest_neighbour_distance_on_the_extractors_own_scale():
    # Di Salvo et al.'s D (Eq. 1) on the features as the extractor gives them: the common
    # z-scoring undone (no projection here, so exactly the raw vectors)
    train, centres = clusters(20, seed=5)
    heldout, _ = clusters(10, seed=6, offset=100, centres=centres)
    raw_train = train.features * np.linspace(0.5, 40.0, train.features.shape[1]) + 3.0  # uneven feature scales
    raw_held = heldout.features * np.linspace(0.5, 40.0, train.features.shape[1]) + 3.0
    scale = CommonScale.fit(raw_train, None, 0)
    audit = Audit(scale.transform(raw_train), train.ids, train.patients, scale.transform(raw_held), n_closest=10,
                  replica_percentile=5, flag_percentile=95, scale=scale)
    shared = raw_train[:7] + 0.5
    out = audit(scale.transform(shared))

    def nn_mean(a, b):
        return float(np.sqrt(((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)).min(axis=1).mean())

    assert out["D_raw"] == pytest.approx(nn_mean(shared, raw_train), rel=1e-5)
    assert audit.reference["D_raw"] == pytest.approx(nn_mean(raw_held, raw_train), rel=1e-5)
    assert out["D"] == pytest.approx(nn_mean(scale.transform(shared), scale.transform(raw_train)), rel=1e-5)
    assert out["D_raw"] != pytest.approx(out["D"], rel=0.1)  # the two scales differ here


CFG = {"projection": {"dim": 128, "seed": 0}, "validation_fraction": 0.1, "split_seed": 0, "seeds": [0, 1],
       "k_same": [2, 10], "sampling_variances": [0.5, 1.0], "noise_sigmas": [1, 3], "cvae": CVAE_CFG,
       "probe": PROBE_CFG, "audit": {"n_closest": 10, "replica_percentile": 5, "flag_percentile": 95}}


@pytest.fixture(scope="module")
def comparison():
    train, centres = clusters(40, seed=10, dim=400)
    test, _ = clusters(12, seed=11, dim=400, offset=100, centres=centres)
    rows, art = compare(train, test, CFG)
    return rows, art, summarise(rows, CFG["noise_sigmas"])


def test_comparison_runs_every_method_and_seed(comparison):
    rows, art, summary = comparison
    methods = ["original", "2-Same", "10-Same", "CVAE offline var 0.5", "CVAE online var 0.5",
               "CVAE offline var 1", "CVAE online var 1"]
    assert [s["method"] for s in summary] == methods
    assert all(s["n_seeds"] == 2 for s in summary)
    assert set(art["decoders"]) == {0, 1} and set(art["shared"]) == set(methods) - {"CVAE online var 0.5",
                                                                                  "CVAE online var 1"}
    for r in rows:
        assert {"auc_noise_1", "auc_noise_3"} <= set(r)
        if r["method"] in ("original", "2-Same"):  # separable classes, every seed: the probe must find them
            assert r["auc"] > 0.9, r


def test_every_method_shares_the_same_training_patients_and_probes_stop_on_real_validation(comparison):
    """Di Salvo et al.'s protocol: the validation patients are held back from every method (they
    early-stop the CVAE and every probe); original, k-Same and the CVAE share sets of one size."""
    rows, art, _ = comparison
    n_fit = 80 - len(art["validation_ids"])  # 40 patients x 2 scans
    assert 0 < len(art["validation_ids"]) < 80 and len(art["train_scaled"]) == n_fit
    for r in rows:
        if r["family"] != "CVAE online":
            assert r["n_shared"] == n_fit, r
    original, _ = art["shared"]["original"]
    np.testing.assert_array_equal(original, art["train_scaled"])  # the validation patients are not in it
    from synthaudit.anonymise.probe import train_probe_online
    with pytest.raises(TypeError):
        train_probe_online(lambda n, g: None, 10, 4, 2, CFG["probe"], 0)  # no validation features: refused


def test_comparison_shows_the_papers_trends(comparison):
    """Small k: high AUC, low D; larger k: larger D; CVAE: far from the data and useful."""
    _, _, summary = comparison
    s = {r["method"]: r for r in summary}
    assert s["original"]["D"] == 0 and s["original"]["flag_rate"] == 1.0
    assert s["2-Same"]["D"] < s["10-Same"]["D"]
    assert s["2-Same"]["auc"] > 0.9
    assert s["2-Same"]["flag_rate"] == 1.0  # a centroid of one patient's two scans is that patient
    assert s["10-Same"]["flag_rate"] < s["2-Same"]["flag_rate"]
    cvae = s["CVAE offline var 1"]
    assert cvae["D"] > s["2-Same"]["D"] and cvae["auc"] > 0.75
    assert s["CVAE online var 1"]["auc"] > 0.75
    for r in summary:  # noise on the test features never helps much
        assert r["auc_noise_3"] <= r["auc"] + 0.1


def test_comparison_is_deterministic(comparison):
    rows, _, _ = comparison
    train, centres = clusters(40, seed=10, dim=400)
    test, _ = clusters(12, seed=11, dim=400, offset=100, centres=centres)
    cfg = {**CFG, "seeds": [1]}
    again, _ = compare(train, test, cfg)
    first = [r for r in rows if r["seed"] == 1]
    assert [r["method"] for r in again] == [r["method"] for r in first]
    for a, b in zip(again, first):
        assert a["auc"] == b["auc"] and a.get("D") == b.get("D"), a["method"]


# --- params --------------------------------------------------------------------------

def test_params_refuse_a_user_dataset_without_labels(root):
    p = load_params(root / "params.yaml")
    p["anonymise"]["datasets"]["tof_demo"] = {"labels": None, "column": "x"}
    p["anonymise"]["datasets"]["nosuch"] = {"labels": "a.tsv", "column": "x"}
    with pytest.raises(ParamsError) as e:
        validate_params(p)
    assert "anonymise.datasets.tof_demo.labels: only the NCCT demo" in str(e.value)
    assert "anonymise.datasets.nosuch: 'nosuch' is not a dataset" in str(e.value)


def test_cvae_loss_sum_and_mean_are_the_definitions():
    """Di Salvo et al.'s loss, MSE + beta KL: ``mean`` averages the squared error over the D
    features (the paper's MSE), ``sum`` sums it, i.e. the mean form with beta / D."""
    import torch

    from synthaudit.anonymise.cvae import cvae_loss

    g = torch.Generator().manual_seed(0)
    x, recon = torch.randn(5, 8, generator=g), torch.randn(5, 8, generator=g)
    mu, log_var = torch.randn(5, 3, generator=g), torch.randn(5, 3, generator=g) * 0.1
    kl = -0.5 * (1 + log_var - mu ** 2 - log_var.exp()).sum(dim=1)
    sq = (recon - x) ** 2
    assert float(cvae_loss(recon, x, mu, log_var, 0.1, "mean")) == pytest.approx(float((sq.mean(1) + 0.1 * kl).mean()))
    assert float(cvae_loss(recon, x, mu, log_var, 0.1)) == pytest.approx(float((sq.sum(1) + 0.1 * kl).mean()))
    # sum with beta is D x (mean with beta / D): the same optimum, KL weighted D times less
    assert float(cvae_loss(recon, x, mu, log_var, 0.1, "sum")) == pytest.approx(
        8 * float(cvae_loss(recon, x, mu, log_var, 0.1 / 8, "mean")), rel=1e-6)
    with pytest.raises(ValueError, match="'sum' or 'mean'"):
        cvae_loss(recon, x, mu, log_var, 0.1, "median")
