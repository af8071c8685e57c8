"""Where the installed workflow is: the Snakefile, rules, schemas, default params, profiles, envs.

Why: an audit workspace (``synthaudit init``) must run whatever synthaudit is installed, not a
checkout at a fixed path. The wheel carries the workflow as package data in
``synthaudit/_workflow/`` (pyproject: hatch force-include of the top-level ``Snakefile``,
``workflow/``, ``envs/``, ``params.yaml``); in a checkout the same folder holds
symbolic links to those top-level files, so an editable install resolves to the checkout's own.
"""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from importlib import metadata
from pathlib import Path

from . import __version__ as _FALLBACK_VERSION

WORKFLOW_DIR = Path(__file__).resolve().parent / "_workflow"


class ResourceError(RuntimeError):
    """The installed package lacks its workflow (a broken or partial install)."""

# where `synthaudit init` writes the input volumes it accepted with a warning (the verdict repeats them)
INPUT_WARNINGS = "data/input_warnings.tsv"

# where `synthaudit init` writes its time estimate per stage, which the verdict sets beside the measured times
ESTIMATE_FILE = "data/estimate.json"


def workflow_dir() -> Path:
    """The folder holding synthaudit's Snakefile, ``workflow/``, ``envs/`` and ``params.yaml``
    (in a checkout the links resolve to its top level)."""
    if not (WORKFLOW_DIR / "Snakefile").is_file():
        raise ResourceError(f"{WORKFLOW_DIR}: no Snakefile; this synthaudit install lacks its workflow "
                            "(reinstall the wheel, or `make install` in a checkout)")
    return (WORKFLOW_DIR / "Snakefile").resolve().parent


def snakefile() -> Path:
    """The workflow's Snakefile, for ``module ...: snakefile: synthaudit.resources.snakefile()``."""
    return workflow_dir() / "Snakefile"


def default_params() -> Path:
    """The default (demo) params.yaml, with its comments: what ``init`` starts from."""
    return workflow_dir() / "params.yaml"


def schema() -> Path:
    return workflow_dir() / "workflow" / "schemas" / "params.schema.yaml"


def profile(name: str) -> Path:
    """A Snakemake profile folder shipped with the workflow (default, demo, slurm)."""
    path = workflow_dir() / "workflow" / "profiles" / name
    if not (path / "config.yaml").is_file():
        raise ResourceError(f"no profile {name!r} in {path.parent}")
    return path


@lru_cache(maxsize=1)
def version() -> str:
    """The installed distribution's version (the package's own where it is not installed)."""
    try:
        return metadata.version("synthaudit")
    except metadata.PackageNotFoundError:
        return _FALLBACK_VERSION


def params_hash(params: dict) -> str:
    """SHA-256 of the parameters as canonical JSON (sorted keys): two runs with the same hash ran
    with the same scientific parameters, whatever the file's comments or key order."""
    text = json.dumps(params, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def provenance(params: dict | None = None, device: str | None = None) -> dict:
    """What every metrics file and the report record: which synthaudit, which parameters, the
    numerics mode (portable: the same bits on every x86-64 CPU with AVX2) and, where the caller
    knows it (``devices.describe_here``: the workflow's Snakefile), the device the jobs'
    ``device: auto`` resolves to. Torch-free, so every job's environment can import it."""
    from . import numerics

    out = {"version": version()}
    if params is not None:
        out["params_sha256"] = params_hash(params)
    out.update(numerics.provenance())
    if device is not None:
        out["device"] = device
    return out
