"""The 2.5D slice-wise FD (synthaudit.fidelity.slices) against NV-Generate-CTMR's protocol
(scripts/compute_fid_2-5d_ct.py: get_features_2p5d, radimagenet_intensity_normalisation, MONAI's
FIDMetric, which tests/test_fidelity.py shows equal to the Fréchet distance), its steps re-typed here from the script, on a trunk with seeded random weights (the
pretrained file is in no package these machines reach)."""

from __future__ import annotations

import copy

import nibabel as nib
import numpy as np
import pytest
import torch

from synthaudit.fidelity import slices as S


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    torch.manual_seed(0)
    net = S._trunk()
    for m in net.modules():  # batch-norm statistics away from (0, 1), as trained weights have
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.1, 0.1)
            m.running_var.uniform_(0.5, 1.5)
    path = tmp_path_factory.mktemp("radimagenet") / "RadImageNet-ResNet50_notop.pth"
    torch.save(net.state_dict(), path)
    return path


def _volumes(tmp_path, name, n, scale, rng):
    from scipy.ndimage import gaussian_filter

    paths = []
    for i in range(n):
        v = gaussian_filter(rng.normal(size=(16, 14, 12)), 1.5) * 300 * scale - 200
        p = tmp_path / f"{name}{i}.nii.gz"
        nib.save(nib.Nifti1Image(v.astype(np.float32), np.diag([-1.5, 1.5, 1.5, 1.0])), p)  # LAS on disk
        paths.append(p)
    return paths


def _theirs(net, volume_ras: np.ndarray, center_ratio=None):
    """get_features_2p5d(image, net, center_slices, center_slices_ratio, xy_only=False) as the script
    writes it, on one (B=1, C=1, H, W, D) volume: channel repeat, BGR swap, slices, min-max over each
    plane's 4D stack, ImageNet means subtracted per channel, the network, the spatial average."""
    image = torch.from_numpy(volume_ras)[None, None].repeat(1, 3, 1, 1, 1)[:, [2, 1, 0], ...]
    _, _, h, w, d = image.shape
    out = []
    for dim, n in ((-1, d), (2, h), (3, w)):
        if center_ratio:
            start, end = int((1.0 - center_ratio) / 2.0 * n), int((1.0 + center_ratio) / 2.0 * n)
            image_sel = image.narrow(dim if dim > 0 else 4, start, end - start)
        else:
            image_sel = image
        stack = torch.cat(torch.unbind(image_sel, dim=dim), dim=0)
        stack = (stack - stack.min()) / (stack.max() - stack.min() + 1e-10)
        for c, mean in enumerate([0.406, 0.456, 0.485]):
            stack[:, c] -= mean
        with torch.no_grad():
            out.append(net(stack).mean([2, 3]).double().numpy())
    return out  # xy, yz, zx


@pytest.mark.slow  # the reference script compared (36 s); the quick audit test below runs the same extraction
def test_slice_features_and_the_fd_follow_nv_generate_ctmrs_script(weights, tmp_path):
    from synthaudit.fidelity.measures import frechet_distance

    rng = np.random.default_rng(3)
    real, synth = _volumes(tmp_path, "r", 2, 1.0, rng), _volumes(tmp_path, "s", 2, 1.4, rng)
    net = S.load_encoder(weights)
    for ratio in (None, 0.5):
        ours = {name: S.extract(paths, net, [-1000, 1000], ratio) for name, paths in (("r", real), ("s", synth))}
        theirs = {"r": [[], [], []], "s": [[], [], []]}
        for name, paths in (("r", real), ("s", synth)):
            for p in paths:
                v = np.clip(np.asarray(nib.as_closest_canonical(nib.load(p)).dataobj, np.float32), -1000, 1000)
                for k, rows in enumerate(_theirs(net, v, ratio)):
                    theirs[name][k].append(rows)
        for k, plane in enumerate(S.PLANES):
            for name in ("r", "s"):
                for a, b in zip(ours[name][plane], theirs[name][k]):
                    assert a.shape == b.shape and np.allclose(a, b, rtol=1e-5, atol=1e-6)
        result = S.fd_2p5d(ours["r"], ours["s"])
        # their FIDMetric per plane, as the Fréchet distance (equal to FIDMetric on every input,
        # tests/test_fidelity.py; FIDMetric's 2048 x 2048 matrix square root costs ~10 s here)
        per_plane = [frechet_distance(np.concatenate(theirs["r"][k]), np.concatenate(theirs["s"][k])) for k in range(3)]
        for k, plane in enumerate(S.PLANES):
            assert result[f"fd_2p5d_{plane}"] == pytest.approx(per_plane[k], rel=1e-4)  # features equal to float32 rounding
        assert result["fd_2p5d"] == pytest.approx(np.mean(per_plane), rel=1e-4)
    # every slice of a 16 x 14 x 12 RAS volume: 12 axial, 16 sagittal, 14 coronal; the central half: 6, 8, 7
    assert [len(ours["r"][p][0]) for p in S.PLANES] == [6, 8, 7]
    assert [len(r) for r in S.extract(real[:1], net, None, None).values()] == [1, 1, 1]
    assert S.extract(real[:1], net, None, None)["xy"][0].shape == (12, 2048)
    # a bootstrap replicate's volumes, repeats counted
    rep = S.fd_2p5d(ours["r"], ours["s"], t=[0, 0, 1], o=[1, 1, 0])
    a = np.concatenate([ours["r"]["yz"][i] for i in (0, 0, 1)])
    b = np.concatenate([ours["s"]["yz"][i] for i in (1, 1, 0)])
    assert rep["fd_2p5d_yz"] == pytest.approx(frechet_distance(a, b), rel=1e-12)
    # stored and read back in another order
    S.save(tmp_path / "f.npz", ["a", "b"], ours["s"])
    back = S.load(tmp_path / "f.npz", ["b", "a"])
    assert all(np.array_equal(back[p][0], ours["s"][p][1]) for p in S.PLANES)
    with pytest.raises(ValueError, match="no slice features for 1 volume"):
        S.load(tmp_path / "f.npz", ["z"])


