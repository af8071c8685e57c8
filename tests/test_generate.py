"""Latent diffusion model: padding, training, exact resumption, sampling, saving; tiny shapes on the CPU.

The volumes (15 x 17 x 9) are deliberately not multiples of the networks' downsampling,
so padding and cropping are exercised everywhere.
"""

import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

from synthaudit.generate import ldm

SHAPE = (15, 17, 9)
AE_CFG = {"channels": [8, 16], "latent_channels": 2, "num_res_blocks": 1, "norm_num_groups": 8,
          "kl_weight": 1e-6, "learning_rate": 1e-3, "batch_size": 2, "epochs": 4}
DM_CFG = {"channels": [16, 32], "num_res_blocks": 1, "num_head_channels": 8, "norm_num_groups": 8,
          "num_train_timesteps": 50, "num_inference_steps": 5, "learning_rate": 1e-3, "batch_size": 3,
          "epochs": 4}
AE_KEYS = ["epoch", "loss", "recon_l1", "kl", "seconds"]


def _states_equal(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k].cpu(), sb[k].cpu()) for k in sa)


def _without_seconds(history):
    return [{k: v for k, v in row.items() if k != "seconds"} for row in history]


@pytest.fixture(scope="module")
def volumes():
    """Six volumes in CT-like units: a bright ellipsoid of varying size on a dark background, plus noise."""
    rng = np.random.default_rng(0)
    grid = np.meshgrid(*[np.linspace(-1, 1, s) for s in SHAPE], indexing="ij")
    out = []
    for _ in range(6):
        radius = rng.uniform(0.4, 0.8)
        inside = sum(g**2 for g in grid) < radius**2
        out.append((np.where(inside, 80.0, -50.0) + rng.normal(0, 5, SHAPE)).astype(np.float32))
    return np.stack(out)


@pytest.fixture(scope="module")
def autoencoder(volumes, tmp_path_factory):
    checkpoint = tmp_path_factory.mktemp("ae") / "autoencoder.ckpt"
    model, history = ldm.train_autoencoder(volumes, AE_CFG, seed=11, checkpoint=checkpoint, device="cpu")
    return model, history, checkpoint


@pytest.fixture(scope="module")
def latents(autoencoder, volumes):
    return ldm.encode(autoencoder[0], volumes, device="cpu")


@pytest.fixture(scope="module")
def diffusion(latents, tmp_path_factory):
    z, scale = latents
    checkpoint = tmp_path_factory.mktemp("dm") / "diffusion.ckpt"
    model, history = ldm.train_diffusion(z, DM_CFG, scale=scale, seed=12, checkpoint=checkpoint, device="cpu")
    return model, history, checkpoint


# --------------------------------------------------------------------------- padding


def test_pad_and_crop_are_inverse_and_pad_the_high_end():
    a = np.arange(2 * 15 * 17 * 9, dtype=np.float32).reshape(2, *SHAPE) + 1
    padded = ldm.pad_to_multiple(a, 4, value=-7.0)
    assert padded.shape == (2, 16, 20, 12) == (2, *ldm.padded_shape(SHAPE, 4))
    assert np.array_equal(padded[:, :15, :17, :9], a)
    assert (padded[:, 15:] == -7).all() and (padded[:, :, 17:] == -7).all() and (padded[..., 9:] == -7).all()
    assert np.array_equal(ldm.crop_to_shape(padded, SHAPE), a)
    assert torch.equal(ldm.crop_to_shape(torch.from_numpy(padded), SHAPE), torch.from_numpy(a))
    assert ldm.pad_to_multiple(a, 1) is a  # nothing to pad
    with pytest.raises(ValueError, match="cannot crop"):
        ldm.crop_to_shape(a, (16, 17, 9))
    with pytest.raises(ValueError, match="three axes"):
        ldm.pad_to_multiple(np.zeros((4, 4)), 2)


