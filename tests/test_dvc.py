"""DVC behaviour on a copy of the repository with a tiny configuration:
`dvc repro` runs the DAG through Snakemake; a second `dvc repro` does nothing; changing
relict.n_closest re-runs only the RELICT stage and what follows; `dvc metrics diff` shows it."""

import json
import shutil
import subprocess

import pytest
import yaml

from workflow_helpers import ROOT, env, image_level_only, tiny_params, write_params

pytestmark = [pytest.mark.workflow, pytest.mark.e2e]  # make test-e2e

STAGES = ("cohort", "preprocess", "synthetic", "privacy", "anonymise", "relict", "feature_study", "figures")


PROFILE = {}


def run(cmd, cwd, stdout_only=False):
    # dvc calls `snakemake --workflow-profile ...`; a user profile in SNAKEMAKE_PROFILE adds
    # max-threads 1 (tiny volumes: two one-thread jobs side by side beat one two-thread job)
    proc = subprocess.run(cmd, cwd=cwd, env={**env(), **PROFILE}, capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return proc.stdout if stdout_only else proc.stdout + proc.stderr


def ran_stages(output: str) -> set[str]:
    return {s for s in STAGES if f"Running stage '{s}'" in output}


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    repo = tmp_path_factory.mktemp("dvcrepo")
    profile = tmp_path_factory.mktemp("profile")
    (profile / "config.yaml").write_text("max-threads: 1\n")
    PROFILE["SNAKEMAKE_PROFILE"] = str(profile)
    ignore = shutil.ignore_patterns("*.pyc")  # keeps numba's kernel cache (__pycache__/*.nbi|nbc): no recompiling
    for item in ("Snakefile", "dvc.yaml", ".dvcignore", ".gitignore"):
        shutil.copy2(ROOT / item, repo / item)
    for folder in ("workflow", "envs", "src"):  # src/: dvc.yaml's stages depend on the library's files
        shutil.copytree(ROOT / folder, repo / folder, ignore=ignore, symlinks=True)
    (repo / ".dvc").mkdir()
    shutil.copy2(ROOT / ".dvc" / "config", repo / ".dvc" / "config")
    shutil.copy2(ROOT / ".dvc" / ".gitignore", repo / ".dvc" / ".gitignore")
    params = image_level_only(tiny_params())
    demo = params["datasets"]["ncct_demo"]  # 3 training and 2 held-out patients: mechanics, not science
    demo["demo"].update(n_patients=5, n_heldout_patients=2)
    demo["synthetic"]["spiked"].update(n_replicas=3, n_nonreplicas=3)
    params["relict"]["measures"] = ["mae", "rmse"]
    params["feature_study"]["networks"] = {"r10": {"extractor": "medicalnet_resnet10", "seed": 0}}  # the stage's mechanics
    write_params(repo, params)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.org"]
    run(["git", "init", "-q"], repo)
    run([*git, "add", "-A"], repo)
    run([*git, "commit", "-qm", "init"], repo)
    first = run(["dvc", "repro"], repo)
    run([*git, "add", "-A"], repo)
    run([*git, "commit", "-qm", "first repro"], repo)
    return repo, first, git


def test_first_repro_runs_every_stage_and_writes_metrics(repo):
    path, first, _ = repo
    assert ran_stages(first) == set(STAGES)
    metrics = json.loads((path / "results/metrics/relict.json").read_text())
    assert set(metrics["ncct_demo"]) == {"mae", "rmse"}
    copies = json.loads((path / "results/metrics/copies.json").read_text())  # calibrated copy counts
    assert copies["ncct_demo"]["rate"] == 0.2 and copies["ncct_demo"]["n_heldout"] >= 4
    assert (path / "results/report.html").stat().st_size > 10_000
    assert "analytics = false" in (path / ".dvc/config").read_text()


def test_second_repro_does_nothing(repo):
    path, _, _ = repo
    out = run(["dvc", "repro"], path)
    assert ran_stages(out) == set(), out


def test_changing_n_reruns_only_relict_and_after(repo):
    path, _, _ = repo
    params = yaml.safe_load((path / "params.yaml").read_text())
    params["relict"]["n_closest"] = 3
    write_params(path, params)
    out = run(["dvc", "repro"], path)
    # anonymise reads results/relict; the feature-level study scores with relict.n_closest
    assert ran_stages(out) == {"relict", "anonymise", "feature_study", "figures"}, out
    diff = run(["dvc", "metrics", "diff", "--json"], path, stdout_only=True)
    changes = json.loads(diff)["results/metrics/relict.json"]
    assert changes["ncct_demo.mae.n_closest_used"] == {"old": 4, "new": 3, "diff": -1}