def test_weights_of_another_network_or_no_file_are_refused_naming_the_file(weights, tmp_path):
    with pytest.raises(FileNotFoundError, match="nothere.pth: no such file"):
        S.load_encoder(tmp_path / "nothere.pth")
    state = torch.load(weights, weights_only=True)
    wrong = {k.replace("layer4", "layer5"): v for k, v in state.items()}
    torch.save(wrong, tmp_path / "other.pth")
    with pytest.raises(ValueError, match="other.pth: not RadImageNet's ResNet-50 weights"):
        S.load_encoder(tmp_path / "other.pth")
    # the layout of the converted Keras weights (Warvito/radimagenet-models): biased convolutions
    assert "layer1.0.conv1.bias" in state and "layer2.0.downsample.0.bias" in state and "fc.weight" not in state
    assert len(state) == 371  # 53 convolutions x 2 (weight, bias) + 53 batch norms x 5 (their state dict's size)


def test_audit_reports_the_2p5d_fd_with_its_ci_and_floor(weights, tmp_path):
    from dataclasses import replace

    from synthaudit.fidelity.audit import audit, summary_lines
    from synthaudit.fidelity.metrics import metrics_entry
    from test_fidelity import SETTINGS, _embedded

    rng = np.random.default_rng(5)
    net = S.load_encoder(weights)
    sets = {name: S.extract(_volumes(tmp_path, name, n, scale, rng), net, None, None)
            for name, n, scale in (("t", 6, 1.0), ("h", 4, 1.0), ("s", 4, 3.0))}
    emb = {name: _embedded(rng, n, 5, [f"{name}{k // 2}" for k in range(n)]) for name, n in (("t", 6), ("h", 4), ("s", 4))}
    settings = copy.deepcopy(SETTINGS)
    settings["bootstrap"]["n"] = 20
    settings["prdc_k"], settings["c_t"]["pca_components"] = 2, 3
    f = audit(*(replace(emb[k], slices=sets[k]) for k in ("t", "h", "s")), settings, "test", "none")
    v, floor = f["synthetic"]["fd_2p5d"], f["floor"]["fd_2p5d"]
    assert v["ci"][0] <= v["value"] <= v["ci"][1] and v["n_replicates"] == 20
    assert v["value"] == pytest.approx(S.fd_2p5d(sets["t"], sets["s"])["fd_2p5d"], rel=1e-12)
    assert v["value"] > floor["value"]  # the samples' contrast is not the scans'
    assert f["fd_2p5d"]["slices"]["synthetic"] == {"xy": 4 * 12, "yz": 4 * 16, "zx": 4 * 14}
    assert any(line.strip().startswith("2.5D FD (RadImageNet ResNet-50, mean of 3 planes):") for line in summary_lines(f))
    assert metrics_entry(f)["fd_2p5d_xy"]["floor"] == pytest.approx(f["floor"]["fd_2p5d_xy"]["value"], rel=1e-5)
    plain = audit(emb["t"], emb["h"], emb["s"], settings, "test", "none")
    assert "fd_2p5d" not in plain["synthetic"] and plain["fd_2p5d"] is None