def test_kl_divergence_known_values():
    mu, sigma = torch.zeros(3, 2, 2, 2, 2), torch.ones(3, 2, 2, 2, 2)
    assert ldm.kl_divergence(mu, sigma).item() == 0.0
    # mu = 1, sigma = 1: 0.5 * 1 per latent value, 16 values per item, averaged over the batch
    assert ldm.kl_divergence(mu + 1, sigma).item() == pytest.approx(8.0)
    # mu = 0, sigma = e: 0.5 * (e^2 - 2 - 1) per value
    assert ldm.kl_divergence(mu, sigma * np.e).item() == pytest.approx(16 * 0.5 * (np.e**2 - 3), rel=1e-6)


# --------------------------------------------------------------------------- configuration


@pytest.mark.parametrize(("make", "cfg", "message"), [
    (ldm.autoencoder_config, {"chanels": [8, 16]}, "unknown autoencoder setting"),
    (ldm.autoencoder_config, {"channels": [8, 12]}, "multiples of norm_num_groups"),
    (ldm.autoencoder_config, {"attention_levels": [False]}, "one per level"),
    (ldm.autoencoder_config, {"patch_size": [8, 8, 7]}, "multiples of 2"),
    (ldm.autoencoder_config, {"epochs": 0}, "epochs must be at least 1"),
    (ldm.autoencoder_config, {"learning_rate": -1}, "learning_rate"),
    (ldm.diffusion_config, {"num_head_channels": 12}, "middle block"),
    (ldm.diffusion_config, {"attention_levels": [True, False], "num_head_channels": [16, 8],
                            "channels": [24, 32]}, "level 0"),
    (ldm.diffusion_config, {"num_inference_steps": 2000}, "exceeds num_train_timesteps"),
    (ldm.diffusion_config, {"schedule": "cosine"}, "schedule"),
    (ldm.diffusion_config, {"beta_start": 0.1, "beta_end": 0.01}, "beta_start < beta_end"),
])
def test_invalid_settings_are_refused(make, cfg, message):
    with pytest.raises(ValueError, match=message):
        make(cfg)


def test_config_defaults_are_filled_and_expanded():
    c = ldm.diffusion_config({"channels": [16, 32, 64], "num_head_channels": 16})
    assert c["attention_levels"] == [False, False, False]
    assert c["num_head_channels"] == [16, 16, 16] and c["num_res_blocks"] == [1, 1, 1]
    assert ldm.autoencoder_config({"epochs": 3})["channels"] == ldm.AUTOENCODER_DEFAULTS["channels"]


# --------------------------------------------------------------------------- autoencoder


def test_autoencoder_history_and_learning(autoencoder, volumes):
    model, history, checkpoint = autoencoder
    assert [row["epoch"] for row in history] == [1, 2, 3, 4]
    for row in history:
        assert list(row) == AE_KEYS
        assert all(np.isfinite(row[k]) for k in AE_KEYS)
        assert row["loss"] == pytest.approx(row["recon_l1"] + AE_CFG["kl_weight"] * row["kl"], rel=1e-6)
    assert history[-1]["recon_l1"] < history[0]["recon_l1"]
    assert checkpoint.exists()
    assert model.shape == SHAPE
    assert model.intensity_range.tolist() == [float(volumes.min()), float(volumes.max())]
    assert not model.training


def test_intensity_mapping_round_trips(autoencoder, volumes):
    model = autoencoder[0]
    x = model.to_input(volumes)
    assert x.shape == (6, 16, 18, 10) and x.dtype == np.float32
    assert x[:, :15, :17, :9].min() == 0.0 and x.max() == 1.0
    back = model.from_output(torch.from_numpy(x)[:, None])
    assert np.allclose(back, volumes, atol=1e-4)


def test_encode_gives_latent_means_and_scale(autoencoder, latents, volumes):
    z, scale = latents
    model = autoencoder[0]
    assert z.shape == (6, 2, 8, 9, 5) == (6, *model.latent_shape)
    assert z.dtype == np.float32 and np.isfinite(z).all()
    assert scale == pytest.approx(1 / z.std(dtype=np.float64), rel=1e-12)
    z_again, _ = ldm.encode(model, list(volumes), device="cpu")  # deterministic (means, no sampling)
    assert np.array_equal(z, z_again)
    with pytest.raises(ValueError, match="trained on"):
        ldm.encode(model, volumes[:, :14])


