"""Re-identification privacy filters: data checks, pairs, the siamese network and its
heads, training determinism and learning, calibration and the tripartite evaluation."""

import copy

import numpy as np
import pytest
import torch
import yaml

from synthaudit.config import ParamsError, validate_params
from synthaudit.privacy import filtering
from synthaudit.privacy.data import (PrivacyDataError, block_downsample, check_patients, half_split, image_input,
                                     negative_pairs, patient_split, positive_pairs)
from synthaudit.privacy.evaluate import evaluate_space
from synthaudit.privacy.metrics import roc_auc
from synthaudit.privacy.model import SiameseNetwork, embed_all, load_network, save_network, score_matrix
from synthaudit.privacy.train import network_config, pair_batches, patient_batches, train_network
from workflow_helpers import ROOT

PARAMS = yaml.safe_load((ROOT / "params.yaml").read_text())
CFG = PARAMS["privacy"]


def _cohort(n_train=6, n_held=3, scans=2, noise=0.15, shape=(8, 8, 8), seed=0):
    """Patients whose scans are noisy copies of one random pattern (easy to re-identify)."""
    rng = np.random.default_rng(seed)
    ids, patients, roles, xs = [], [], [], []
    for p in range(n_train + n_held):
        base = rng.normal(size=(1, *shape))
        for s in range(scans):
            ids.append(f"p{p:02d}_s{s}")
            patients.append(f"p{p:02d}")
            roles.append("train" if p < n_train else "heldout")
            xs.append(base + noise * rng.normal(size=base.shape))
    return np.array(xs, np.float32), ids, patients, roles


def _cfg(**training):
    cfg = copy.deepcopy(CFG)
    cfg["training"].update(training)
    cfg["network"].update(width=0.125, feature_dim=16)
    cfg["verification"]["bootstrap"]["n"] = 100
    return cfg


# ---- data -------------------------------------------------------------------------


def test_block_downsample_is_the_block_mean_with_edge_padding():
    v = np.arange(5 * 4 * 3, dtype=np.float32).reshape(5, 4, 3)
    out = block_downsample(v, 2)
    assert out.shape == (3, 2, 2)
    assert out[0, 0, 0] == pytest.approx(v[:2, :2, :2].mean())
    padded = np.pad(v, [(0, 1), (0, 0), (0, 1)], mode="edge")
    assert out[2, 1, 1] == pytest.approx(padded[4:6, 2:4, 2:4].mean())
    assert np.array_equal(block_downsample(v, 1), v)
    with pytest.raises(ValueError, match="factor must be >= 1"):
        block_downsample(v, 0)


def test_image_input_drops_singleton_axes_so_2d_images_get_a_2d_network():
    assert image_input(np.zeros((8, 6, 1)), 2).shape == (1, 4, 3)
    assert image_input(np.zeros((8, 6, 4)), 1).shape == (1, 8, 6, 4)
    with pytest.raises(PrivacyDataError, match="neither 2D nor 3D"):
        image_input(np.zeros((8, 1, 1)), 1)


def test_check_patients_refuses_data_without_re_identification_pairs():
    ids = ["a1", "b1", "c1", "c2"]
    check_patients(ids, ["a", "b", "c", "c"], ["train"] * 4, "ok")  # one two-scan patient is enough here
    with pytest.raises(PrivacyDataError, match="no training patient has two scans.*patient_id"):
        check_patients(ids, ids, ["train"] * 4, "mydata")  # manifest without patient ids: one patient per scan
    with pytest.raises(PrivacyDataError, match="scans without a patient id: \\['b1'\\]"):
        check_patients(ids, ["a", "", "c", "c"], ["train"] * 4, "mydata")
    with pytest.raises(PrivacyDataError, match="both the training and the held-out set: \\['c'\\]"):
        check_patients(ids, ["a", "b", "c", "c"], ["train", "train", "train", "heldout"], "mydata")
    with pytest.raises(PrivacyDataError, match="listed more than once: \\['a1'\\]"):
        check_patients(["a1", "a1"], ["a", "a"], ["train"] * 2, "mydata")
    with pytest.raises(PrivacyDataError, match="3 scan ids, 2 patient ids"):
        check_patients(ids[:3], ["a", "b"], ["train"] * 3, "mydata")


def test_patient_split_is_patient_wise_seeded_and_keeps_single_scan_patients_in_training():
    patients = ["a", "a", "b", "b", "c", "c", "d", "d", "e", "e", "f"]
    idx = list(range(len(patients)))
    train, val = patient_split(patients, idx, 0.4, seed=3)
    assert sorted(train + val) == idx
    assert not {patients[i] for i in train} & {patients[i] for i in val}
    assert len({patients[i] for i in val}) == 2  # round(0.4 * 5 multi-scan patients)
    assert patients.index("f") in train
    assert patient_split(patients, idx, 0.4, seed=3) == (train, val)
    with pytest.raises(PrivacyDataError, match="1 training patient\\(s\\) with two or more scans"):
        patient_split(["a", "a", "b"], [0, 1, 2], 0.2, 0)


