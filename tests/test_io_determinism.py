"""Outputs are the same bytes on every run: what `dvc status` checks after `make demo`."""

from __future__ import annotations

from pathlib import Path

import torch

from synthaudit.io import TIMING_KEYS, without_timings
from synthaudit.training import save_torch

ROOT = Path(__file__).resolve().parents[1]


def test_torch_files_do_not_carry_the_temporary_name_they_were_written_under(tmp_path):
    obj = {"state_dict": {"w": torch.arange(6.0).reshape(2, 3)}, "config": {"channels": [8, 16]}}
    save_torch(obj, tmp_path / "a.pt")
    save_torch(obj, tmp_path / "sub_b.pt")
    assert (tmp_path / "a.pt").read_bytes() == (tmp_path / "sub_b.pt").read_bytes()
    assert torch.equal(torch.load(tmp_path / "a.pt")["state_dict"]["w"], obj["state_dict"]["w"])
    assert not list(tmp_path.glob(".tmp*"))


def test_rows_lose_their_times_and_keep_everything_else():
    history = [{"epoch": 1, "loss": 0.5, "seconds": 1.2}, {"epoch": 2, "loss": 0.4, "seconds": 1.1}]
    assert without_timings(history) == [{"epoch": 1, "loss": 0.5}, {"epoch": 2, "loss": 0.4}]
    assert history[0]["seconds"] == 1.2  # the caller's rows are left alone
    assert {"seconds", "seconds_per_epoch", "seconds_per_volume"} <= TIMING_KEYS


def test_the_files_that_hold_times_are_left_out_of_dvcs_hashes_and_nothing_else():
    import subprocess
    import sys

    timed = ["results/privacy/runtime.json", "results/privacy/ncct_demo/image/evaluation.timing.json",
             "results/tables/generator_sweep.timing.tsv", "results/relict/segmentation/ncct_demo/unet/history.tsv",
             "results/privacy/ncct_demo/image/models/filter0_history.tsv", "results/tables/ncct_demo/runtime.tsv",
             "results/tables/runtime.html", "results/generator/ncct_ldm/checkpoints/diffusion-0.ckpt",
             "results/relict/segmentation/ncct_demo/unet/checkpoint.pt"]
    science = ["results/relict/ncct_demo/measures/mae.npz", "results/privacy/ncct_demo/image/evaluation.json",
               "results/tables/generator_sweep.tsv", "results/relict/segmentation/ncct_demo/unet/model.pt"]
    proc = subprocess.run([sys.executable, "-m", "dvc", "check-ignore", *timed, *science], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.stdout.split() == timed
