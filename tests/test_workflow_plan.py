"""The workflow's plan without Snakemake (synthaudit.workflow_plan): which datasets get
which stage, the measures per dataset, generator checkpoints and the refusals that come
before any job. tests/test_workflow.py runs the same plan through Snakemake."""

import copy
import re

import pytest
import yaml

from synthaudit import registry
from synthaudit.workflow_plan import PlanError, WorkflowPlan, alternatives, label_of
from workflow_helpers import ROOT, ncct_only, tiny_params


@pytest.fixture(scope="module")
def shipped_params():
    return yaml.safe_load((ROOT / "params.yaml").read_text())


@pytest.fixture(scope="module")
def shipped(shipped_params):
    return WorkflowPlan(copy.deepcopy(shipped_params))


@pytest.fixture(scope="module")
def tiny():
    return tiny_params()


def _user_params(tmp_path, labelled=("a0",), heldout_patients=("pc",), synthetic_labels=False):
    """A manifest dataset of empty files (the plan only checks that they exist): six
    training scans of three patients, held-out scans of ``heldout_patients``, three synthetic."""
    data = tmp_path / "data"
    (data / "images").mkdir(parents=True)
    (data / "labels").mkdir()
    rows = ["id\timage\tlabel\tpatient_id\trole"]
    scans = [(f"{p[1]}{s}", p, "train") for p in ("pa", "pb", "pd") for s in range(2)]
    scans += [(f"{p[1]}{s}", p, "heldout") for p in heldout_patients for s in range(2)]
    for sid, patient, role in scans:
        (data / "images" / f"{sid}.nii.gz").touch()
        label = f"labels/{sid}.nii.gz" if sid in labelled else ""
        if label:
            (data / label).touch()
        rows.append(f"{sid}\timages/{sid}.nii.gz\t{label}\t{patient}\t{role}")
    (data / "manifest.tsv").write_text("\n".join(rows) + "\n")
    syn = tmp_path / "generated"
    syn.mkdir()
    for name in ("gen_a", "gen_b", "gen_c"):
        (syn / f"{name}.nii.gz").touch()
    p = tiny_params()
    ds = p["datasets"].pop("ncct_demo")
    ds.pop("demo")
    ds["source"], ds["manifest"] = "manifest", str(data / "manifest.tsv")
    ds["preprocess"]["register"] = False
    ds["preprocess"]["intensity"] = {"window": None, "rescale": False}
    ds["synthetic"] = {"source": "folder", "folder": str(syn)}
    ds["segmentation"] = {"source": "labels", "classes": ["structure"]}
    if synthetic_labels:
        ds["segmentation"]["synthetic_labels"] = str(syn / "labels")
    p["datasets"] = {"mydata": ds}
    p["relict"]["measures"] = ["mae", "rmse", "dice_binary"]
    p["relict"]["alignment"]["datasets"] = []
    p["relict"]["review"]["filter_measures"] = ["rmse"]
    p["relict"]["n_closest"] = 3
    p["generator_sweep"]["dataset"] = None
    p["privacy"]["training_sets"] = []
    p["anonymise"]["datasets"] = {}
    p["feature_study"]["datasets"] = []
    return p


# -- datasets per stage -----------------------------------------------------------------------


def test_shipped_params_training_sets_and_sweep(shipped, shipped_params):
    given = shipped_params["datasets"]
    shared = [d for d in given if given[d].get("training_from")]
    assert shared, "params.yaml should exercise training_from"
    for d in shared:
        assert shipped.training_of[d] == given[d]["training_from"] != d
        assert d not in shipped.own_training
        # the training side is the named dataset's: nothing of it is preprocessed again
        assert all(p.startswith(f"results/preprocessed/{given[d]['training_from']}/")
                   for p in shipped.preprocessed_images(d))
        assert shipped.grid_json(d) == f"results/preprocessed/{given[d]['training_from']}/grid.json"
        assert shipped.all_volume_ids(d) == [v.id for v in shipped.plans[d].synthetic]
    assert shipped.own_training == [d for d in given if not given[d].get("training_from")]
    sweep = shipped_params["generator_sweep"]
    if sweep.get("dataset"):
        names = [f"{sweep['dataset']}_n{n}" for n in sweep["n_training"]]
        assert shipped.sweep_datasets == names
        assert set(names) <= set(shipped.datasets) and not set(names) & set(shipped.reviewed_datasets)
        assert all(shipped.ae_owner[d] == sweep["dataset"] for d in names)
        assert names[0] not in shipped.ae_datasets and sweep["dataset"] in shipped.ae_datasets
        sizes = [len(shipped.generator_training_ids(d)) for d in shipped.sweep_points]
        assert sizes == sorted(sizes) and sizes[:-1] == sweep["n_training"]
        assert shipped.sweep_points[-1] == sweep["dataset"]
    # the plan reads the params, it does not change them (common.smk stores the resolved entries)
    assert list(shipped_params["datasets"]) == list(given)


