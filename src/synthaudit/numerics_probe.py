"""Fingerprints of every kind of computation the workflow runs, at seconds size: do two
machines (or two settings of one) give the same bits?

Why: the audit's numbers come from trained networks (the U-Net that labels synthetic volumes,
the privacy filters, the CVAE, the latent diffusion model), from pretrained encoders, from
numba kernels and from numpy, scipy and SimpleITK. Each of those can pick its kernels by
the CPU (synthaudit.numerics). This runs each of them on tiny seeded inputs through the same
library functions the workflow calls, and prints the SHA-256 of what each produced. Equal
fingerprints on two machines mean equal bits from those code paths; the tests compare them
with the host's ISA capped, under an emulated Intel CPU (qemu), and with the fingerprints
committed from the machine that made the baseline.

    python -m synthaudit.numerics_probe [--stages unet,ldm] [--out digests.json]
    synthaudit numerics                 # the same, with the mode in use
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections.abc import Callable

from . import numerics

THREADS = 2  # fixed: a reduction split over another thread count rounds differently


def _digest(*arrays) -> str:
    import numpy as np

    h = hashlib.sha256()
    for a in arrays:
        if hasattr(a, "detach"):
            a = a.detach().cpu().numpy()
        a = np.ascontiguousarray(np.asarray(a))
        h.update(str(a.dtype).encode() + str(a.shape).encode())
        h.update(a.tobytes())
    return h.hexdigest()[:16]


def _weights(model) -> list:
    return [v for _, v in sorted(model.state_dict().items())]


def _volumes(n: int, shape=(16, 16, 16), seed: int = 0):
    """Smooth random 'scans' in [0, 1] with a bright blob (a structure to label)."""
    import numpy as np
    from scipy import ndimage

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        v = ndimage.gaussian_filter(rng.normal(size=shape), 1.5)
        v = (v - v.min()) / (v.max() - v.min())
        centre = rng.integers(2, np.array(shape) - 2)
        grid = np.indices(shape).transpose(1, 2, 3, 0)
        v += 0.8 * (np.linalg.norm(grid - centre, axis=-1) < 3)
        out.append(np.clip(v, 0, 1.5).astype(np.float32))
    return out


def stage_numpy() -> str:
    """numpy's dispatched math (exp/log/sin, float32 and float64) and pairwise sums."""
    import numpy as np

    v = np.random.default_rng(1).standard_normal(50_001)
    f = v.astype(np.float32)
    return _digest(np.exp(v), np.log(np.abs(v) + 1), np.exp(f), np.sin(f), np.tanh(f), f.sum(), np.cumsum(f))


def stage_sort() -> str:
    """numpy's sort of ties (its AVX-512 and AVX2 sorts order equal keys differently)."""
    import numpy as np

    keys = np.random.default_rng(2).integers(0, 20, 20_000)
    return _digest(np.argsort(keys), np.argsort(keys.astype(np.float32)))


def stage_blas() -> str:
    """OpenBLAS through numpy and scipy (products, a symmetric eigensolver, a linear solve)."""
    import numpy as np
    from scipy import linalg

    m = np.random.default_rng(3).standard_normal((300, 300))
    return _digest(m @ m.T, np.linalg.eigvalsh(m + m.T), linalg.solve(m @ m.T + np.eye(300), m[:, 0]))


def stage_scipy() -> str:
    """scipy.ndimage filters and resampling (preprocessing, smoothing, the demo's cohort)."""
    import numpy as np
    from scipy import ndimage

    v = _volumes(1, (24, 24, 24), 4)[0]
    rot = ndimage.affine_transform(v, np.eye(3) * 1.1, offset=0.7, order=1)
    return _digest(ndimage.gaussian_filter(v, 1.3), ndimage.zoom(v, 0.7, order=3), rot)