def test_pairs_positive_complete_and_negatives_of_two_patients():
    patients = ["a", "a", "a", "b", "b", "c"]
    pos = positive_pairs(patients, range(6))
    assert sorted(map(tuple, pos.tolist())) == [(0, 1), (0, 2), (1, 2), (3, 4)]
    neg = negative_pairs(patients, range(6), 50, np.random.default_rng(0))
    assert neg.shape == (50, 2)
    assert all(patients[a] != patients[b] for a, b in neg)
    again = negative_pairs(patients, range(6), 50, np.random.default_rng(0))
    assert np.array_equal(neg, again)
    with pytest.raises(PrivacyDataError, match="at least two patients"):
        negative_pairs(["a", "a"], [0, 1], 3, np.random.default_rng(0))


def test_patient_batches_embed_each_scan_once_and_score_every_pair_of_the_batch():
    # 7 patients: five with two scans, one with three, one with one; every scan of a patient in one batch
    patients = ["a", "a", "b", "b", "c", "c", "d", "d", "e", "e", "f", "f", "f", "g"]
    train = list(range(len(patients)))
    batches = patient_batches(patients, train, 3, np.random.default_rng(4))
    assert len(batches) == 2  # round(7 / 3) groups of 4 and 3 patients
    scans = [np.unique(pairs) for pairs, _, _ in batches]
    groups = [{patients[i] for i in s} for s in scans]
    assert sorted(len(g) for g in groups) == [3, 4] and set.union(*groups) == set(patients)
    assert sorted(np.concatenate(scans).tolist()) == train  # each scan embedded once per epoch
    positives = []
    for (pairs, same, _), s in zip(batches, scans):
        assert len(pairs) == len(s) * (len(s) - 1) // 2  # every pair of the batch's scans, once
        assert all((patients[a] == patients[b]) == bool(y) for (a, b), y in zip(pairs, same))
        positives += [tuple(p) for p in pairs[same == 1].tolist()]
    assert sorted(positives) == sorted(map(tuple, positive_pairs(patients, train).tolist()))
    again = patient_batches(patients, train, 3, np.random.default_rng(4))
    assert all(np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]) for a, b in zip(batches, again))
    other = patient_batches(patients, train, 3, np.random.default_rng(5))
    assert any(not np.array_equal(a[0], b[0]) for a, b in zip(batches, other))
    # never a group of one patient (no negative pair); one group where there are only two or three
    assert len(patient_batches(patients[:6], list(range(6)), 2, np.random.default_rng(0))) == 1
    assert len(patient_batches(patients, train, 100, np.random.default_rng(0))) == 1
    with pytest.raises(PrivacyDataError, match="at least two patients"):
        patient_batches(["a", "a"], [0, 1], 2, np.random.default_rng(0))


def test_pair_batches_are_every_positive_and_ratio_times_as_many_negatives_over_all_scans():
    patients = ["a", "a", "b", "b", "c", "c"]
    pos = positive_pairs(patients, range(6))
    batches = pair_batches(patients, range(6), pos, 3, 4, np.random.default_rng(0))
    assert [len(p) for p, _, _ in batches] == [4, 4, 4]
    same = np.concatenate([s for _, s, _ in batches])
    assert same.sum() == 3 and len(same) == 12


def test_group_norm_reaches_every_residual_block():
    # MONAI's ResNet hands `norm` to its stem alone (Project-MONAI/MONAI pull request 9028)
    x = np.zeros((2, 1, 16, 16, 16), np.float32)
    for norm, kind in (("group", torch.nn.GroupNorm), ("batch", torch.nn.BatchNorm3d)):
        model = SiameseNetwork(network_config(CFG["network"] | {"norm": norm}, "verification", x))
        norms = [m for m in model.modules() if isinstance(m, (torch.nn.GroupNorm, torch.nn.modules.batchnorm._BatchNorm))]
        assert len(norms) == 12 and all(type(m) is kind for m in norms), norms  # stem, 2 per block, 3 shortcuts


def _monai_resnet(layers, dims, width, stem_stride, norm):
    """MONAI's own ResNet, its blocks' batch norms replaced where ``norm`` is group."""
    from monai.networks.nets import ResNet
    from monai.networks.nets.resnet import ResNetBlock

    net = ResNet(ResNetBlock, layers, [64, 128, 256, 512], spatial_dims=dims, n_input_channels=1, num_classes=16,
                 widen_factor=width, conv1_t_stride=stem_stride,
                 norm=("group", {"num_groups": 8}) if norm == "group" else "batch")

    def swap(module):
        for name, child in module.named_children():
            if isinstance(child, torch.nn.modules.batchnorm._BatchNorm) and norm == "group":
                setattr(module, name, torch.nn.GroupNorm(8, child.num_features))
            else:
                swap(child)

    swap(net)
    return net