def test_stage_sets_follow_the_dataset_entries(shipped):
    cfg = shipped.dataset_cfg
    for d in shipped.datasets:
        assert (d in shipped.spiked_datasets) == (cfg[d]["synthetic"]["source"] == "spiked")
        assert (d in shipped.ldm_datasets) == (cfg[d]["synthetic"]["source"] == "ldm")
        assert (d in shipped.imported_datasets) == (cfg[d]["synthetic"]["source"] in ("folder", "manifest"))
        assert (d in shipped.rated_datasets) == (shipped.ratings_file(d) is not None)
        assert (d in shipped.filter_datasets) == bool(cfg[d].get("filter_with"))
    assert set(shipped.tof_datasets).isdisjoint(shipped.perturbed_datasets)
    assert set(shipped.labelled_datasets) | set(shipped.unlabelled_datasets) == set(shipped.own_training)
    for d in shipped.spiked_datasets:  # a spiked set's truth is its rating
        if not cfg[d].get("ratings"):
            assert shipped.ratings_file(d) == f"results/synthetic/{d}/ratings_reference.tsv"


def test_alternatives_match_exactly_the_names():
    pattern = alternatives(["ncct_demo", "a.b"])
    assert re.fullmatch(pattern, "ncct_demo") and re.fullmatch(pattern, "a.b")
    assert not re.fullmatch(pattern, "axb") and not re.fullmatch(pattern, "ncct_demo_aug")
    assert not re.fullmatch(alternatives([]), "") and not re.fullmatch(alternatives([]), "x")
    assert label_of("results/preprocessed/d/images/x.nii.gz") == "results/preprocessed/d/labels/x.nii.gz"


# -- measures per dataset ---------------------------------------------------------------------


def _measure_params(tiny, classes=("ICH",), segmentation=True, measures=None):
    p = ncct_only(tiny)
    p["relict"]["measures"] = ["mae", "rmse", "emb_rmse", "dice_binary", "dice_multiclass", "asd_binary"]
    ds = p["datasets"]["ncct_demo"]
    if segmentation:
        ds["segmentation"]["classes"] = list(classes)
    else:
        ds.pop("segmentation")
    if measures:
        ds["measures"] = measures
    return p


def test_measures_per_dataset_follow_segmentation_and_classes(tiny):
    one = WorkflowPlan(_measure_params(tiny))
    assert one.measures_by_dataset["ncct_demo"] == ["mae", "rmse", "emb_rmse", "dice_binary", "asd_binary"]
    assert one.seg_datasets == ["ncct_demo"] and one.feature_datasets == ["ncct_demo"]
    assert one.image_measures == ["mae", "rmse"] and one.feature_measures == ["emb_rmse"]
    assert one.seg_measures == ["dice_binary", "dice_multiclass", "asd_binary"]
    assert one.unet_datasets == ["ncct_demo"] and one.nnunet_datasets == []

    two = WorkflowPlan(_measure_params(tiny, classes=("ICH", "oedema")))
    assert "dice_multiclass" in two.measures_by_dataset["ncct_demo"]

    none = WorkflowPlan(_measure_params(tiny, segmentation=False))
    assert none.measures_by_dataset["ncct_demo"] == ["mae", "rmse", "emb_rmse"]
    assert none.seg_datasets == [] and none.unet_datasets == []
    assert none.declared_classes("ncct_demo") is None and one.declared_classes("ncct_demo") == 1

    # the dataset's own list chooses; the order stays relict.measures'
    chosen = WorkflowPlan(_measure_params(tiny, measures=["dice_binary", "mae"]))
    assert chosen.measures_by_dataset["ncct_demo"] == ["mae", "dice_binary"]
    assert chosen.feature_datasets == []