def stage_registration() -> str:
    """SimpleITK's rigid + affine registration (Mattes mutual information, sampled)."""
    import numpy as np
    from scipy import ndimage

    from .preprocess.register import register_affine

    fixed = _volumes(1, (24, 24, 24), 5)[0] * 1000.0
    moving = ndimage.shift(fixed, (1.5, -1.0, 0.5), order=1)
    affine = np.diag([2.0, 2.0, 2.0, 1.0])
    result = register_affine(fixed, affine, moving, affine, shrink_factors=(2, 1), smoothing_sigmas_vox=(1, 0),
                             iterations=30, clip=None, rotation_search_deg=None, threads=1)  # ITK's threads sum in any order
    return _digest(np.asarray(result.transform.GetParameters()), np.asarray([result.metric]))


def stage_numba() -> str:
    """The image level's numba kernels: MAE, RMSE, SSIM and NCC of every pair."""
    import numpy as np

    from .relict.image_measures import all_pairs_image_measures

    syn, train = np.stack(_volumes(3, seed=6)), np.stack(_volumes(4, seed=7))
    out = all_pairs_image_measures(syn, train, ["mae", "rmse", "ssim", "ncc"], data_range=1.5, threads=THREADS,
                                   backend="kernels")
    return _digest(*(out[k] for k in sorted(out)))


def stage_alignment() -> str:
    """The augmentation-aware search: the shift search's pruned inverse transform (complex products
    through OpenBLAS), the full-resolution kernels (shift sums, shifted and masked errors, the warp's
    errors, the Gauss-Newton system), the block means."""
    import numpy as np

    from .relict import align_kernels as ak
    from .relict.alignment import ShiftSearch
    from .relict.geometry import rotate, rotvec_matrix

    a, t = _volumes(2, (64, 64, 32), 8)
    search = ShiftSearch(a.shape, (3, 3, 3), workers=THREADS)
    assert search._pruned is not None  # the path the 3 mm coarse stage takes
    ssd = search.ssd(search.moving(a), search.fixed(t))
    ones = rotate(np.ones(a.shape, np.float32), 1, 5.0, [1.5, 1.5, 1.5])
    m = rotvec_matrix(np.radians([2.0, -1.0, 3.0]))
    return _digest(ssd, ak.shift_ssd(a, t, [(0, 0, 0), (1, -2, 1)], threads=THREADS),
                   np.asarray(ak.shifted_error_sums(a, t, (0.4, -1.3, 2.0), threads=THREADS)),
                   np.asarray(ak.masked_error_sums(a, ones, t, (1.5, 0.0, -0.7), 0.9999, threads=THREADS)),
                   np.asarray(ak.affine_error_sums(a, t, m, (0.5, -0.2, 0.3), threads=THREADS)),
                   *ak.lk_normal_equations(a, t, (31.5, 31.5, 15.5), (3.0, 3.0, 3.0), (0.5, 0.0, -1.0),
                                           threads=THREADS),
                   ak.block_mean_fast(a, 2, (0, 0, 0), threads=THREADS))


def stage_unet() -> str:
    """The segmentation level's U-Net: trained (Adam, patches), then a sliding-window prediction."""
    from .segment.unet import predict, train_unet

    images = _volumes(3, seed=8)
    labels = [(v > 1.0).astype("uint8") for v in images]
    model, history = train_unet(images, labels, 2, epochs=2, patch_size=(16, 16, 16), batch_size=2,
                                learning_rate=1e-3, seed=11, channels=(4, 8, 16), device="cpu")
    return _digest(*_weights(model), predict(model, images[0], (16, 16, 16), device="cpu"))