def test_autoencoder_resumes_exactly(autoencoder, volumes, tmp_path):
    full, full_history, _ = autoencoder
    checkpoint = tmp_path / "ae.ckpt"
    calls = []
    _, first = ldm.train_autoencoder(volumes, {**AE_CFG, "epochs": 2}, seed=11, checkpoint=checkpoint,
                                     device="cpu", progress=lambda d, t: calls.append((d, t)))
    assert calls == [(1, 2), (2, 2)] and len(first) == 2
    resumed, history = ldm.train_autoencoder(volumes, AE_CFG, seed=11, checkpoint=checkpoint, device="cpu",
                                             progress=lambda d, t: calls.append((d, t)))
    assert calls[2:] == [(3, 4), (4, 4)]  # only the missing epochs ran
    assert _states_equal(resumed, full)
    assert _without_seconds(history) == _without_seconds(full_history)


def test_autoencoder_checkpoint_of_another_configuration_is_refused(autoencoder, volumes, tmp_path):
    checkpoint = tmp_path / "copy.ckpt"
    shutil.copy(autoencoder[2], checkpoint)
    with pytest.raises(ValueError, match=r"copy\.ckpt was written by a different configuration: channels "
                                         r"\[8, 16\] != \[16, 32\].*delete it"):
        ldm.train_autoencoder(volumes, {**AE_CFG, "channels": [16, 32]}, seed=11, checkpoint=checkpoint)
    with pytest.raises(ValueError, match="seed 11 != 12"):
        ldm.train_autoencoder(volumes, AE_CFG, seed=12, checkpoint=checkpoint)
    with pytest.raises(ValueError, match="4 epochs, more than the 3"):
        ldm.train_autoencoder(volumes, {**AE_CFG, "epochs": 3}, seed=11, checkpoint=checkpoint)


def test_autoencoder_checkpoint_of_other_data_starts_afresh(autoencoder, volumes, tmp_path, caplog):
    # the checkpoint's name hashes the settings only: new training data (preprocessing changed) reuse
    # the name, and the old run, useless to resume, is replaced from epoch 1 instead of stopping the workflow
    checkpoint = tmp_path / "copy.ckpt"
    shutil.copy(autoencoder[2], checkpoint)
    calls = []
    with caplog.at_level("WARNING"):
        _, history = ldm.train_autoencoder(volumes[:5], AE_CFG, seed=11, checkpoint=checkpoint, device="cpu",
                                           progress=lambda d, t: calls.append((d, t)))
    assert calls == [(1, 4), (2, 4), (3, 4), (4, 4)] and len(history) == 4
    assert "trained on other data" in caplog.text
    again = []
    ldm.train_autoencoder(volumes[:5], AE_CFG, seed=11, checkpoint=checkpoint, device="cpu",
                          progress=lambda d, t: again.append((d, t)))
    assert again == []  # the replaced checkpoint is the new data's: nothing left to train
    checkpoint.write_text("not a checkpoint")
    with pytest.raises(ValueError, match="copy.ckpt is unreadable"):
        ldm.train_autoencoder(volumes, AE_CFG, seed=11, checkpoint=checkpoint)


def test_autoencoder_on_random_crops_and_bad_volumes(volumes):
    model, history = ldm.train_autoencoder(volumes[:2], {**AE_CFG, "epochs": 1, "patch_size": [8, 8, 8]},
                                           seed=0, device="cpu")
    assert len(history) == 1 and np.isfinite(history[0]["loss"]) and model.shape == SHAPE
    with pytest.raises(ValueError, match="does not fit"):
        ldm.train_autoencoder(volumes, {**AE_CFG, "patch_size": [16, 8, 8]}, seed=0)
    with pytest.raises(ValueError, match="one shape"):
        ldm.train_autoencoder([volumes[0], volumes[1, :14]], AE_CFG, seed=0)
    bad = volumes[:2].copy()
    bad[0, 0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="1 NaN"):
        ldm.train_autoencoder(bad, AE_CFG, seed=0)
    with pytest.raises(ValueError, match="constant"):
        ldm.train_autoencoder(np.ones((2, *SHAPE)), AE_CFG, seed=0)


