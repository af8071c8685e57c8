"""synthaudit gate (issue 46): a finished audit's metrics against a policy, with exit status 0/1/2."""

from __future__ import annotations

import json

import pytest
import yaml

from synthaudit.cli import main
from synthaudit.review import gate


def _audit(root, n_copies=0, per_patient=(0, 0), flags=0.0, c_t=0.5, fd=(0.2, 0.15, 0.25, 0.1), local=0,
           frd=(14.6, 6.0, 6.5, 6.2, 5.9), c_t_power=0.95, membership=(0.52, 0.4, 0.58)):
    """An audit folder with the metrics files the workflow writes (the fields the gate reads)."""
    m = root / "results" / "metrics"
    m.mkdir(parents=True)
    (m / "copies.json").write_text(json.dumps({"audit": {
        "rate": 0.05, "n_heldout": 20, "n_copies": n_copies, "n_patients_copied": sum(p > 0 for p in per_patient),
        "local_n_called": local}}))
    (m / "fidelity.json").write_text(json.dumps({"audit": {
        "n_synthetic": 40, "c_t": c_t, "c_t_power": c_t_power, "c_t_power_copy_share": 0.2,
        "frechet_distance": {"value": fd[0], "ci_low": fd[1], "ci_high": fd[2], "floor": fd[3]},
        # FRD v1 ruled by one feature (the issue 63 case), the robust FRD near its floor
        "frd": {"value": frd[0], "ci_low": frd[0] - 1, "ci_high": frd[0] + 1, "floor": frd[4]},
        "frd_robust": {"value": frd[1], "ci_low": frd[2] - 1, "ci_high": frd[2], "floor": frd[4]}}}))
    (m / "privacy.json").write_text(json.dumps({"audit": {"image": {"synthetic": {"audit": {"flag_rate": flags}}}}}))
    (m / "membership.json").write_text(json.dumps({"audit": {"members": 60, "nonmembers": 40, "closest_mae": {
        "auc": membership[0], "auc_ci_low": membership[1], "auc_ci_high": membership[2]}}}))
    rel = root / "results" / "relict" / "audit"
    rel.mkdir(parents=True)
    rows = "".join(f"p{k}\t2\t{n}\n" for k, n in enumerate(per_patient))
    (rel / "copies.tsv").write_text("patient_id\tn_training_scans\tcombined_copies\n" + rows)
    return root


def _policy(tmp_path, **rules):
    base = yaml.safe_load(gate.default_policy().read_text())
    for k, v in rules.items():
        base["rules"][k].update(v)
    p = tmp_path / "policy.yaml"
    p.write_text(yaml.safe_dump(base))
    return p


def test_a_clean_audit_passes_the_default_policy(tmp_path, capsys):
    root = _audit(tmp_path / "ws")
    assert main(["gate", str(root)]) == 0
    out = json.loads((root / "results/gate.json").read_text())
    assert out["result"] == "pass" and out["exit_status"] == 0
    assert {c["rule"] for c in out["checks"]} == {"calibrated_copies", "copies_per_patient", "local_copies",
                                                  "privacy_flag_rate", "c_t", "frechet_distance_vs_floor",
                                                  "membership_auc"}
    text = capsys.readouterr().out
    assert "PASS  audit: calibrated_copies 0 (limit <= 0)" in text and text.strip().endswith("gate: PASS")


def test_a_planted_copy_turns_the_gate_from_pass_to_fail(tmp_path):
    assert main(["gate", str(_audit(tmp_path / "clean"))]) == 0
    copied = _audit(tmp_path / "copied", n_copies=1, per_patient=(0, 1))
    assert main(["gate", str(copied)]) == 1
    checks = {c["rule"]: c for c in json.loads((copied / "results/gate.json").read_text())["checks"]}
    assert checks["calibrated_copies"]["verdict"] == "fail" and checks["copies_per_patient"]["verdict"] == "pass"