@pytest.mark.parametrize("layers,dims,width,stem_stride,norm", [
    ([1, 1, 1, 1], 3, 0.25, 2, "group"), ([2, 2, 2, 2], 3, 0.125, 1, "batch"), ([1, 1, 1, 1], 2, 0.25, 2, "group")])
def test_the_backbone_is_monai_s_resnet_weight_for_weight_and_bit_for_bit(layers, dims, width, stem_stride, norm):
    from synthaudit.privacy.resnet import ResNet

    torch.manual_seed(3)
    theirs = _monai_resnet(layers, dims, width, stem_stride, norm)
    torch.manual_seed(3)
    ours = ResNet(layers, dims, 1, 16, width, stem_stride, norm)
    a, b = theirs.state_dict(), ours.state_dict()
    assert list(a) == list(b)
    assert all(torch.equal(a[k], b[k]) for k in a)
    x = torch.from_numpy(np.random.default_rng(0).normal(size=(3, 1) + (24,) * dims).astype(np.float32))
    for mode in ("train", "eval"):
        getattr(theirs, mode)(), getattr(ours, mode)()
        assert torch.equal(theirs(x), ours(x)), mode


def test_half_split_puts_the_first_sessions_in_the_reference_pool():
    assert half_split(["p1_fu", "p1_bl"]) == (["p1_bl"], ["p1_fu"])
    assert half_split(["c", "a", "b"]) == (["a"], ["b", "c"])


# ---- network -----------------------------------------------------------------------


def test_score_heads_match_their_definitions():
    x = np.zeros((3, 1, 8, 8, 8), np.float32)
    model = SiameseNetwork(network_config({"backbone": "resnet10", "feature_dim": 6, "width": 0.125, "stem_stride": 2, "norm": "group"},
                                          "verification", x))
    g = torch.Generator().manual_seed(0)
    fa, fb = torch.randn(4, 6, generator=g), torch.randn(5, 6, generator=g)
    # a verification network compares the sigmoids of its backbone outputs (what its head merges)
    sa, sb = torch.sigmoid(fa).numpy(), torch.sigmoid(fb).numpy()
    corr = score_matrix(model, fa, fb, "corr").numpy()
    assert corr[1, 2] == pytest.approx(np.corrcoef(sa[1], sb[2])[0, 1], abs=1e-5)
    l2 = score_matrix(model, fa, fb, "l2").numpy()
    assert l2[3, 4] == pytest.approx(-np.linalg.norm(sa[3] - sb[4]), rel=1e-5)
    l1 = score_matrix(model, fa, fb, "l1").numpy()
    assert l1[0, 0] == pytest.approx(-np.abs(sa[0] - sb[0]).mean(), rel=1e-5)
    pred = score_matrix(model, fa, fb, "pred", chunk=2).numpy()
    with torch.no_grad():
        direct = torch.sigmoid(model.pair_logits(fa[[2]], fb[[1]])).item()
    assert pred[2, 1] == pytest.approx(direct, rel=1e-5)
    assert ((pred > 0) & (pred < 1)).all()
    retrieval = SiameseNetwork(network_config({"backbone": "resnet10", "feature_dim": 6, "width": 0.125, "stem_stride": 2, "norm": "group"},
                                              "retrieval", x))
    with pytest.raises(ValueError, match="trained for retrieval"):
        score_matrix(retrieval, fa, fb, "pred")
    # a retrieval (contrastive) network compares its raw outputs, whose distance its loss shaped
    corr = score_matrix(retrieval, fa, fb, "corr").numpy()
    assert corr[1, 2] == pytest.approx(np.corrcoef(fa[1].numpy(), fb[2].numpy())[0, 1], abs=1e-5)
    l2 = score_matrix(retrieval, fa, fb, "l2").numpy()
    assert l2[3, 4] == pytest.approx(-np.linalg.norm(fa[3].numpy() - fb[4].numpy()), rel=1e-5)
    with pytest.raises(ValueError, match="score head 'cos'"):
        score_matrix(model, fa, fb, "cos")


