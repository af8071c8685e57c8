"""Writing the workspace: the manifest, params.yaml, Snakefile and dvc.yaml, checked as the workflow
will read them before anything is left behind."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from .. import resources
from ..io import write_json, write_tsv
from ..resources import ESTIMATE_FILE
from .checks import CT_WINDOW, FLAT_WARNINGS, WARNINGS_FILE, WARNING_COLUMNS, check_volumes
from .discover import (Inputs, MANIFEST_COLUMNS, WorkspaceError, build_manifest, check_case_collisions,
                       convert_dicom_inputs, is_dicom_folder, nifti_files, nnunet_inputs, within)
from .estimate import class_names, derived_defaults, plan
from .params_text import params_text


SNAKEFILE = '''"""synthaudit audit workspace (written by `synthaudit init` {version}).

Runs synthaudit's rules as a Snakemake module, the snakemake-workflows convention: this
folder holds the configuration (params.yaml) and receives every result (results/, logs/).
Run: `snakemake --cores all` here (profiles/default is picked up), or `dvc repro`.

The workflow is the installed synthaudit's (no checkout is named here: updating or moving
one changes nothing). To pin a released workflow instead, `snakedeploy deploy-workflow
<repository URL> . --tag v<version>` writes the same module with a github(...) snakefile.
"""

import synthaudit.resources


configfile: "params.yaml"


module synthaudit:
    snakefile:
        str(synthaudit.resources.snakefile())
    config:
        config


use rule * from synthaudit
'''


DVC = """# `dvc repro` re-runs the audit when params.yaml or the manifest changes (the stage calls
# Snakemake, which decides what to redo); `dvc metrics diff` compares runs. Outputs are not
# cached (they can be large; Snakemake owns them) and persist between runs.
stages:
  audit:
    cmd: snakemake --cores all && snakemake --cores 1 --report results/report.html
    deps:
      - data/manifest.tsv
    params:
      - datasets
      - relict
      - privacy
    outs:
      - results/preprocessed:
          cache: false
          persist: true
      - results/synthetic:
          cache: false
          persist: true
      - results/relict:
          cache: false
          persist: true
      - results/figures:
          cache: false
          persist: true
    metrics:
      - results/metrics/relict.json:
          cache: false
      - results/metrics/copies.json:
          cache: false
"""


def write_workspace(target: Path, inp: Inputs, progress=print) -> dict:
    """Check the folders, then write the workspace. Returns the plan (for printing).

    The folder is assembled beside ``target`` under a temporary name and renamed into place
    last: a failure at any step (a bad input, a full disk, an interrupt) leaves no half-written
    workspace that a second ``init`` would refuse."""
    target = Path(target)
    if (target / "params.yaml").exists():
        raise WorkspaceError(f"{target}: already holds a params.yaml (choose a new folder; nothing was changed)")
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise WorkspaceError(f"{target}: exists and is not an empty folder (choose a new folder; nothing was changed)")
    if not re.match(r"^[a-z][a-z0-9_]*$", inp.name):
        raise WorkspaceError(f"--name {inp.name!r}: lower-case letters, digits and '_', starting with a letter")
    import tempfile

    staging = None
    if any(is_dicom_folder(f) for f in (inp.training, inp.heldout, inp.synthetic) if f):
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".tmp-{target.name}-", dir=target.parent))
    try:
        return _write_workspace(target, inp, progress, staging)
    except BaseException:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        raise


def _write_workspace(target: Path, inp: Inputs, progress, staging: Path | None) -> dict:
    """write_workspace once the target is known to be free; ``staging``: the temporary workspace
    where DICOM series are converted first (their files then move with it), or None."""
    import tempfile

    if staging is not None:
        inp = convert_dicom_inputs(inp, staging / "data" / "converted", progress)
    inp = nnunet_inputs(inp, progress)
    rows, how = build_manifest(inp)
    if staging is not None:  # the patients' table of converted series: named where it will be, not in the staging
        how = how.replace(str(staging), str(target))
    synthetic = nifti_files(inp.synthetic, "synthetic")
    synthetic_labels = None
    if inp.synthetic_labels:
        if not inp.labels:
            raise WorkspaceError("--synthetic-labels needs --labels (the training scans' label maps) too")
        synthetic_labels = nifti_files(inp.synthetic_labels, "synthetic label")
        missing = sorted(set(synthetic) - set(synthetic_labels))
        if missing:
            raise WorkspaceError(f"{inp.synthetic_labels}: no label map for {len(missing)} synthetic volume(s), "
                                 f"e.g. {missing[:5]}")
    clash = sorted({r["id"] for r in rows} & set(synthetic))
    if clash:
        raise WorkspaceError(f"{inp.synthetic}: ids also used by real scans: {clash[:5]}")
    check_case_collisions([r["id"] for r in rows] + list(synthetic), f"{inp.training} and {inp.synthetic}")
    progress(f"checking {len(rows)} real and {len(synthetic)} synthetic volumes ...")
    window = CT_WINDOW if not inp.registered and inp.modality == "ct" else None
    summary = check_volumes(rows, synthetic, synthetic_labels, inp.registered, progress, classes=inp.classes,
                            window=window)
    costs = _timed_costs(inp, rows, synthetic, summary, progress) if inp.timing else None
    derived = derived_defaults(inp, rows, len(synthetic), summary, costs)
    result = plan(inp, rows, how, synthetic, summary, derived)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = staging or Path(tempfile.mkdtemp(prefix=f".tmp-{target.name}-", dir=target.parent))
    try:
        _write_files(tmp, inp, within(rows, tmp / "data"), summary, derived)
        write_json(tmp / ESTIMATE_FILE, {"dataset": inp.name, **result["estimate"]})
        _check_as_the_workflow_will(tmp)
        if target.is_dir():
            target.rmdir()  # empty (checked above); rename cannot replace a folder on every platform
        tmp.rename(target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return result


def _timed_costs(inp: Inputs, rows: list[dict], synthetic: dict, summary: dict, progress):
    """The heavy stages timed on the user's samples (.timing), with the settings the workspace will run."""
    from .estimate import _repo_params, _spacing_of, astra_installed, privacy_possible
    from .timing import measure_costs

    shipped = _repo_params()
    params = shipped["relict"]
    features = dict(params["features"])
    if astra_installed():  # what derived_defaults will write
        features["extractor"] = "astra_resnet152"
    # an empty or constant sample has nothing to time (FRD's z-scoring divides by its zero spread): timed on
    # the others, and in words where every sample is such (check_volumes warned about each one)
    flat = {w["id"] for w in summary.get("warnings") or [] if w["role"] == "synthetic"
            and w["warning"].startswith(FLAT_WARNINGS)}
    usable = [path for i, path in synthetic.items() if i not in flat]
    if not usable:
        progress(f"  timing skipped: every sample is empty or constant ({len(flat)}; data/input_warnings.tsv), so "
                 "there is nothing to time on; the estimate uses the constants instead")
        return None
    if flat:
        progress(f"  {len(flat)} empty or constant sample(s) left out of the timing (data/input_warnings.tsv)")
    first = usable[0]
    try:
        return measure_costs(usable, features, params["alignment"], _spacing_of(str(first)),
                             progress=progress, local_cfg=params["local"],
                             privacy_cfg=shipped["privacy"] if privacy_possible(rows)[0] else None,
                             labelled=_labelled_scan(inp, rows, summary))
    except Exception as e:  # the estimate is advice: a failure to time (memory, a missing encoder) must not stop init
        # a ValueError is the data's (a volume smaller than SSIM's window): its message says why in words
        why = str(e) if isinstance(e, ValueError) else f"{type(e).__name__}: {e}"
        progress(f"  timing failed ({why}); the estimate uses the constants instead")
        return None