def test_aligned_variants_only_on_the_aligned_datasets(tiny):
    plan = WorkflowPlan(copy.deepcopy(tiny))
    align = tiny["relict"]["alignment"]
    assert plan.aligned_measures == [f"{m}_aligned" for m in align["measures"]]
    for d in plan.datasets:
        aligned = [m for m in plan.measures_by_dataset[d] if m.endswith("_aligned")]
        assert aligned == (plan.aligned_measures if d in align["datasets"] else [])
    d = align["datasets"][0]
    m = align["measures"][0]
    assert plan.measure_benchmarks(d, f"{m}_aligned") == plan.measure_benchmarks(d, m) + [
        f"benchmarks/relict_align/{d}.tsv"]
    # held-out scans get the aligned variant on the training set the aligned dataset uses
    assert plan.heldout_aligned_bases == [plan.training_of[d]]


def test_rating_measure_falls_back_to_the_first_measure(tiny):
    p = _measure_params(tiny, measures=["rmse", "mae"])
    p["relict"]["review"]["rating_measure"] = "mae"
    assert WorkflowPlan(p).rating_measure("ncct_demo") == "mae"
    p["relict"]["review"]["rating_measure"] = "emb_rmse"  # not computed for this dataset
    assert WorkflowPlan(p).rating_measure("ncct_demo") == "mae"  # its first in relict.measures order


# -- calibration, recall, segmentation sources ------------------------------------------------


def test_calibration_needs_held_out_label_maps_for_the_segmentation_level(tiny, tmp_path):
    p = _measure_params(tiny)
    plan = WorkflowPlan(copy.deepcopy(p))  # the U-Net labels the held-out scans too
    assert plan.calibration_bases == ["ncct_demo"]
    assert plan.heldout_measures["ncct_demo"] == plan.measures_by_dataset["ncct_demo"]
    assert plan.calibrated["ncct_demo"] == plan.measures_by_dataset["ncct_demo"]
    assert plan.copies_datasets == ["ncct_demo"] and plan.heldout_seg_bases == ["ncct_demo"]
    # the matched null (relict.calibration.matched_null): the held-out scans degraded like the
    # dataset's samples for the image and feature levels; label maps are not blurred
    assert plan.matched_datasets == ["ncct_demo"]
    assert plan.heldout_matrix("ncct_demo", "rmse") == "results/relict/ncct_demo/matched/rmse.npz"
    assert plan.heldout_matrix("ncct_demo", "emb_rmse") == "results/relict/ncct_demo/matched/emb_rmse.npz"
    assert plan.heldout_matrix("ncct_demo", "dice_binary") == "results/relict/ncct_demo/heldout/dice_binary.npz"
    assert plan.split_images("ncct_demo", "matched") == [
        f"results/relict/ncct_demo/matched/images/{s.id}.nii.gz" for s in plan.plans["ncct_demo"].heldout]
    assert plan.split_ids("ncct_demo", "matched") == [s.id for s in plan.plans["ncct_demo"].heldout]
    assert "ncct_demo" in plan.texture_datasets and plan.null_alignment_recall("ncct_demo", "rmse") == []
    assert plan.texture_bases == ["ncct_demo"]  # the held-out side of the texture check, once per training set
    # the matched split's embedding job may read the held-out embeddings, where something else makes them
    held_scans = [f"results/preprocessed/ncct_demo/images/{s.id}.nii.gz" for s in plan.plans["ncct_demo"].heldout]
    made = copy.deepcopy(p)
    made["fidelity"]["enabled"] = True
    made["relict"]["measures"] = ["rmse", "emb_rmse"]
    made["datasets"]["ncct_demo"]["measures"] = ["rmse", "emb_rmse"]
    plan_made = WorkflowPlan(made)
    assert plan_made.fidelity_datasets == ["ncct_demo"]
    assert plan_made.matched_embedding_reuse("ncct_demo") == [
        "results/relict/ncct_demo/texture.json", "results/relict/features/ncct_demo/heldout.npz", *held_scans]
    made["fidelity"]["enabled"] = False
    made["anonymise"]["datasets"] = {}
    assert WorkflowPlan(made).matched_embedding_reuse("ncct_demo") == []  # it would add the held-out job
    off = copy.deepcopy(p)
    off["relict"]["calibration"]["matched_null"] = False
    plan_off = WorkflowPlan(off)
    assert plan_off.matched_datasets == []
    assert plan_off.heldout_matrix("ncct_demo", "rmse") == "results/relict/ncct_demo/heldout/rmse.npz"

    # nnU-Net predictions without the held-out scans': no segmentation-level null
    preds = tmp_path / "preds"
    preds.mkdir()
    p["datasets"]["ncct_demo"]["segmentation"].update(source="nnunet",
                                                      nnunet={"predictions": str(preds), "command": None})
    plan = WorkflowPlan(copy.deepcopy(p))
    seg = registry.by_level(plan.measures_by_dataset["ncct_demo"], "segmentation")
    assert seg and plan.nnunet_datasets == ["ncct_demo"] and plan.unet_datasets == []
    assert not set(seg) & set(plan.calibrated["ncct_demo"])
    assert plan.calibrated["ncct_demo"] == ["mae", "rmse", "emb_rmse"]
    assert plan.heldout_seg_bases == []
    assert plan.heldout_matrix("ncct_demo", "dice_binary") == []
    assert plan.segmentation_benchmarks("ncct_demo") == []  # the user's predictions: no job to time
    assert plan.nnunet_prediction("ncct_demo", "x") == f"{preds}/x.nii.gz"
    for s in plan.plans["ncct_demo"].heldout:
        (preds / f"{s.id}.nii.gz").touch()
    assert WorkflowPlan(copy.deepcopy(p)).calibrated["ncct_demo"] == plan.measures_by_dataset["ncct_demo"]

    # an nnU-Net command labels every volume in the workflow
    p["datasets"]["ncct_demo"]["segmentation"]["nnunet"] = {"predictions": None, "command": "predict"}
    plan = WorkflowPlan(copy.deepcopy(p))
    assert plan.segmentation_benchmarks("ncct_demo") == ["benchmarks/segment_predict/ncct_demo/nnunet.tsv"]
    assert plan.segmentation_training_benchmarks("ncct_demo") == []
    assert plan.nnunet_prediction("ncct_demo", "x") == "results/relict/segmentation/ncct_demo/nnunet_predictions"