def test_pretrained_features_train_only_the_replaced_last_layer():
    # the pretrained space: (N, F) frozen encoder features; the filter is Linear(F -> feature_dim)
    # and Packhäuser's pair head, trained as in the image space
    rng = np.random.default_rng(4)
    patterns = rng.normal(size=(16, 64))
    x = np.concatenate([patterns + 0.2 * rng.normal(size=patterns.shape) for _ in range(2)]).astype(np.float32)
    patients = [f"p{i:02d}" for i in range(16)] * 2
    ids = [f"{p}_s{k}" for k in range(2) for p in patients[:16]]
    roles = ["train" if int(p[1:]) < 10 else "heldout" for p in patients]
    tr, va = patient_split(patients, [i for i, r in enumerate(roles) if r == "train"], 0.2, 0)
    cfg = _cfg(epochs=15, patience=15, learning_rate=0.01, batch_pairs=8, negatives_per_positive=3)
    model, _ = train_network(x, patients, tr, va, cfg["network"], cfg["training"], seed=0, device="cpu")
    assert model.config["backbone"] == "linear" and model.config["spatial_dims"] == 0
    assert isinstance(model.backbone, torch.nn.Linear) and model.backbone.in_features == 64
    held = [i for i, r in enumerate(roles) if r == "heldout"]
    feats = embed_all(model, x, torch.device("cpu"))
    pairs, same = filtering.verification_pairs(ids, patients, held)
    assert roc_auc(score_matrix(model, feats, feats, "pred").numpy()[pairs[:, 0], pairs[:, 1]], same) >= 0.9
    with pytest.raises(PrivacyDataError, match="got shape"):
        network_config(cfg["network"], "verification", x[:, :, None])


def test_a_2d_dataset_gets_a_2d_backbone():
    x = np.random.default_rng(0).normal(size=(4, 1, 16, 16)).astype(np.float32)
    model = SiameseNetwork(network_config(CFG["network"] | {"width": 0.125}, "verification", x))
    assert embed_all(model, x, torch.device("cpu")).shape == (4, CFG["network"]["feature_dim"])


def test_training_is_deterministic_for_a_seed():
    x, ids, patients, roles = _cohort(n_train=6, n_held=2)
    tr, va = patient_split(patients, [i for i, r in enumerate(roles) if r == "train"], 0.25, 0)
    cfg = _cfg(epochs=2, patience=2)
    m1, h1 = train_network(x, patients, tr, va, cfg["network"], cfg["training"], seed=5, device="cpu")
    m2, h2 = train_network(x, patients, tr, va, cfg["network"], cfg["training"], seed=5, device="cpu")
    assert [r["loss"] for r in h1] == [r["loss"] for r in h2]
    for a, b in zip(m1.state_dict().values(), m2.state_dict().values()):
        assert torch.equal(a, b)
    _, h3 = train_network(x, patients, tr, va, cfg["network"], cfg["training"], seed=6, device="cpu")
    assert [r["loss"] for r in h3] != [r["loss"] for r in h1]
    assert sum(r["best"] for r in h1) == 1 and all(r["seconds"] > 0 for r in h1)


@pytest.mark.slow
def test_training_learns_to_re_identify_unseen_patients():
    # 8 held-out patients (8 positive, 112 negative pairs). One training's AUC is a draw: over seeds 0-4
    # (one thread, 2026-12-07, batches of patients) it was 0.78-0.94, median 0.86, so the test judges the
    # median of five seeds, as the metrics report a spread. 16^3 voxels: at 8^3 the last blocks' GroupNorm
    # normalises 1-4 values a group
    x, ids, patients, roles = _cohort(n_train=8, n_held=8, shape=(16, 16, 16))
    tr, va = patient_split(patients, [i for i, r in enumerate(roles) if r == "train"], 0.25, 0)
    cfg = _cfg(epochs=12, patience=12, learning_rate=0.01, batch_pairs=4, negatives_per_positive=3)
    held = [i for i, r in enumerate(roles) if r == "heldout"]
    pairs, same = filtering.verification_pairs(ids, patients, held)
    aucs = []
    for seed in range(5):
        model, history = train_network(x, patients, tr, va, cfg["network"], cfg["training"], seed=seed, device="cpu")
        assert min(r["loss"] for r in history) < 0.75 * history[0]["loss"], history
        # verification on held-out patients: scans of one patient score higher than scans of two
        feats = embed_all(model, x, torch.device("cpu"))
        aucs.append(roc_auc(score_matrix(model, feats, feats, "pred").numpy()[pairs[:, 0], pairs[:, 1]], same))
    assert np.median(aucs) >= 0.8, aucs


def test_network_files_remember_their_input_space(tmp_path):
    x = np.zeros((2, 3, 6, 6, 6), np.float32)
    model = SiameseNetwork(network_config({"backbone": "resnet10", "feature_dim": 8, "width": 0.125, "stem_stride": 2, "norm": "group"},
                                          "verification", x))
    space = {"space": "latent", "key": "latent/ncct_ldm/abc"}
    save_network(tmp_path / "f.pt", model, [], space)
    loaded, meta = load_network(tmp_path / "f.pt", space)
    assert meta["key"] == "latent/ncct_ldm/abc"
    for a, b in zip(loaded.state_dict().values(), model.state_dict().values()):
        assert torch.equal(a, b)
    with pytest.raises(ValueError, match="trained in latent space .* inputs are in image space"):
        load_network(tmp_path / "f.pt", {"space": "image", "key": "image/downsample3/31x37x31"})
    with pytest.raises(ValueError, match="autoencoder|latent/ncct_ldm/abc"):
        load_network(tmp_path / "f.pt", {"space": "latent", "key": "latent/ncct_ldm/other"})
    (tmp_path / "junk.pt").write_bytes(b"not a model")
    with pytest.raises(ValueError, match="not a privacy filter saved by synthaudit"):
        load_network(tmp_path / "junk.pt")
    with pytest.raises(FileNotFoundError):
        load_network(tmp_path / "missing.pt")