def _labelled_scan(inp: Inputs, rows: list[dict], summary: dict) -> tuple[str, str, int] | None:
    """A training scan with its label map and the number of classes, where the scans are on the audit's grid
    already (``--registered``): FRD within label classes is timed on it. None otherwise (registration
    first makes the grid the jobs read)."""
    if not inp.registered:
        return None
    row = next((r for r in rows if r["role"] == "train" and r.get("label")), None)
    if row is None:
        return None
    return row["image"], row["label"], len(class_names(inp, summary))


def _check_as_the_workflow_will(folder: Path) -> None:
    """The written params against the schema and every dataset planned, as the workflow will
    (paths in params.yaml are relative to the workspace, where Snakemake runs)."""
    import os

    from ..config import ParamsError, load_params
    from ..workflow_plan import PlanError, WorkflowPlan

    here = os.getcwd()
    os.chdir(folder)
    try:
        WorkflowPlan(load_params("params.yaml"))
    except (PlanError, ParamsError) as e:
        raise WorkspaceError(str(e)) from None
    finally:
        os.chdir(here)


def _write_files(folder: Path, inp: Inputs, rows: list[dict], summary: dict, derived: dict) -> None:
    """Every file of a workspace, into ``folder``; params.yaml is parsed back before anything else
    is written, so a value that broke the YAML would stop here, not in Snakemake."""
    import yaml

    text = params_text(inp, summary, rows, derived=derived, workspace=folder)
    try:
        yaml.safe_load(text)
    except yaml.YAMLError as e:  # a defect of this module, never of the user's input
        raise WorkspaceError(f"internal error: the params.yaml init wrote is not valid YAML ({e}); please report it")
    (folder / "data").mkdir(exist_ok=True)  # it holds data/converted/ where DICOM series were converted
    write_tsv(folder / "data/manifest.tsv", rows, MANIFEST_COLUMNS)
    if summary["warnings"]:  # repeated by the verdict (review/verdict.py), so they are read after the run too
        write_tsv(folder / WARNINGS_FILE, [{"dataset": inp.name, **w} for w in summary["warnings"]], WARNING_COLUMNS)
    (folder / "params.yaml").write_text(text)
    (folder / "Snakefile").write_text(SNAKEFILE.format(version=resources.version()))
    (folder / "dvc.yaml").write_text(DVC)
    (folder / ".dvc").mkdir()  # a DVC project without Git (run `git init` + `dvc init` to track it)
    (folder / ".dvc/config").write_text("[core]\n    no_scm = True\n    analytics = false\n")
    for profile in ("default", "slurm"):
        (folder / "profiles" / profile).mkdir(parents=True)
        shutil.copy(resources.profile(profile) / "config.yaml", folder / "profiles" / profile / "config.yaml")
    (folder / ".gitignore").write_text("results/\nlogs/\n.snakemake/\nbenchmarks/\n")