def test_shared_training_set_is_planned_once(tiny):
    p = ncct_only(tiny)
    batch = copy.deepcopy(p["datasets"]["ncct_demo"]["synthetic"])
    batch["spiked"]["seed"] += 1
    p["datasets"]["batch2"] = {"training_from": "ncct_demo", "synthetic": batch, "ratings": None,
                               "filter_with": "ncct_demo"}
    plan = WorkflowPlan(p)
    assert plan.training_of == {"ncct_demo": "ncct_demo", "batch2": "ncct_demo"}
    assert plan.own_training == ["ncct_demo"] and plan.filter_datasets == ["batch2"]
    assert plan.dataset_cfg["batch2"]["preprocess"] == p["datasets"]["ncct_demo"]["preprocess"]
    assert plan.training_qc("batch2") == plan.training_qc("ncct_demo")
    assert plan.training_features("batch2") == "results/relict/features/ncct_demo/train.npz"
    # training label maps are made once (the training dataset's); synthetic ones per dataset
    scan = plan.plans["batch2"].train[0].id
    assert plan.seg_label_path("batch2", scan, False) == f"results/relict/segmentation/ncct_demo/labels/{scan}.nii.gz"
    syn = plan.plans["batch2"].synthetic[0].id
    assert plan.seg_label_path("batch2", syn, True) == f"results/relict/segmentation/batch2/labels/{syn}.nii.gz"
    assert plan.all_volume_ids("batch2") == [v.id for v in plan.plans["batch2"].synthetic]
    assert len(plan.all_volume_ids("ncct_demo")) == len(plan.plans["ncct_demo"].scans) + len(
        plan.plans["ncct_demo"].synthetic)
    # batch2's held-out non-replicas come from ncct_demo's held-out patients
    held = {s.id: s.patient_id for s in plan.plans["ncct_demo"].heldout}
    sources = plan.heldout_source_patients("batch2")
    rows = [r for r in plan.plans["batch2"].spiked if r.get("source_id") in held]
    assert rows and sources == {r["id"]: held[r["source_id"]] for r in rows}
    assert plan.calibrated["batch2"] == [m for m in plan.measures_by_dataset["batch2"]
                                         if m in plan.heldout_measures["ncct_demo"]]
    assert plan.recall_bases == ["ncct_demo"] and set(plan.recall_datasets) == {"ncct_demo", "batch2"}