# ---- calibration and the tripartite evaluation ---------------------------------------


def test_calibration_is_the_percentile_of_best_scores_in_either_direction():
    s = np.array([[0.1, 0.9, 0.2], [0.5, 0.3, 0.4], [0.2, 0.2, 0.8], [0.6, 0.1, 0.0]])
    assert filtering.calibrate(s, "heldout_to_training", 50) == pytest.approx(np.percentile([0.9, 0.5, 0.8, 0.6], 50))
    assert filtering.calibrate(s, "training_to_heldout", 100) == pytest.approx(0.9)
    assert filtering.calibrate(s, "training_to_heldout", 0) == pytest.approx(0.6)
    lopo = filtering.leave_one_patient_out(s, ["h1", "h1", "h2", "h2"], "heldout_to_training", 100)
    assert lopo == {"h1": pytest.approx(0.8), "h2": pytest.approx(0.9)}
    with pytest.raises(ValueError, match="direction 'both'"):
        filtering.calibrate(s, "both", 95)
    with pytest.raises(ValueError, match="at least two held-out patients"):
        filtering.leave_one_patient_out(s, ["h"] * 4, "heldout_to_training", 95)


def test_corr_filter_reproduces_the_echonet_synthetic_filter_koeken_evaluated():
    """Reynaud et al.'s apply.py (github.com/HReynaud/EchoNet-Synthetic, echosyn/privacy), the
    protocol Koeken et al. followed: features are forward_once = sigmoid(backbone(x)); tau is
    the 95th percentile (np.percentile) over training images of their best torch.corrcoef with
    the held-out images; a synthetic image's score is its best corrcoef with a training image."""
    x = np.zeros((3, 1, 8, 8, 8), np.float32)
    model = SiameseNetwork(network_config({"backbone": "resnet10", "feature_dim": 12, "width": 0.125,
                                           "stem_stride": 2, "norm": "group"}, "verification", x))
    g = torch.Generator().manual_seed(3)
    f_train, f_held, f_syn = (torch.randn(n, 12, generator=g) for n in (9, 5, 4))
    # the reference, as written there: one corrcoef over the stacked sigmoid features
    lat_train, lat_held, lat_syn = torch.sigmoid(f_train), torch.sigmoid(f_held), torch.sigmoid(f_syn)
    tv = torch.corrcoef(torch.cat([lat_train, lat_held]))
    closest_train = [tv[i, len(lat_train):].max() for i in range(len(lat_train))]
    tau_ref = np.percentile(torch.stack(closest_train).numpy(), 95)
    ts = torch.corrcoef(torch.cat([lat_train, lat_syn]))
    best_ref = np.array([ts[len(lat_train) + i, :len(lat_train)].max().item() for i in range(len(lat_syn))])
    # synthaudit with head corr, direction training_to_heldout, percentile 95
    tau = filtering.calibrate(score_matrix(model, f_held, f_train, "corr").numpy(), "training_to_heldout", 95)
    dec = filtering.decide(score_matrix(model, f_syn, f_train, "corr").numpy(), tau,
                           [f"t{i}" for i in range(9)], [f"p{i}" for i in range(9)])
    assert tau == pytest.approx(float(tau_ref), abs=1e-5)
    np.testing.assert_allclose(dec["best"], best_ref, atol=1e-5)


def test_decide_flags_above_tau_and_attributes_the_best_match():
    s = np.array([[0.2, 0.95, 0.1], [0.3, 0.2, 0.5]])
    d = filtering.decide(s, 0.9, ["t0", "t1", "t2"], ["A", "B", "B"])
    assert d["flagged"].tolist() == [True, False]
    assert d["match"].tolist() == ["t1", "t2"] and d["patient"].tolist() == ["B", "B"]


