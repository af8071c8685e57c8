"""params.yaml validation: the shipped file is valid, bad files are refused with useful messages."""

import copy

import pytest
import yaml

from synthaudit.config import ParamsError, load_params, resolve_datasets, validate_params


@pytest.fixture
def params(root):
    return load_params(root / "params.yaml")


def test_shipped_params_are_valid(params):
    assert "ncct_demo" in params["datasets"]
    assert params["relict"]["n_closest"] >= 1


def _error(params) -> str:
    with pytest.raises(ParamsError) as exc:
        validate_params(params)
    return str(exc.value)


def test_bad_enum_names_key_and_allowed_values(params):
    p = copy.deepcopy(params)
    p["relict"]["measures"] = ["mae", "psnr"]
    msg = _error(p)
    assert "relict.measures.1" in msg and "'psnr'" in msg and "allowed values: ['mae', 'rmse', 'ssim'," in msg


def test_unknown_key_lists_allowed_keys(params):
    p = copy.deepcopy(params)
    p["relict"]["n_closets"] = 5
    msg = _error(p)
    assert "n_closets" in msg and "n_closest" in msg and "allowed keys" in msg


def test_wrong_type_and_range(params):
    p = copy.deepcopy(params)
    p["relict"]["n_closest"] = 0
    p["datasets"]["ncct_demo"]["preprocess"]["spacing_mm"] = "two"
    msg = _error(p)
    assert "relict.n_closest" in msg and "datasets.ncct_demo.preprocess.spacing_mm" in msg


def test_source_specific_required_key(params):
    p = copy.deepcopy(params)
    ds = p["datasets"]["ncct_demo"]
    ds["source"] = "manifest"
    msg = _error(p)
    assert "manifest" in msg and "required" in msg


def test_cross_field_rules(params):
    p = copy.deepcopy(params)
    demo = p["datasets"]["ncct_demo"]["demo"]
    demo["n_heldout_patients"] = demo["n_patients"]
    reg = p["datasets"]["ncct_demo"]["preprocess"]["registration"]
    reg["shrink_factors"] = [4] * (len(reg["smoothing_sigmas_vox"]) + 1)  # one level more than the sigmas
    msg = _error(p)
    assert "n_heldout_patients" in msg and "shrink_factors" in msg


def test_training_from_expands_to_the_training_dataset(params):
    resolved = resolve_datasets(params["datasets"])
    b2 = resolved["tof_demo_batch2"]
    assert b2["training_from"] == "tof_demo" and b2["source"] == "demo_tof"
    assert b2["demo"] == params["datasets"]["tof_demo"]["demo"]
    assert b2["segmentation"] == params["datasets"]["tof_demo"]["segmentation"]
    assert b2["synthetic"]["spiked"]["seed"] != params["datasets"]["tof_demo"]["synthetic"]["spiked"]["seed"]
    assert "filter_with" not in resolved["tof_demo"]  # nothing leaks back into the source


def test_training_from_errors(params):
    p = copy.deepcopy(params)
    p["datasets"]["tof_demo_batch2"]["training_from"] = "nope"
    assert "datasets.tof_demo_batch2.training_from: 'nope' is not a dataset" in _error(p)
    p = copy.deepcopy(params)
    p["datasets"]["tof_demo_batch2"]["preprocess"] = {"register": False}
    assert "datasets.tof_demo_batch2: ['preprocess'] come from 'tof_demo'" in _error(p)
    p = copy.deepcopy(params)
    p["datasets"]["batch3"] = {"training_from": "tof_demo_batch2", "synthetic": p["datasets"]["tof_demo_batch2"]["synthetic"]}
    assert "'tof_demo_batch2' itself takes its training set from 'tof_demo'" in _error(p)
    p = copy.deepcopy(params)  # checks of the expanded entry still apply: too many non-replicas
    p["datasets"]["tof_demo_batch2"]["synthetic"]["spiked"]["n_nonreplicas"] = 99
    p["datasets"]["tof_demo_batch2"]["synthetic"].pop("spiked")
    assert "datasets.tof_demo_batch2.synthetic" in _error(p)


def test_filter_measures_must_apply_to_the_filtered_dataset(params):
    p = copy.deepcopy(params)
    p["datasets"]["ncct_demo"]["filter_with"] = "tof_demo"
    assert "dice_multiclass needs more than one class in datasets.ncct_demo" in _error(p)


def test_unreadable_params_file(tmp_path):
    bad = tmp_path / "params.yaml"
    bad.write_text("datasets: [unclosed\n")
    with pytest.raises(ParamsError, match="not valid YAML"):
        load_params(bad)
    with pytest.raises(ParamsError, match="file not found"):
        load_params(tmp_path / "missing.yaml")


def test_every_params_key_has_a_comment(root):
    """Scientific parameters are documented where they are set (params.yaml comments)."""
    lines = (root / "params.yaml").read_text().splitlines()
    undocumented = []
    for i, line in enumerate(lines):
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or stripped.startswith("- "):
            continue
        if "#" in line:
            continue
        # a key without a comment is fine only if a comment block sits right above it,
        # or it is a section whose children are documented
        prev = lines[i - 1].strip() if i else ""
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        indent = len(line) - len(line.lstrip())
        is_section = stripped.endswith(":") and (len(nxt) - len(nxt.lstrip())) > indent
        if not (prev.startswith("#") or is_section):
            undocumented.append(stripped)
    assert not undocumented, f"params.yaml keys without a comment: {undocumented}"
    assert yaml.safe_load((root / "params.yaml").read_text())