def test_shards_tile_the_measure_matrix(tiny):
    p = ncct_only(tiny)
    p["compute"].update(synthetic_shards=2, training_shards=3)
    plan = WorkflowPlan(p)
    names = plan.measure_shards("ncct_demo")
    assert len(names) == 6 and names[0] == "s0-t0"
    syn = plan.synthetic_images("ncct_demo")
    train = plan.preprocessed_images("ncct_demo", role="train")
    assert sum((plan.shard_of("ncct_demo", s, syn, "synthetic") for s in names if s.endswith("-t0")), []) == syn
    assert sum((plan.shard_of("ncct_demo", s, train, "training") for s in names if s.startswith("s0-")), []) == train
    assert plan.measure_benchmarks("ncct_demo", "rmse") == [
        f"benchmarks/relict_measure/ncct_demo/rmse/{s}.tsv" for s in names]
    assert plan.measure_benchmarks("ncct_demo", "emb_rmse") == ["benchmarks/relict_measure/ncct_demo/emb_rmse.tsv"]


# -- the in-workflow generator ----------------------------------------------------------------


def _ldm_plan(tiny, **changes):
    p = copy.deepcopy(tiny)
    ldm = p["datasets"]["ncct_ldm"]["synthetic"]["ldm"]
    for key, value in changes.items():
        stage, name = key.split("__")
        ldm[stage][name] = value
    return WorkflowPlan(p)


def test_checkpoint_digest_changes_with_shaping_settings_not_with_epochs(tiny):
    base = _ldm_plan(tiny)

    def ckpts(plan):
        return plan.ldm_checkpoint("ncct_ldm", "autoencoder"), plan.ldm_checkpoint("ncct_ldm", "diffusion")

    ae, diff = ckpts(base)
    assert re.fullmatch(r"results/generator/ncct_ldm/checkpoints/diffusion-[0-9a-f]{12}\.ckpt", diff)
    assert ckpts(_ldm_plan(tiny)) == (ae, diff)  # stable across parses
    ldm = tiny["datasets"]["ncct_ldm"]["synthetic"]["ldm"]
    # more epochs, other sampling settings: the same training, resumed
    same = _ldm_plan(tiny, diffusion__epochs=ldm["diffusion"]["epochs"] + 5, diffusion__num_inference_steps=7,
                     diffusion__sample_batch_size=1)
    assert ckpts(same) == (ae, diff)
    # a setting that shapes the diffusion model: a new diffusion checkpoint, the same autoencoder
    lr = _ldm_plan(tiny, diffusion__learning_rate=ldm["diffusion"]["learning_rate"] * 2)
    assert ckpts(lr)[0] == ae and ckpts(lr)[1] != diff
    # the autoencoder's settings change the latents the diffusion model learns: both are new
    ae_lr = _ldm_plan(tiny, autoencoder__learning_rate=ldm["autoencoder"]["learning_rate"] * 2)
    assert ckpts(ae_lr)[0] != ae and ckpts(ae_lr)[1] != diff
    ae_epochs = _ldm_plan(tiny, autoencoder__epochs=ldm["autoencoder"]["epochs"] + 1)
    assert ckpts(ae_epochs)[0] == ae and ckpts(ae_epochs)[1] != diff
    # a sweep point learns from fewer volumes: its own digest
    sweep = f"{tiny['generator_sweep']['dataset']}_n{tiny['generator_sweep']['n_training'][0]}"
    assert base.ldm_checkpoint(sweep, "diffusion").rsplit("-", 1)[1] != diff.rsplit("-", 1)[1]