def test_sensitivity_pools_separate_recognition_from_spurious_matches():
    # two training patients (A, B), two held-out patients (H, K), two scans each
    ids = ["A_1", "A_2", "B_1", "B_2", "H_1", "H_2", "K_1", "K_2"]
    patients = [i[0] for i in ids]
    roles = ["train"] * 4 + ["heldout"] * 4
    r = np.full((8, 8), 0.1)
    r[5, 4] = 0.4   # H_2 vs its own reference H_1: below tau
    r[5, 0] = 0.9   # ... but very like training scan A_1: a spurious match
    r[7, 6] = 0.8   # K_2 recognised by K_1
    out = filtering.sensitivity(r, ids, patients, roles, "heldout", 0.5)
    assert out["flag_rate_overall"] == 1.0
    assert out["flag_rate_same_patient_max"] == 0.5 and out["flag_rate_same_patient_mean"] == 0.5
    assert out["attribution_correct"] == 0.5  # H_2 goes to A
    assert out["n_pool"] == 6 and out["n_presented"] == 2
    r[3, 2] = 0.7   # training patient B re-identified; A_2 not, and closer to B_1 than to A_1
    r[1, 2] = 0.3
    tr = filtering.sensitivity(r, ids, patients, roles, "train", {"A": 0.5, "B": 0.5})
    assert tr["flag_rate_overall"] == 0.5 and tr["attribution_correct"] == 0.5 and tr["n_pool"] == 2
    assert filtering.sensitivity(r, ids, patients, ["train"] * 8, "heldout", 0.5) is None


def test_specificity_uses_leave_one_patient_out_thresholds():
    ht = np.array([[0.9, 0.1], [0.2, 0.3], [0.4, 0.1]])
    lopo = filtering.leave_one_patient_out(ht, ["h1", "h2", "h3"], "heldout_to_training", 100)
    out = filtering.specificity(ht, ["h1", "h2", "h3"], tau=0.9, lopo=lopo)
    # h1 (0.9) beats the others' max 0.4; h2 (0.3) and h3 (0.4) stay below 0.9
    assert out["flag_rate"] == pytest.approx(1 / 3) and out["specificity"] == pytest.approx(2 / 3)
    assert out["flag_rate_calibration_tau"] == 0.0


def test_near_duplicates_count_flags_and_right_attributions():
    truth = [{"kind": "replica", "source_patient": "A"}, {"kind": "replica", "source_patient": "B"},
             {"kind": "nonreplica", "source_patient": "H"}]
    out = filtering.near_duplicates([True, True, True], ["A", "A", "B"], truth)
    assert out["replica_flag_rate"] == 1.0 and out["replica_attribution_correct"] == 0.5
    assert out["replica_flagged_and_attributed"] == 0.5 and out["nonreplica_flag_rate"] == 1.0


def test_non_replicas_from_held_out_scans_are_judged_without_their_patient():
    truth = [{"kind": "replica", "source_patient": "A"}, {"kind": "nonreplica", "source_patient": "H1"},
             {"kind": "nonreplica", "source_patient": "H2"}, {"kind": "nonreplica", "source_patient": "new"}]
    best = [0.9, 0.8, 0.8, 0.8]
    flags = filtering.truth_flags(best, truth, tau=0.85, lopo={"H1": 0.7, "H2": 0.95})
    assert flags.tolist() == [True, True, False, False]  # H1's own scan set the overall tau above it
    assert filtering.truth_flags(best, truth, tau=0.75, lopo=None).tolist() == [True, True, True, True]


def test_balanced_pairs_keep_every_positive_and_as_many_seeded_negatives():
    same = np.array([True, False, False, True, False, False, False, False, False, True])
    keep = filtering.balanced_pairs(same, seed=3)
    assert same[keep].sum() == 3 and (~same[keep]).sum() == 3 and list(keep) == sorted(keep)
    np.testing.assert_array_equal(keep, filtering.balanced_pairs(same, seed=3))
    assert not np.array_equal(keep, filtering.balanced_pairs(same, seed=4))
    few_negatives = np.array([True, True, False])
    assert filtering.balanced_pairs(few_negatives, 0).tolist() == [0, 1, 2]


