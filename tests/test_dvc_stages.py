"""Static check of dvc.yaml: a DVC stage re-runs only when one of its deps changes, so every
script that the stage's rule files call must be a dep (or lie in a folder that is one), else
`dvc repro` silently keeps results of the old code."""

import re

import yaml

from test_envs import ROOT, rule_blocks

DVC = yaml.safe_load((ROOT / "dvc.yaml").read_text())


# rules that live in one stage's rule file but run in another stage's target (that stage's deps
# must name their script instead)
RUN_BY = {"feature_study": "feature_study", "feature_study_table": "feature_study", "generator_sweep": "figures"}


def covered(path: str, deps: list[str]) -> bool:
    return any(path == d or path.startswith(d.rstrip("/") + "/") for d in deps)


def test_every_script_a_stage_runs_is_one_of_its_deps():
    missing, checked = [], 0
    for stage, spec in DVC["stages"].items():
        deps = [d for d in spec.get("deps", []) if isinstance(d, str)]
        smk_files = {d for d in deps if d.endswith(".smk")}
        for smk, name, body in rule_blocks():
            if f"workflow/rules/{smk.name}" not in smk_files:
                continue
            owner = RUN_BY.get(name, stage)
            owner_deps = [d for d in DVC["stages"][owner].get("deps", []) if isinstance(d, str)]
            for script in re.findall(r"\"\.\./scripts/([\w/]+\.py)\"", body):
                checked += 1
                if not covered(f"workflow/scripts/{script}", owner_deps):
                    missing.append(f"stage {stage}: rule {name} runs workflow/scripts/{script}")
    assert checked >= 20
    assert not missing, "\n".join(missing)


def test_every_params_key_the_relict_rules_read_is_a_stage_param():
    # relict.calibration decides the calibrated calls; a change must re-run the relict stage
    # (the datasets and measures each stage plans with are read by synthaudit.workflow_plan)
    files = ["workflow/rules/relict.smk", "workflow/rules/recall.smk", "workflow/rules/common.smk",
             "src/synthaudit/workflow_plan.py"]
    text = "".join((ROOT / f).read_text() for f in files)
    params = DVC["stages"]["relict"]["params"]
    keys = re.findall(r"config\[\"relict\"\](?:\[\"(\w+)\"\]|\.get\(\"(\w+)\"\))", text)
    assert len(keys) >= 5
    for key in sorted({a or b for a, b in keys} - {"review"}):  # review: the figures stage's (review.smk)
        assert f"relict.{key}" in params or "relict" in params, f"relict.{key} is not a param of the relict stage"