def test_inconclusive_where_an_interval_straddles_the_limit_or_a_required_metric_is_missing(tmp_path):
    # FD 2x its floor with a CI of 1.5x-2.5x against a limit of 2x: inconclusive, not pass or fail
    root = _audit(tmp_path / "ws", fd=(0.2, 0.15, 0.25, 0.1))
    assert main(["gate", str(root), "--policy", str(_policy(tmp_path, frechet_distance_vs_floor={"max": 2.0}))]) == 2
    # 4 volumes of 40 flagged (10 %): its exact 95 % interval reaches 24 %, above the 15 % limit
    assert main(["gate", str(_audit(tmp_path / "flagged", flags=4 / 40))]) == 2
    assert gate.clopper_pearson(4, 40, 0.95)[1] > 0.15 > gate.clopper_pearson(0, 40, 0.95)[1]
    # no copies.tsv: the required per-patient rule cannot be judged
    bare = _audit(tmp_path / "bare")
    (bare / "results/relict/audit/copies.tsv").unlink()
    assert main(["gate", str(bare)]) == 2
    # a failure outranks an inconclusive rule
    assert main(["gate", str(_audit(tmp_path / "both", c_t=-3.0, flags=4 / 40))]) == 1


def test_an_underpowered_c_t_never_passes(tmp_path):
    """Issue 63: at 50 samples and 20 held-out scans C_T detects 20 % copying with probability ~0.01, so a
    C_T near 0 says nothing; the rule is not applicable (or inconclusive, as the policy says), never pass. A
    C_T below the limit still fails: copying seen is copying, whatever the power."""
    from synthaudit.fidelity.measures import c_t_power

    def c_t_check(root, policy=None):
        main(["gate", str(root)] + (["--policy", str(policy)] if policy else []))
        return {c["rule"]: c for c in json.loads((root / "results/gate.json").read_text())["checks"]}["c_t"]

    weak = c_t_power(20, 50, 3, 0.2, 2.0)["probability"]
    assert weak < 0.05
    check = c_t_check(_audit(tmp_path / "weak", c_t=-1.25, c_t_power=weak))
    assert check["verdict"] == "not applicable" and "underpowered" in check["why"]  # the shipped policy
    hold = _policy(tmp_path, c_t={"underpowered": "inconclusive"})
    assert c_t_check(_audit(tmp_path / "hold", c_t=-1.25, c_t_power=weak), hold)["verdict"] == "inconclusive"
    assert c_t_check(_audit(tmp_path / "seen", c_t=-3.1, c_t_power=weak))["verdict"] == "fail"
    assert c_t_check(_audit(tmp_path / "strong", c_t=-1.25, c_t_power=0.9))["verdict"] == "pass"


def test_the_frd_rule_reads_the_robust_frd_as_a_ratio_of_squared_distances(tmp_path):
    """FRD v1 at 14.6 against a floor of 5.9 would be e^8.7 = 6,000x the floor: one feature constant over the
    training scans (issue 63). The rule reads the robust FRD: e^0.1 = 1.1x passes; far above fails; a CI
    across the limit is inconclusive; without FRD the rule is not applicable."""
    policy = _policy(tmp_path)  # the shipped policy leaves the rule commented out: a lab's limit
    policy.write_text(policy.read_text().replace("rules:\n", "rules:\n  frd_vs_floor: {max: 10.0}\n", 1))

    def verdict(root):
        main(["gate", str(root), "--policy", str(policy)])
        return {c["rule"]: c for c in json.loads((root / "results/gate.json").read_text())["checks"]}["frd_vs_floor"]

    ok = verdict(_audit(tmp_path / "ok"))
    assert ok["verdict"] == "pass" and ok["value"] == pytest.approx(2.718281828 ** 0.1)
    assert verdict(_audit(tmp_path / "far", frd=(14.6, 9.0, 9.5, 10.0, 5.9)))["verdict"] == "fail"  # e^3.1 = 22x
    assert verdict(_audit(tmp_path / "near", frd=(14.6, 8.0, 8.6, 9.0, 5.9)))["verdict"] == "inconclusive"
    bare = _audit(tmp_path / "bare")
    f = json.loads((bare / "results/metrics/fidelity.json").read_text())
    del f["audit"]["frd"], f["audit"]["frd_robust"]
    (bare / "results/metrics/fidelity.json").write_text(json.dumps(f))
    assert verdict(bare)["verdict"] == "not applicable"