def test_generator_sweep_makes_one_dataset_per_size(params):
    from synthaudit.config import sweep_datasets

    points = sweep_datasets(params)
    sizes = params["generator_sweep"]["n_training"]
    assert list(points) == [f"ncct_ldm_n{n}" for n in sizes]
    for n, entry in zip(sizes, points.values()):
        assert entry["training_from"] == "ncct_demo" and entry["synthetic"]["ldm"]["n_training"] == n
        assert entry["measures"] == ["rmse"] and entry["filter_with"] == "ncct_demo"
    assert params["datasets"]["ncct_ldm"]["synthetic"]["ldm"]["n_training"] is None  # the base is untouched


def test_generator_settings_are_checked_with_the_key_named(params):
    p = copy.deepcopy(params)
    p["datasets"]["ncct_ldm"]["synthetic"]["ldm"]["diffusion"]["num_head_channels"] = 5
    p["datasets"]["ncct_ldm"]["synthetic"]["ldm"]["autoencoder"]["chanels"] = [8]
    msg = _error(p)
    assert "datasets.ncct_ldm.synthetic.ldm.diffusion: num_head_channels 5 does not divide channels 32" in msg
    assert "datasets.ncct_ldm.synthetic.ldm.autoencoder:" in msg and "chanels" in msg
    p = copy.deepcopy(params)
    p["generator_sweep"]["dataset"] = "ncct_demo"
    assert "generator_sweep.dataset: 'ncct_demo' has synthetic.source 'spiked'" in _error(p)
    p = copy.deepcopy(params)
    p["relict"]["recall"]["measure"] = "dice_binary"
    assert "relict.recall.measure" in _error(p)


def test_feature_options_and_the_study_are_checked(params):
    p = copy.deepcopy(params)
    p["relict"]["features"].update(intensity="hu", input_window=None, grid=0)
    p["feature_study"]["datasets"] = ["ncct_demo", "nosuch", "ncct_ldm"]
    p["feature_study"]["networks"]["bad"] = {"extractor": "astra_resnet152", "input_window": [-100, 200]}
    msg = _error(p)
    assert "relict.features.grid" in msg  # schema: a grid of 0 cells
    p["relict"]["features"]["grid"] = [4, 4, 2]
    msg = _error(p)
    assert "relict.features.input_window: needed by intensity hu" in msg
    assert "feature_study.datasets: 'nosuch' is not a dataset" in msg
    assert "feature_study.datasets: 'ncct_ldm' has no rating and no known truth" in msg
    assert "feature_study.networks.bad.input_window" in msg


def test_validate_command_plans_every_dataset_of_the_shipped_params(root, capsys):
    """`python -m synthaudit validate` resolves training_from as the workflow does (it used to fail
    on the shipped params.yaml with a KeyError)."""
    from synthaudit.cli import main

    assert main(["validate", str(root / "params.yaml")]) == 0
    out = capsys.readouterr().out
    assert "ncct_demo_hard: 22 training, 22 held-out, 22 synthetic volumes" in out
    assert "ncct_ldm_n2:" in out and out.rstrip().endswith("valid")


def test_where_command_prints_the_calibrated_copy_counts(root, tmp_path, capsys):
    """`python -m synthaudit where` reads results/metrics/copies.json (Dar et al.'s two numbers)."""
    import json
    import shutil

    from synthaudit.cli import main

    shutil.copy(root / "params.yaml", tmp_path / "params.yaml")
    (tmp_path / "results/metrics").mkdir(parents=True)
    (tmp_path / "results/metrics/copies.json").write_text(json.dumps({"mine": {
        "rate": 0.05, "n_heldout": 22, "n_copies": 3, "percent_synthetic_copies": 12.5,
        "n_patients_copied": 2, "percent_patients_copied": 100 * 2 / 11}}))
    assert main(["where", "--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "mine: 3 synthetic volume(s) called copies at a false-positive rate of 0.05 (12.5 %), " \
           "2 training patient(s) copied (18.2 %); 22 held-out scans" in out


def test_schema_parsed_once_is_the_pure_python_parse_and_a_fresh_copy_each_call(tmp_path):
    """libyaml's loader (a second of every Snakemake start, every SLURM job's) gives the objects
    PyYAML's own SafeLoader gives; a caller changing its schema changes nobody else's; an edited
    schema file is parsed again."""
    from synthaudit import params_schema

    path = params_schema.SCHEMA_PATH
    pure = yaml.load(path.read_text(), Loader=yaml.SafeLoader)
    st = path.stat()
    assert params_schema._parsed(str(path.resolve()), st.st_mtime_ns, st.st_size) == pure
    first = params_schema.load_schema()
    first["$defs"]["measure"]["enum"].append("not_a_measure")
    first["properties"].clear()
    second = params_schema.load_schema()
    assert "not_a_measure" not in second["$defs"]["measure"]["enum"] and second["properties"]
    edited = tmp_path / "schema.yaml"
    edited.write_text("type: object\nproperties: {a: {default: 1}}\n")
    assert params_schema.load_schema(edited)["properties"]["a"]["default"] == 1
    edited.write_text("type: object\nproperties: {a: {default: 22}}\n")
    assert params_schema.load_schema(edited)["properties"]["a"]["default"] == 22
