"""The fused GPU kernels of the image level (relict.triton_kernels, issue 47) against the CPU engine.

No GPU here: Triton's interpreter runs the same kernels on CPU tensors (NumPy per program), so the
numerics (indexing, taps, partial sums, masks at the edges of blocks) are tested on every machine.
The speed targets need a GPU: bench/gpu/image_level.py, run where one is lent.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.ndimage import gaussian_filter

pytest.importorskip("triton", reason="Triton is not installed (requirements.txt installs it on Linux x86-64)")

from synthaudit.relict import image_measures, triton_kernels  # noqa: E402


@pytest.fixture
def interpreted():
    """The kernels' module, on CUDA where there is a GPU, else on CPU tensors under Triton's interpreter
    (tests/conftest.py sets TRITON_INTERPRET=1 before Triton is first imported)."""
    import torch

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if triton_kernels.unavailable(device):
        pytest.skip(triton_kernels.unavailable(device))
    return triton_kernels, device.type


def _volumes(rng, n, shape, offset=0.0):
    """Smooth volumes with a flat background block (the engine's shift then makes it zero) and noise."""
    out = np.empty((n, *shape), np.float32)
    for i in range(n):
        v = gaussian_filter(rng.normal(size=shape), 1.2) * 40 + offset + rng.normal(size=shape)
        v[: shape[0] // 3] = offset - 20  # background: a flat region
        out[i] = v
    return out


@pytest.mark.parametrize("shape,sigma", [((19, 23, 17), 1.5), ((15, 40, 29), 1.0)])
def test_the_kernels_give_the_cpu_engines_values(interpreted, shape, sigma):
    """MAE, RMSE and SSIM through backend 'triton' equal the CPU engine's (numba) and the torch path's
    to 1e-6 relative: the 11-tap window and a 7-tap one, planes that are not a multiple of the block,
    values far from zero (the shift), the shortlist's pair mask."""
    rng = np.random.default_rng(3)
    synthetic = _volumes(rng, 3, shape, offset=900.0)
    training = _volumes(rng, 4, shape, offset=900.0)
    training[1] = synthetic[2] + rng.normal(scale=0.5, size=shape).astype(np.float32)  # a near-replica
    kernels_module, device = interpreted
    settings = dict(data_range=300.0, ssim_sigma=sigma, device=device)
    measures = ["mae", "rmse", "ssim"]
    ours = image_measures.all_pairs_image_measures(synthetic, training, measures, backend="triton", **settings)
    cpu = image_measures.all_pairs_image_measures(synthetic, training, measures, backend="kernels",
                                                  **{**settings, "device": "cpu"})
    reference = image_measures.all_pairs_image_measures(synthetic, training, measures, backend="torch", **settings)
    for m in measures:
        assert ours[m].shape == (3, 4)
        np.testing.assert_allclose(ours[m], cpu[m], rtol=1e-6, err_msg=m)
        np.testing.assert_allclose(ours[m], reference[m], rtol=1e-6, err_msg=m)
    assert ours["ssim"][2, 1] > 0.9 > ours["ssim"][0, 1] and ours["mae"][2, 1] < 0.5 < ours["mae"][0, 1]
    pairs = np.zeros((3, 4), bool)
    pairs[[0, 2, 2], [3, 1, 0]] = True
    masked = image_measures.all_pairs_image_measures(synthetic, training, measures, backend="triton", pairs=pairs,
                                                     **settings)
    for m in measures:
        assert np.isnan(masked[m][~pairs]).all()
        np.testing.assert_allclose(masked[m][pairs], cpu[m][pairs], rtol=1e-6, err_msg=m)


def test_error_sums_stream_the_batch_past_one_training_volume(interpreted):
    """Sums over more voxels than one block, a batch of five: float64 sums of the float32 differences."""
    import torch

    rng = np.random.default_rng(1)
    kernels_module, device = interpreted
    x = torch.from_numpy(rng.normal(size=(5, 13, 11, 17)).astype(np.float32)).to(device)
    y = torch.from_numpy(rng.normal(size=(13, 11, 17)).astype(np.float32)).to(device)
    abs_sum, sq_sum = (s.cpu() for s in kernels_module.error_sums(x, y))
    d = (x - y).double().reshape(5, -1).cpu()
    np.testing.assert_allclose(abs_sum.numpy(), d.abs().sum(1).numpy(), rtol=1e-6)
    np.testing.assert_allclose(sq_sum.numpy(), (d * d).sum(1).numpy(), rtol=1e-6)


def test_auto_keeps_the_cpu_engine_and_triton_without_a_gpu_is_refused_with_its_reason(monkeypatch):
    """On CPU 'auto' is the numba engine; asking for Triton on a CPU without the interpreter says why."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    v = np.zeros((1, 12, 12, 12), np.float32)
    with pytest.raises(ValueError, match="backend 'triton': the Triton kernels run on CUDA devices"):
        image_measures.all_pairs_image_measures(v, v, ["mae"], data_range=1.0, device="cpu", backend="triton")
    assert image_measures.all_pairs_image_measures(v, v, ["mae"], data_range=1.0, device="cpu")["mae"][0, 0] == 0


def test_under_auto_a_failing_kernel_costs_a_warning_and_the_torch_path_not_the_run(caplog):
    """A GPU Triton cannot compile for must not stop an audit that asked for nothing in particular: under
    'auto' the first failure switches to the torch path for good (said in the log); under 'triton' it is
    raised."""
    calls = []

    def broken():
        calls.append("kernel")
        raise RuntimeError("PTX compilation failed\nmore")

    def torch_path():
        calls.append("torch")
        return 7

    auto = image_measures._KernelsOrTorch(True, True, "cuda:0")
    assert auto.run(broken, torch_path) == 7 and auto.run(broken, torch_path) == 7
    assert calls == ["kernel", "torch", "torch"]
    assert "the fused Triton kernels failed on cuda:0 (RuntimeError: PTX compilation failed)" in caplog.text
    with pytest.raises(RuntimeError, match="PTX compilation failed"):
        image_measures._KernelsOrTorch(True, False, "cuda:0").run(broken, torch_path)
    assert image_measures._KernelsOrTorch(False, True, "cuda:0").run(broken, torch_path) == 7