# --------------------------------------------------------------------------- diffusion


def test_diffusion_history(diffusion):
    model, history, checkpoint = diffusion
    assert [row["epoch"] for row in history] == [1, 2, 3, 4]
    assert all(list(row) == ["epoch", "loss", "seconds"] and np.isfinite(row["loss"]) for row in history)
    assert checkpoint.exists() and not model.training


def test_diffusion_resumes_exactly(diffusion, latents, tmp_path):
    full, full_history, _ = diffusion
    z, scale = latents
    checkpoint = tmp_path / "dm.ckpt"
    ldm.train_diffusion(z, {**DM_CFG, "epochs": 2}, scale=scale, seed=12, checkpoint=checkpoint, device="cpu")
    # sampling settings are not part of the training configuration
    resumed, history = ldm.train_diffusion(z, {**DM_CFG, "num_inference_steps": 3}, scale=scale, seed=12,
                                           checkpoint=checkpoint, device="cpu")
    assert _states_equal(resumed, full)
    assert _without_seconds(history) == _without_seconds(full_history)
    with pytest.raises(ValueError, match=r"dm\.ckpt was written by a different configuration: scale"):
        ldm.train_diffusion(z, DM_CFG, scale=scale * 2, seed=12, checkpoint=checkpoint)
    with pytest.raises(ValueError, match="kind autoencoder != diffusion"):
        ldm.train_diffusion(z, DM_CFG, scale=scale, seed=12, checkpoint=_autoencoder_checkpoint(tmp_path))


def _autoencoder_checkpoint(tmp_path):
    path = tmp_path / "tiny_ae.ckpt"
    data = np.random.default_rng(1).normal(size=(2, 8, 8, 8))
    ldm.train_autoencoder(data, {**AE_CFG, "epochs": 1}, seed=0, checkpoint=path, device="cpu")
    return path


# --------------------------------------------------------------------------- sampling


def test_sample_shape_and_seeding(autoencoder, diffusion, latents, volumes):
    ae, unet, scale = autoencoder[0], diffusion[0], latents[1]
    calls = []
    a = ldm.sample(ae, unet, 3, DM_CFG, seed=5, scale=scale, device="cpu", progress=lambda d, t: calls.append(d))
    assert a.shape == (3, *SHAPE) and a.dtype == np.float32 and np.isfinite(a).all()
    assert calls == [1, 2, 3]
    assert np.array_equal(a, ldm.sample(ae, unet, 3, DM_CFG, seed=5, scale=scale, device="cpu"))
    b = ldm.sample(ae, unet, 3, DM_CFG, seed=6, scale=scale, device="cpu")
    assert not np.allclose(a, b)
    assert not np.allclose(a[0], a[1])  # different initial noise per sample
    # sample i depends on [seed, i] only, not on how many are drawn or in which batches
    batched = ldm.sample(ae, unet, 2, {**DM_CFG, "sample_batch_size": 2}, seed=5, scale=scale, device="cpu")
    assert np.allclose(batched, a[:2], atol=1e-4 * np.ptp(volumes))
    assert ldm.sample(ae, unet, 0, DM_CFG, seed=5, scale=scale).shape == (0, *SHAPE)


def test_sample_refuses_mismatched_networks(autoencoder, latents):
    other = ldm._build_diffusion(DM_CFG, in_channels=3)
    with pytest.raises(ValueError, match="3 input channels"):
        ldm.sample(autoencoder[0], other, 1, DM_CFG, seed=0, scale=latents[1])


# --------------------------------------------------------------------------- saving