def test_a_stage_that_did_not_run_is_not_applicable_unless_required(tmp_path):
    root = _audit(tmp_path / "ws")
    (root / "results/metrics/privacy.json").unlink()
    (root / "results/metrics/fidelity.json").unlink()
    assert main(["gate", str(root)]) == 0
    verdicts = {c["rule"]: c["verdict"] for c in json.loads((root / "results/gate.json").read_text())["checks"]}
    assert verdicts["privacy_flag_rate"] == verdicts["c_t"] == "not applicable"
    policy = _policy(tmp_path, c_t={"required": True})
    assert main(["gate", str(root), "--policy", str(policy)]) == 2


def test_a_bad_policy_names_the_file_and_the_key(tmp_path, capsys):
    bad = tmp_path / "policy.yaml"
    bad.write_text("rules:\n  calibrated_copies: {max: -1}\n  made_up: {max: 1}\n")
    with pytest.raises(gate.PolicyError, match=r"policy.yaml: .*calibrated_copies.max"):
        gate.load_policy(bad)
    assert main(["gate", str(_audit(tmp_path / "ws")), "--policy", str(bad)]) == 2
    assert "policy.yaml" in capsys.readouterr().err
    assert main(["gate", str(tmp_path / "nothing")]) == 2  # no results/metrics: says what to run


def test_the_card_names_every_input_by_hash_and_verify_card_finds_one_changed_file(tmp_path, capsys):
    """synthaudit card / verify-card (issue 46): the card of an init workspace lists each training,
    held-out and synthetic file with its SHA-256; a reader's folder is checked file by file."""
    import numpy as np

    from synthaudit.io import save_volume
    from synthaudit.workspace import Inputs, write_workspace

    rng = np.random.default_rng(0)
    affine = np.diag([2.0, 2.0, 2.0, 1.0])
    for folder, names in (("training", [f"p{k}_s0" for k in range(4)]), ("heldout", ["q0_s0", "q1_s0"]),
                          ("synthetic", ["gen0", "gen1", "gen2"])):
        for n in names:
            save_volume(tmp_path / "in" / folder / f"{n}.nii.gz", rng.random((10, 12, 9)).astype(np.float32), affine)
    inp = Inputs(training=tmp_path / "in/training", synthetic=tmp_path / "in/synthetic",
                 heldout=tmp_path / "in/heldout", registered=True)
    ws = tmp_path / "ws"
    write_workspace(ws, inp, progress=lambda m: None)
    assert main(["card", str(ws)]) == 0
    card = json.loads((ws / "results/audit_card.json").read_text())
    rows = card["files"]["audit"]
    assert sorted(r["role"] for r in rows) == ["heldout"] * 2 + ["synthetic"] * 3 + ["train"] * 4
    assert all(len(r["sha256"]) == 64 for r in rows)
    assert card["gate"]["result"] == "inconclusive"  # nothing run yet: the required copy rules lack metrics
    assert "# Audit card" in (ws / "results/audit_card.md").read_text()
    capsys.readouterr()
    assert main(["verify-card", str(ws / "results/audit_card.json"), str(tmp_path / "in/synthetic")]) == 0
    assert "3 of 3 volume(s) match the card" in capsys.readouterr().out
    save_volume(tmp_path / "in/synthetic/gen1.nii.gz", rng.random((10, 12, 9)).astype(np.float32), affine)
    assert main(["verify-card", str(ws / "results/audit_card.json"), str(tmp_path / "in/synthetic")]) == 1
    out = capsys.readouterr().out
    assert "CHANGED" in out and "gen1.nii.gz" in out and "2 of 3 volume(s) match" in out


def test_privacy_flags_without_a_sample_count_are_missing_not_a_crash(tmp_path):
    # the tiny demo's generator set: filters judged it, but no metrics file gave its number of samples
    root = _audit(tmp_path / "ws")
    (root / "results/metrics/fidelity.json").unlink()
    checks = gate.evaluate(root, gate.load_policy())
    flag = [c for c in checks if c.rule == "privacy_flag_rate"]
    assert [c.verdict for c in flag] == ["not applicable"] and "number of samples" in flag[0].why
    (root / "results/relict/audit/ranking_rmse.tsv").write_text("synthetic_id\trank\n" + "".join(
        f"s{k}\t{k}\n" for k in range(40)))
    flag = [c for c in gate.evaluate(root, gate.load_policy()) if c.rule == "privacy_flag_rate"]
    assert flag[0].verdict == "pass" and flag[0].ci[1] < 0.15  # 0 of 40 flagged: its interval below the limit