def test_sweep_generators_learn_nested_subsets_with_equal_steps(tiny):
    plan = WorkflowPlan(copy.deepcopy(tiny))
    swept = tiny["generator_sweep"]["dataset"]
    n = tiny["generator_sweep"]["n_training"][0]
    point = f"{swept}_n{n}"
    full = plan.generator_training_ids(swept)
    sub = plan.generator_training_ids(point)
    assert len(sub) == n and set(sub) <= set(full)
    assert plan.generator_training_ids(swept, subset_only=True) == []
    assert plan.generator_training_ids(point, subset_only=True) == sub
    assert plan.generator_training_images(point) == [f"results/preprocessed/ncct_demo/images/{i}.nii.gz" for i in sub]
    diff = tiny["datasets"][swept]["synthetic"]["ldm"]["diffusion"]
    batch = diff["batch_size"]
    steps = diff["epochs"] * -(-len(full) // batch)
    assert plan.ldm_settings(point)["diffusion"]["epochs"] == max(1, round(steps / -(-n // batch)))
    assert plan.ldm_settings(point)["diffusion"]["epochs"] > diff["epochs"]
    assert plan.ldm_settings(swept)["diffusion"]["epochs"] == diff["epochs"]
    assert plan.dataset_cfg[point]["synthetic"]["ldm"]["diffusion"]["epochs"] == diff["epochs"]  # a copy
    p = copy.deepcopy(tiny)
    p["generator_sweep"]["equal_steps"] = False
    assert WorkflowPlan(p).ldm_settings(point)["diffusion"]["epochs"] == diff["epochs"]


# -- user data, and the refusals before any job ---------------------------------------------


def test_user_dataset_paths(tmp_path):
    plan = WorkflowPlan(_user_params(tmp_path, synthetic_labels=True))
    data = tmp_path / "data"
    assert plan.imported_datasets == ["mydata"] and plan.rated_datasets == []
    assert plan.raw_image("mydata", "a0") == str(data / "images" / "a0.nii.gz")
    assert plan.raw_label("mydata", "a0") == str(data / "labels" / "a0.nii.gz")
    with pytest.raises(PlanError, match="dataset mydata: scan a1 has no label file"):
        plan.raw_label("mydata", "a1")
    assert plan.labelled_datasets == [] and plan.unlabelled_datasets == ["mydata"]
    assert plan.preprocessed_labels("mydata") == ["results/preprocessed/mydata/labels/a0.nii.gz"]
    # register: false takes the grid of the first training volume
    assert plan.grid_reference("mydata") == str(data / "images" / "a0.nii.gz")
    assert plan.user_synthetic_label("mydata", "gen_b") == f"{tmp_path / 'generated' / 'labels'}/gen_b.nii.gz"
    assert plan.seg_label_path("mydata", "gen_b", True) == "results/synthetic/mydata/labels/gen_b.nii.gz"
    rows = {r["id"]: r for r in plan.manifest_rows("mydata")}
    assert rows["a0"]["label"] == str(data / "labels" / "a0.nii.gz") and rows["c1"]["role"] == "heldout"
    # held-out scans without label maps: no segmentation-level null
    assert "dice_binary" in plan.measures_by_dataset["mydata"] and "dice_binary" not in plan.calibrated["mydata"]
    no_folder = WorkflowPlan(_user_params(tmp_path / "b"))
    with pytest.raises(PlanError, match="synthetic volume gen_b has no label"):
        no_folder.user_synthetic_label("mydata", "gen_b")


def test_privacy_filter_refuses_a_training_set_without_held_out_patients(tmp_path):
    p = _user_params(tmp_path, heldout_patients=("pc",))
    p["privacy"].update(training_sets=["mydata"], spaces=["image"], latent_autoencoder=None)
    with pytest.raises(PlanError, match="privacy filter for dataset mydata: calibration needs held-out scans of "
                                        "at least two patients"):
        WorkflowPlan(p)
    p = _user_params(tmp_path / "two", heldout_patients=("pc", "pe"))
    p["privacy"].update(training_sets=["mydata"], spaces=["image"], latent_autoencoder=None)
    plan = WorkflowPlan(p)
    assert plan.privacy_runs == [("mydata", "image")] and plan.privacy_targets == {"mydata": ["mydata"]}
    assert plan.privacy_filters == [f"filter{i}" for i in range(p["privacy"]["consistency"]["n_filters"])]


def test_privacy_latent_space_and_truth_on_the_demo(tiny):
    plan = WorkflowPlan(copy.deepcopy(tiny))
    owner = tiny["privacy"]["training_sets"][0]
    assert ("latent" in plan.privacy_spaces(owner)) == (
        "latent" in tiny["privacy"]["spaces"] and plan.training_of[tiny["privacy"]["latent_autoencoder"]] == owner)
    assert (owner, "image") in plan.privacy_runs
    truth = plan.privacy_truth(owner)
    assert set(truth) == {d for d in plan.privacy_targets[owner] if plan.plans[d].spiked}
    patients = {s.id: s.patient_id for s in plan.plans[owner].scans}
    for d, rows in truth.items():
        for r in plan.plans[d].spiked:
            assert rows[r["id"]]["source_patient"] == patients[r["source_id"]]
    assert plan.sweep_datasets and not set(plan.sweep_datasets) & set(plan.privacy_targets[owner])


def test_anonymisation_refuses_unusable_labels(tiny, tmp_path):
    p = ncct_only(tiny)
    plan = WorkflowPlan(copy.deepcopy(p))
    labels = tmp_path / "classes.tsv"
    missing = plan.plans["ncct_demo"].train[0].id
    labels.write_text("id\tside\n" + "".join(f"{s.id}\tL\n" for s in plan.plans["ncct_demo"].scans if s.id != missing))
    p["anonymise"]["datasets"] = {"ncct_demo": {"labels": str(labels), "column": "side"}}
    with pytest.raises(PlanError, match=rf"anonymise\.datasets\.ncct_demo: class labels: 1 training volume.*{missing}"):
        WorkflowPlan(copy.deepcopy(p))
    p["anonymise"]["datasets"] = {"ncct_demo": {"labels": None, "column": "side"}}  # the demo's own table
    plan = WorkflowPlan(copy.deepcopy(p))
    assert plan.anonymise_datasets == ["ncct_demo"]
    assert plan.anonymise_labels("ncct_demo") == "results/anonymise/ncct_demo/classes.tsv"


def test_invalid_params_and_sources_raise_plan_errors(tiny):
    p = copy.deepcopy(tiny)
    p["relict"]["measures"] = ["mae", "psnr"]
    with pytest.raises(PlanError, match=r"params.yaml is invalid:\n  - relict.measures.1: 'psnr'"):
        WorkflowPlan(p)
    p = copy.deepcopy(tiny)
    p["datasets"]["ncct_ldm"]["synthetic"]["ldm"]["n_training"] = 1000
    with pytest.raises(PlanError, match="datasets.ncct_ldm.synthetic.ldm.n_training=1000"):
        WorkflowPlan(p)


def test_fidelity_reads_frd_features_of_the_training_sets_scans_and_its_own_samples(shipped, shipped_params):
    # the sets sharing ncct_demo's scans read its train/held-out features once made; fidelity.frd off: none
    assert shipped.fidelity_radiomics("ncct_ldm", "train") == ["results/fidelity/radiomics/ncct_demo/train.npz"]
    assert shipped.fidelity_radiomics("ncct_ldm", "synthetic") == ["results/fidelity/radiomics/ncct_ldm/synthetic.npz"]
    off = copy.deepcopy(shipped_params)
    off["fidelity"]["frd"] = False
    assert WorkflowPlan(off).fidelity_radiomics("ncct_ldm", "heldout") == []


def test_frd_per_class_runs_where_the_segmentation_level_has_label_maps_of_samples_and_held_out_scans(
        shipped, shipped_params):
    # ncct_ldm's samples have no label maps (no segmentation level): whole-volume FRD only
    assert shipped.frd_class_datasets == ["ncct_demo", "tof_demo", "tof_demo_batch2"]
    assert shipped.fidelity_class_radiomics("ncct_ldm", "synthetic") == []
    assert shipped.fidelity_class_radiomics("tof_demo_batch2", "heldout") == [
        "results/fidelity/radiomics/tof_demo/heldout_classes.npz"]
    # the label maps are the segmentation level's, in the split's order (the U-Net's for every NCCT scan)
    ids = shipped.split_ids("ncct_demo", "heldout")
    assert shipped.split_labels("ncct_demo", "heldout") == [
        f"results/relict/segmentation/ncct_demo/labels/{i}.nii.gz" for i in ids]
    for key in ("frd_classes", "frd"):
        off = copy.deepcopy(shipped_params)
        off["fidelity"][key] = False
        assert WorkflowPlan(off).frd_class_datasets == []