def test_save_and_load_round_trip(autoencoder, diffusion, latents, tmp_path):
    ae, unet, scale = autoencoder[0], diffusion[0], latents[1]
    ldm.save_model(tmp_path / "ae.pt", ae, {**AE_CFG, "note": "demo"})
    ldm.save_model(tmp_path / "dm.pt", unet, {**DM_CFG, "scale": scale})
    ae2, ae_cfg = ldm.load_autoencoder(tmp_path / "ae.pt")
    unet2, dm_cfg = ldm.load_diffusion(tmp_path / "dm.pt")
    assert _states_equal(ae2, ae) and _states_equal(unet2, unet)
    assert ae_cfg["kind"] == "autoencoder" and ae_cfg["note"] == "demo" and ae_cfg["channels"] == [8, 16]
    assert dm_cfg["kind"] == "diffusion" and dm_cfg["scale"] == scale and dm_cfg["in_channels"] == 2
    assert ae2.shape == SHAPE and not ae2.training and not unet2.training
    # a loaded pair samples exactly what the trained pair samples, from the stored config alone
    expected = ldm.sample(ae, unet, 1, DM_CFG, seed=3, scale=scale, device="cpu")
    assert np.array_equal(ldm.sample(ae2, unet2, 1, dm_cfg, seed=3, scale=dm_cfg["scale"], device="cpu"), expected)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ae.pt", "dm.pt"]  # no temporary files


def test_load_refuses_wrong_kind_and_foreign_files(autoencoder, diffusion, latents, tmp_path):
    ldm.save_model(tmp_path / "ae.pt", autoencoder[0], AE_CFG)
    ldm.save_model(tmp_path / "dm.pt", diffusion[0], {**DM_CFG, "scale": latents[1]})
    with pytest.raises(ValueError, match=r"ae\.pt: holds a 'autoencoder' model, not a 'diffusion'"):
        ldm.load_diffusion(tmp_path / "ae.pt")
    with pytest.raises(ValueError, match=r"dm\.pt: holds a 'diffusion' model, not a 'autoencoder'"):
        ldm.load_autoencoder(tmp_path / "dm.pt")
    (tmp_path / "junk.pt").write_text("junk")
    with pytest.raises(ValueError, match=r"junk\.pt: not a model saved by synthaudit"):
        ldm.load_autoencoder(tmp_path / "junk.pt")
    with pytest.raises(ValueError, match=r"junk\.pt: not a model"):
        ldm.load_diffusion(tmp_path / "junk.pt")
    with pytest.raises(FileNotFoundError, match="missing.pt"):
        ldm.load_autoencoder(tmp_path / "missing.pt")


def test_save_refuses_configs_that_do_not_describe_the_model(autoencoder, diffusion, latents, tmp_path):
    with pytest.raises(ValueError, match="does not describe the autoencoder"):
        ldm.save_model(tmp_path / "x.pt", autoencoder[0], {**AE_CFG, "channels": [16, 32]})
    with pytest.raises(ValueError, match="must hold 'scale'"):
        ldm.save_model(tmp_path / "x.pt", diffusion[0], DM_CFG)
    with pytest.raises(ValueError, match="plain JSON"):
        ldm.save_model(tmp_path / "x.pt", autoencoder[0], {**AE_CFG, "note": object()})
    with pytest.raises(ValueError, match="LatentAutoencoder or DiffusionModelUNet"):
        ldm.save_model(tmp_path / "x.pt", torch.nn.Linear(2, 2), {})
    assert not (tmp_path / "x.pt").exists()


def test_deterministic_sets_and_restores_the_flag_without_importing_the_compiler():
    """The training context enables deterministic algorithms (warn-only) and restores the
    previous state, without torch.use_deterministic_algorithms' import of torch._inductor
    (1.2 s of every training job); run in a fresh interpreter so no other test's imports count."""
    code = (
        "import sys, torch\n"
        "from synthaudit.training import deterministic\n"
        "assert not torch.are_deterministic_algorithms_enabled()\n"
        "with deterministic(torch.device('cpu'), 0):\n"
        "    assert torch.are_deterministic_algorithms_enabled()\n"
        "    assert torch.is_deterministic_algorithms_warn_only_enabled()\n"
        "    a = torch.rand(3)\n"
        "with deterministic(torch.device('cpu'), 0):\n"
        "    assert torch.equal(a, torch.rand(3))\n"
        "assert not torch.are_deterministic_algorithms_enabled()\n"
        "print('inductor' if 'torch._inductor.config' in sys.modules else 'eager')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "eager"