def stage_filter() -> str:
    """A privacy filter: the siamese 3D ResNet trained on patient pairs, its features and scores."""
    import copy

    import numpy as np
    import torch

    from .config import load_params
    from .privacy.model import HEADS, embed_all, score_matrix
    from .privacy.train import train_network
    from .resources import default_params

    cfg = copy.deepcopy(load_params(default_params())["privacy"])
    cfg["network"].update(width=0.125, feature_dim=16)
    cfg["training"].update(epochs=2, patience=2)
    base = _volumes(6, seed=9)
    rng = np.random.default_rng(10)
    x = np.stack([b + 0.1 * rng.normal(size=b.shape) for b in base for _ in range(2)]).astype(np.float32)[:, None]
    patients = [f"p{i}" for i in range(6) for _ in range(2)]
    model, _ = train_network(x, patients, list(range(8)), [8, 9], cfg["network"], cfg["training"], seed=0,
                             device="cpu")
    features = embed_all(model, x, torch.device("cpu"))
    return _digest(*_weights(model), features, *(score_matrix(model, features, features, h) for h in HEADS))


def stage_cvae() -> str:
    """Di Salvo et al.'s CVAE and the linear probe (feature-space anonymisation)."""
    import numpy as np

    from .anonymise.cvae import train_cvae
    from .anonymise.probe import train_probe

    rng = np.random.default_rng(12)
    y = rng.integers(0, 2, 80)
    x = (rng.normal(size=(80, 24)) + y[:, None]).astype(np.float32)
    cfg = {"hidden": 32, "latent": 8, "beta": 0.1, "learning_rate": 1e-3, "batch_size": 16, "max_epochs": 15,
           "patience": 15}
    model, _ = train_cvae(x[:60], y[:60], x[60:], y[60:], 2, cfg, seed=0)
    probe, _ = train_probe(x[:60], y[:60], x[60:], y[60:], 2, {"learning_rate": 1e-2, "batch_size": 16,
                                                              "max_epochs": 10, "patience": 10}, seed=0)
    return _digest(*_weights(model), *_weights(probe))


def stage_ldm() -> str:
    """The latent diffusion model: autoencoder, latents, diffusion U-Net (DDPM), DDIM samples."""
    from .generate import ldm

    images = _volumes(4, (16, 16, 8), seed=13)
    ae_cfg = {"channels": [8, 16], "latent_channels": 2, "num_res_blocks": 1, "norm_num_groups": 8,
              "kl_weight": 1e-6, "learning_rate": 1e-3, "batch_size": 2, "epochs": 2}
    dm_cfg = {"channels": [16, 32], "num_res_blocks": 1, "num_head_channels": 8, "norm_num_groups": 8,
              "num_train_timesteps": 50, "num_inference_steps": 5, "learning_rate": 1e-3, "batch_size": 2,
              "epochs": 2}
    ae, _ = ldm.train_autoencoder(images, ae_cfg, seed=11, device="cpu")
    latents, scale = ldm.encode(ae, images, device="cpu")
    unet, _ = ldm.train_diffusion(latents, dm_cfg, scale=scale, seed=3, device="cpu")
    samples = ldm.sample(ae, unet, 2, dm_cfg, seed=3, scale=scale, device="cpu")
    return _digest(*_weights(ae), latents, *_weights(unet), samples)


def stage_encoder() -> str:
    """The feature level's encoders at inference: RELICT's untrained ResNet-50 and Astra's
    pretrained CT ResNet-152 (where its weights are installed)."""
    from .features import extractor_from_config

    v = _volumes(1, (32, 32, 32), seed=14)[0]
    out = [extractor_from_config({"extractor": "medicalnet_resnet50", "seed": 0, "grid": 2}, device="cpu")(v)]
    try:
        out.append(extractor_from_config({"extractor": "astra_resnet152", "grid": 1}, device="cpu")(v))
    except (ImportError, FileNotFoundError, ModuleNotFoundError):
        pass  # the optional extra is not installed
    return _digest(*out)


