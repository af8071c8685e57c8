"""Static check of dvc.yaml: a DVC stage re-runs only when one of its deps changes, so every
script that the stage's rule files call must be a dep (or lie in a folder that is one), else
`dvc repro` silently keeps results of the old code."""

import re

import yaml

from test_envs import ROOT, rule_blocks

DVC = yaml.safe_load((ROOT / "dvc.yaml").read_text())




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
            owner = _dvc_deps().RUN_BY.get(name, stage)  # a rule run by another stage's target
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
    files = [*(f"workflow/rules/relict{part}.smk" for part in ("", "_null", "_review", "_local")),
             "workflow/rules/recall.smk", "workflow/rules/common.smk",
             "src/synthaudit/workflow_plan.py"]
    text = "".join((ROOT / f).read_text() for f in files)
    params = DVC["stages"]["relict"]["params"]
    keys = re.findall(r"config\[\"relict\"\](?:\[\"(\w+)\"\]|\.get\(\"(\w+)\"\))", text)
    assert len(keys) >= 5
    for key in sorted({a or b for a, b in keys} - {"review"}):  # review: the figures stage's (review.smk)
        assert f"relict.{key}" in params or "relict" in params, f"relict.{key} is not a param of the relict stage"


def _dvc_deps():
    import importlib.util

    spec = importlib.util.spec_from_file_location("dvc_deps", ROOT / ".ci" / "dvc_deps.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_code_deps_are_the_modules_each_stage_imports_file_by_file():
    """dvc.yaml's code deps are what .ci/dvc_deps.py finds (python .ci/dvc_deps.py --write), no
    library folder is a dep (a docstring edit in one module re-runs only the stages that import
    it), and the finder follows imports: the local level's module is the relict stage's alone."""
    want = _dvc_deps().expected(DVC)
    for stage, spec in DVC["stages"].items():
        have = spec.get("deps", [])
        assert set(have) == set(want[stage]), f"stage {stage}: python .ci/dvc_deps.py --write"
        assert not [d for d in have if d.startswith("src/") and not d.endswith(".py")], stage
    owners = [s for s, spec in DVC["stages"].items() if "src/synthaudit/relict/local.py" in spec["deps"]]
    assert owners == ["relict"]
    assert all("workflow/schemas/params.schema.yaml" in spec["deps"] for spec in DVC["stages"].values())
    assert "src/synthaudit/privacy/metrics.py" in DVC["stages"]["privacy"]["deps"]
    assert "src/synthaudit/privacy/metrics.py" not in DVC["stages"]["relict"]["deps"]
    # the extractors the registry imports by name (features.extractors._BUILTIN_MODULES), not by an import line
    for module in ("src/synthaudit/features/i3resnet.py", "src/synthaudit/features/medicalnet.py"):
        assert module in DVC["stages"]["feature_study"]["deps"] and module in DVC["stages"]["relict"]["deps"]