@pytest.mark.slow  # a training that must learn (about 40 s); make test's demo runs evaluate_space itself
def test_evaluate_space_end_to_end_on_an_easy_cohort():
    # scan noise 0.05 of the pattern's spread: re-identification is easy (AUC 0.88-1.0 for filter seeds 0-5 on
    # one thread, 1.0 for seed 0). 16^3 voxels: at 8^3 the last blocks' GroupNorm sees 1-4 values a group
    x, ids, patients, roles = _cohort(n_train=8, n_held=4, noise=0.05, shape=(16, 16, 16))
    train_rows = [i for i, r in enumerate(roles) if r == "train"]
    tr, va = patient_split(patients, train_rows, 0.25, 0)
    cfg = _cfg(epochs=8, patience=8, learning_rate=0.003, batch_pairs=4, negatives_per_positive=3)
    filters = [train_network(x, patients, tr, va, cfg["network"], cfg["training"], seed=s, device="cpu")[0]
               for s in (0, 1)]
    retrieval = train_network(x, patients, tr, va, cfg["network"], cfg["training"] | {"epochs": 6},
                              objective="retrieval", device="cpu")[0]
    rng = np.random.default_rng(9)
    # replicas: training scans with a little noise; novel: new random patterns
    syn = np.concatenate([x[[0, 2, 4]] + 0.05 * rng.normal(size=x[[0, 2, 4]].shape),
                          rng.normal(size=(3, *x.shape[1:]))]).astype(np.float32)
    truth = {"gen": {f"s{i}": {"kind": "replica" if i < 3 else "nonreplica",
                               "source_patient": patients[2 * i] if i < 3 else "new"} for i in range(6)}}
    out = evaluate_space({"x": x, "ids": ids, "patients": patients, "roles": roles},
                         {"x": syn, "ids": [f"s{i}" for i in range(6)], "datasets": ["gen"] * 6},
                         filters, retrieval, cfg, truth=truth)
    s = out["summary"]
    assert s["verification"]["auc"] >= 0.9 and s["retrieval"]["precision_at_1"] >= 0.75
    bal = s["verification_balanced"]  # 4 held-out patients: 4 positive pairs, 4 of the 24 negatives
    assert bal["n_positive"] == bal["n_negative"] == 4 and s["verification"]["n_negative"] == 24
    assert "equal-size" in bal["pairs"] and bal["auc"] >= 0.75
    assert len(s["tau_per_filter"]) == 2 and s["tau"] == s["tau_per_filter"][0]
    rows = out["decisions"]
    assert [r["id"] for r in rows] == [f"s{i}" for i in range(6)]
    for r in rows:
        assert (r["decision"] == "flagged") == (r["best_score"] > s["tau"])
        assert r["attributed_patient"] in set(patients[:16])
    nd = s["synthetic"]["gen"]["near_duplicates"]
    assert nd["replica_flag_rate"] == 1.0 and nd["replica_attribution_correct"] == 1.0
    assert nd["nonreplica_flag_rate"] < nd["replica_flag_rate"]
    c = s["synthetic"]["gen"]["consistency"]
    assert c["n_filters"] == 2 and sum(c["decision_histogram"].values()) == 6
    rec = s["synthetic"]["gen"]["recall"]
    n_flagged = sum(r["decision"] == "flagged" for r in rows)
    assert rec["memorised_fraction"] == pytest.approx(n_flagged / 6)
    assert rec["learned_but_memorised"] >= 3  # the replicas' sources: nearest and flagged
    # Dombrowski et al.'s count: learned through flagged volumes only, so learned = it + learned after filtering
    assert 0 <= rec["learned_only_by_memorised"] <= rec["learned_but_memorised"]
    assert rec["learned_fraction"] * 16 == pytest.approx(rec["learned_only_by_memorised"] + rec["learned_not_memorised"])
    assert s["sensitivity"]["heldout_patients"]["n_presented"] == 4
    # every filter's headline numbers, for their spread over seeds; filter 0's are the summary's own
    f0, f1 = s["per_filter"]
    assert f0["verification_auc"] == s["verification"]["auc"] and f0["specificity"] == s["specificity"]["specificity"]
    assert f0["auc_by_head"] == s["verification"]["auc_by_head"]
    assert f0["sensitivity_heldout"] == s["sensitivity"]["heldout_patients"]["flag_rate_overall"]
    assert f0["synthetic"]["gen"] == {"flag_rate": s["synthetic"]["gen"]["flag_rate"], "replica_flag_rate": 1.0}
    assert f1["tau"] == s["tau_per_filter"][1] and 0.0 <= f1["synthetic"]["gen"]["flag_rate"] <= 1.0
    # the filter as a membership attacker (issue 64): every real scan's best score against the set's samples; a
    # training scan's best equals its decision's match where it is that sample's best training scan
    mem = out["membership"]
    assert [r["id"] for r in mem] == ids and {r["dataset"] for r in mem} == {"gen"}
    best_of = {r["id"]: r["best_score"] for r in mem}
    for r in rows:
        assert best_of[r["match"]] >= r["best_score"] - 1e-6