def stage_radiomics() -> str:
    """FRD's PyRadiomics features (SimpleITK's normalisation and B-spline resampling, PyWavelets,
    PyRadiomics' C texture matrices, numpy's reductions) of one small volume."""
    import tempfile
    from pathlib import Path

    import numpy as np
    import SimpleITK as sitk

    from .fidelity.radiomics import features_of

    image = sitk.GetImageFromArray(_volumes(1, (20, 20, 20), seed=15)[0] * 1000.0)
    image.SetSpacing((2.5, 2.5, 2.5))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "volume.nii.gz"
        sitk.WriteImage(image, str(path))
        feats = features_of(path)
    return _digest(np.array(list(feats)), np.array(list(feats.values()), np.float64))


def stage_membership() -> str:
    """The membership attacks (synthaudit.membership): the samples' principal axes (their Gram matrix's
    eigenvectors, LAPACK), the kernel densities' covariance, Cholesky factor and solves (LAPACK), the
    embedding distances and the patient bootstrap."""
    import numpy as np

    from .features.compare import all_pairs_feature_measures
    from .membership import attacks, evaluate

    rng = np.random.default_rng(16)
    samples, reference, candidates = rng.normal(size=(14, 40)), rng.normal(size=(12, 40)), rng.normal(size=(10, 40))
    groups = [f"p{k // 2}" for k in range(12)]
    ratio = attacks.density_ratio_scores(candidates, samples, reference, groups[:10], groups, dimension=5)
    closest = attacks.closest_distance_scores(
        all_pairs_feature_measures(candidates.astype(np.float32), samples.astype(np.float32), ["emb_rmse"])["emb_rmse"])
    boot = evaluate.bootstrap(ratio[:5], ratio[5:], 200, 0, 0.95)
    return _digest(ratio, closest, np.array(boot["auc_ci"] + boot["advantage_ci"]))


STAGES: dict[str, Callable[[], str]] = {
    "numpy": stage_numpy, "sort": stage_sort, "blas": stage_blas, "scipy": stage_scipy,
    "registration": stage_registration, "numba": stage_numba, "alignment": stage_alignment, "unet": stage_unet,
    "filter": stage_filter,
    "cvae": stage_cvae, "ldm": stage_ldm, "encoder": stage_encoder, "radiomics": stage_radiomics,
    "membership": stage_membership,
}


def run(stages=None, progress: Callable[[str], None] | None = None) -> dict:
    """Fingerprint each stage; returns ``{"numerics": provenance, "digests": {stage: sha}, "seconds": ...}``."""
    import torch

    torch.set_num_threads(THREADS)
    try:
        import numba

        numba.set_num_threads(min(THREADS, numba.config.NUMBA_NUM_THREADS))
    except ImportError:
        pass
    digests, seconds = {}, {}
    for name in stages or STAGES:
        if name not in STAGES:
            raise ValueError(f"unknown stage {name!r}: choose from {', '.join(STAGES)}")
        start = time.perf_counter()
        digests[name] = STAGES[name]()
        seconds[name] = round(time.perf_counter() - start, 2)
        if progress is not None:
            progress(f"{name}: {digests[name]} ({seconds[name]} s)")
    return {"numerics": numerics.provenance(), "machine": f"{numerics.cpu_model()}, {numerics.host_isa()}",
            "aten": torch.backends.cpu.get_cpu_capability(),
            "onednn": bool(torch.backends.mkldnn.enabled), "digests": digests, "seconds": seconds}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--stages", help=f"comma-separated subset of {','.join(STAGES)} (default: all)")
    ap.add_argument("--out", help="also write the JSON here")
    args = ap.parse_args(argv)
    stages = args.stages.split(",") if args.stages else None
    result = run(stages, progress=lambda line: print(line, file=sys.stderr, flush=True))
    text = json.dumps(result, indent=1, sort_keys=True)
    print(text)
    if args.out:  # without the timings, which change on every run
        from .io import write_text

        write_text(args.out, json.dumps({k: v for k, v in result.items() if k != "seconds"}, indent=1,
                                        sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
