"""synthaudit.review.noise: a metrics change judged against the trained estimates' seed spread."""

from __future__ import annotations

import json

from synthaudit.review import noise

SPREAD = {"estimates": {
    "unet": {"metrics": {"relict.json": {"ncct_demo.dice_binary.auc": {"sd": 0.02, "mean": 0.9},
                                         "ncct_demo.asd_binary.threshold": {"sd": None}}}},
    "filters": {"metrics": {"privacy.json": {"ncct_demo.image.verification_auc": {"sd": 0.05}},
                            "relict.json": {"ncct_demo.dice_binary.auc": {"sd": 0.03}}}},
}}


def test_changes_within_k_sd_are_seed_noise_beyond_are_not_and_untrained_keys_are_real():
    diff = {"results/metrics/relict.json": {
                "ncct_demo.dice_binary.auc": {"old": 0.9, "new": 0.95, "diff": 0.05},   # 0.05 <= 2 x 0.03
                "ncct_demo.mae.auc": {"old": 0.9, "new": 0.9001, "diff": 0.0001},       # no trained model moves it
                "ncct_demo.rmse.auc": {"old": 0.8, "new": 0.8, "diff": 0.0}},
            "results/metrics/privacy.json": {
                "ncct_demo.image.verification_auc": {"old": 0.9, "new": 0.7, "diff": -0.2},  # 4 SD
                "ncct_demo.image.new_key": {"old": None, "new": 1.0}}}
    rows = {r["key"]: r for r in noise.classify(diff, SPREAD, k=2)}
    dice = rows["ncct_demo.dice_binary.auc"]
    assert dice["verdict"].startswith("seed noise") and dice["estimate"] == "filters" and dice["sd"] == 0.03
    assert rows["ncct_demo.mae.auc"]["verdict"] == "deterministic: real change"
    assert rows["ncct_demo.rmse.auc"]["verdict"] == "unchanged"
    assert rows["ncct_demo.image.verification_auc"]["verdict"] == "beyond seed noise (4.0 SD of filters)"
    assert rows["ncct_demo.image.new_key"]["verdict"] == "added or removed"
    assert noise.noise_sd(SPREAD)[("relict.json", "ncct_demo.dice_binary.auc")] == (0.03, "filters")


def test_the_command_reads_a_saved_diff(tmp_path, capsys):
    (tmp_path / "spread.json").write_text(json.dumps(SPREAD))
    (tmp_path / "diff.json").write_text(json.dumps({"results/metrics/privacy.json": {
        "ncct_demo.image.verification_auc": {"old": 0.9, "new": 0.91, "diff": 0.01}}}))
    assert noise.main(["--spread", str(tmp_path / "spread.json"), "--diff-json", str(tmp_path / "diff.json")]) == 0
    out = capsys.readouterr().out
    assert "privacy.json  ncct_demo.image.verification_auc: 0.9 -> 0.91 (0.01): seed noise (within 2 SD of filters)" in out
    assert "1 changed: 0 real or beyond seed noise, 1 within seed noise" in out
    assert noise.main(["--spread", str(tmp_path / "missing.json")]) == 2


def test_seed_spread_merge_redoes_the_named_estimate_and_keeps_the_others(tmp_path):
    """``seed_spread --merge``: after a change that moves one model's metrics (the CVAE's, when the encoder
    changed), only that model's seeds rerun; the other models' spreads stay, and a file made with another
    seed count or numerics is refused rather than mixed."""
    import sys

    import pytest
    import yaml
    from workflow_helpers import ROOT

    sys.path.insert(0, str(ROOT / "bench"))
    from synthaudit import numerics
    from synthaudit_bench import seed_spread

    source = tmp_path / "demo"
    (source / "results" / "metrics").mkdir(parents=True)
    params = {"anonymise": {"seeds": [0, 1, 2]}}
    (source / "params.yaml").write_text(yaml.safe_dump(params))
    (source / "results/metrics/anonymise.json").write_text(json.dumps({"ncct_demo": {"auc": 0.354, "n": 3}}))
    work = tmp_path / "work"
    for i, seed in enumerate(range(3)):  # finished runs of each seed (done.json): nothing to run
        run = work / f"cvae-s{seed}"
        run.mkdir(parents=True)
        (run / "params.yaml").write_text(yaml.safe_dump({"anonymise": {"seeds": [seed]}}))
        (run / "done.json").write_text(json.dumps({"anonymise.json": {"ncct_demo.auc": 0.3 + 0.1 * i,
                                                                      "ncct_demo.n": 3.0}}))
    out = tmp_path / "spread.json"
    earlier = {"seeds": 3, "numerics": numerics.provenance(), "elapsed_s": 99.0,
               "estimates": {"unet": SPREAD["estimates"]["unet"], "cvae": {"metrics": {"anonymise.json": {}}}}}
    out.write_text(json.dumps(earlier))
    argv = ["--source", str(source), "--seeds", "3", "--estimates", "cvae", "--work", str(work), "--out", str(out),
            "--finished-only"]
    assert seed_spread.main(argv + ["--merge"]) == 0
    got = json.loads(out.read_text())
    assert got["estimates"]["unet"] == SPREAD["estimates"]["unet"]
    assert got["kept_from"] == {"estimates": ["unet"], "elapsed_s": 99.0}
    auc = got["estimates"]["cvae"]["metrics"]["anonymise.json"]["ncct_demo.auc"]
    assert auc["demo"] == 0.354 and auc["min"] == pytest.approx(0.3) and auc["max"] == pytest.approx(0.5)
    assert "ncct_demo.n" not in got["estimates"]["cvae"]["metrics"]["anonymise.json"]  # the same in every seed
    assert seed_spread.main(argv) == 0 and set(json.loads(out.read_text())["estimates"]) == {"cvae"}  # no merge
    out.write_text(json.dumps(earlier | {"seeds": 5}))
    with pytest.raises(SystemExit, match="5 seeds"):
        seed_spread.main(argv + ["--merge"])
