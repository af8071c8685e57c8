"""Shared fixtures: the repository root on sys.path, small NIfTI files made on the fly."""

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow" / "scripts"))


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
