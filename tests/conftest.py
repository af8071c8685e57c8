"""Shared fixtures: the repository root, small NIfTI files made on the fly.

synthaudit is imported as installed (`make install`: an editable install of src/), the
benchmarks from bench/ (pyproject: pytest's pythonpath)."""

import os
from pathlib import Path

# Without an NVIDIA GPU, the fused GPU kernels (relict.triton_kernels) are tested under Triton's
# interpreter, which must be chosen before Triton is first imported (its own helpers, tl.sum's
# combine function among them, are compiled or interpreted from then on)
if not Path("/dev/nvidiactl").exists():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import synthaudit  # noqa: F401  first: its portable numerics are set before numpy loads (synthaudit.numerics)

import numpy as np  # noqa: E402
import pytest

ROOT = Path(__file__).resolve().parents[1]


# The longest files first, so that with two workers (pyproject: -n 2 --dist loadfile) the
# tiny demo starts at once and the unit tests fill the other core around the other runs.
SLOWEST_FIRST = ("test_workflow_demo.py", "test_dvc.py", "test_workflow.py")


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(Path(str(item.fspath)).name, len(rank)))  # stable: order kept within


@pytest.fixture
def root() -> Path:
    return ROOT


@pytest.fixture
def nifti(tmp_path):
    """Write a small NIfTI volume and return its path: nifti(name, data, affine=eye)."""
    from synthaudit.io import save_volume

    def make(name, data, affine=None):
        path = tmp_path / name
        save_volume(path, np.asarray(data), np.eye(4) if affine is None else affine)
        return path

    return make


@pytest.fixture
def init_says_only_its_own(capfd):
    """After a test of init's refusals (issue 66): nothing on the process's stderr, at the file-descriptor
    level, that synthaudit did not write. The refusals are raised (or printed as ``synthaudit ...``), so a
    stray line is a library's: ITK's GDCM warnings named SimpleITK's build folder before the refusal."""
    capfd.readouterr()
    yield
    stray = [line for line in capfd.readouterr().err.splitlines() if line.strip() and not line.startswith("synthaudit")]
    assert not stray, "lines on stderr that synthaudit did not write:\n" + "\n".join(stray[:20])