def test_contrastive_filters_scored_by_correlation_evaluate_end_to_end():
    # Koeken et al.'s text: a contrastive encoder, Pearson correlation, tau from training to held-out
    x, ids, patients, roles = _cohort(n_train=8, n_held=4, noise=0.05, shape=(16, 16, 16))
    tr, va = patient_split(patients, [i for i, r in enumerate(roles) if r == "train"], 0.25, 0)
    cfg = _cfg(epochs=6, patience=6, learning_rate=0.003, batch_pairs=4, negatives_per_positive=3)
    cfg["filter_objective"] = "retrieval"
    cfg["calibration"].update(head="corr", direction="training_to_heldout")
    filters = [train_network(x, patients, tr, va, cfg["network"], cfg["training"], objective="retrieval",
                             seed=s, device="cpu")[0] for s in (0, 1)]
    rng = np.random.default_rng(9)
    syn = np.concatenate([x[[0, 2, 4]] + 0.05 * rng.normal(size=x[[0, 2, 4]].shape),
                          rng.normal(size=(3, *x.shape[1:]))]).astype(np.float32)
    out = evaluate_space({"x": x, "ids": ids, "patients": patients, "roles": roles},
                         {"x": syn, "ids": [f"s{i}" for i in range(6)], "datasets": ["gen"] * 6},
                         filters, None, cfg)
    s = out["summary"]
    v = s["verification"]
    assert v["score_head"] == "corr" and "pred" not in v["auc_by_head"]
    assert v["auc"] == v["auc_by_head"]["corr"] and v["auc"] >= 0.9
    assert v["threshold"] == s["tau"]  # no probability: the decision threshold is the calibrated tau
    assert all(f["verification_auc"] is not None for f in s["per_filter"])
    feats = embed_all(filters[0], x, torch.device("cpu"))
    held, train = [i for i, r in enumerate(roles) if r == "heldout"], [i for i, r in enumerate(roles) if r == "train"]
    c = np.corrcoef(feats.numpy())  # raw features: the contrastive loss shaped their distances
    assert s["tau"] == pytest.approx(float(np.percentile(c[np.ix_(train, held)].max(axis=1), 95)), abs=1e-5)
    assert [r["id"] for r in out["decisions"]][:3] == ["s0", "s1", "s2"]
    assert all(r["decision"] == "flagged" for r in out["decisions"][:3])


# ---- params ----------------------------------------------------------------------


def _error(p):
    with pytest.raises(ParamsError) as e:
        validate_params(p)
    return str(e.value)


def test_params_refuse_privacy_settings_that_cannot_work():
    p = copy.deepcopy(PARAMS)
    p["privacy"]["training_sets"] = ["nope"]
    assert "privacy.training_sets: 'nope' is not a dataset" in _error(p)
    p = copy.deepcopy(PARAMS)
    p["privacy"]["training_sets"] = ["ncct_ldm"]
    assert "'ncct_ldm' takes its training set from 'ncct_demo'" in _error(p)
    p = copy.deepcopy(PARAMS)
    p["privacy"]["latent_autoencoder"] = None
    assert "the latent space needs a generator" in _error(p)
    p = copy.deepcopy(PARAMS)
    p["privacy"]["latent_autoencoder"] = "ncct_demo"
    assert "only an in-workflow generator (ldm) has an autoencoder" in _error(p)
    p = copy.deepcopy(PARAMS)
    p["privacy"]["training_sets"] = ["tof_demo"]
    assert "'ncct_ldm' learns from 'ncct_demo', which is not in privacy.training_sets" in _error(p)
    p = copy.deepcopy(PARAMS)
    p["privacy"]["calibration"]["head"] = "cosine"
    assert "privacy.calibration.head" in _error(p)
    p["privacy"]["calibration"]["head"] = "pred"
    p["privacy"]["filter_objective"] = "retrieval"
    assert "filter_objective retrieval trains no pair head" in _error(p)
    p["privacy"]["filter_objective"] = "verification"
    p["privacy"]["spaces"] = ["image"]
    p["privacy"]["latent_autoencoder"] = None
    validate_params(p)


def test_positive_pairs_weigh_as_many_negatives_as_are_drawn_per_positive():
    from synthaudit.privacy.train import pair_loss

    x = np.zeros((2, 1, 8, 8, 8), np.float32)
    model = SiameseNetwork(network_config({"backbone": "resnet10", "feature_dim": 4, "width": 0.125,
                                           "stem_stride": 2, "norm": "group"}, "verification", x))
    feats = torch.randn(4, 4, generator=torch.Generator().manual_seed(1))
    pairs = torch.tensor([[0, 1], [2, 3], [0, 3], [1, 2]])
    same = torch.tensor([1.0, 0.0, 0.0, 0.0])
    with torch.no_grad():
        p = torch.sigmoid(model.pair_logits(feats[pairs[:, 0]], feats[pairs[:, 1]]))
        expected = (-3 * torch.log(p[0]) - torch.log(1 - p[1:]).sum()) / 4
        assert pair_loss(model, feats, pairs, same, 1.0, positive_weight=3.0).item() == pytest.approx(expected.item(), rel=1e-5)
    retrieval = SiameseNetwork(model.config | {"objective": "retrieval"})
    d = torch.linalg.norm(feats[pairs[:, 0]] - feats[pairs[:, 1]], dim=1)
    contrastive = (d[0] ** 2 + (torch.clamp(1.0 - d[1:], min=0) ** 2).sum()) / 4 / 2
    assert pair_loss(retrieval, feats, pairs, same, 1.0).item() == pytest.approx(contrastive.item(), rel=1e-4)
