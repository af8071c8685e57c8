"""End to end: the workflow on user data laid out as users have it, and its refusals of bad
input. These run Snakemake as a user would. (The embedded demo: test_workflow_demo.py.)"""

import json
import shutil

import nibabel as nib
import numpy as np
import pytest
from scipy import ndimage

from synthaudit.io import read_tsv, save_volume
from synthaudit.relict.image_measures import all_pairs_image_measures
from workflow_helpers import snakemake, tiny_params, write_params

pytestmark = pytest.mark.workflow


SHAPE = (20, 24, 18)
AFFINE = np.diag([2.0, 2.0, 2.0, 1.0])


def _anatomy(rng):
    return ndimage.gaussian_filter(rng.random(SHAPE), 2.0).astype(np.float32) * 4


def _user_dataset(tmp_path, layout):
    """Six training scans of three patients, two held-out scans, already registered;
    synthetic: two near-copies of training scans and two new volumes."""
    rng = np.random.default_rng(0)
    data = tmp_path / "mydata"
    vols = {}
    for p in range(4):
        base = _anatomy(rng)
        for s in range(2):
            vols[f"pat{p}_s{s}"] = base + 0.05 * rng.standard_normal(SHAPE).astype(np.float32)
    train = [k for k in vols if not k.startswith("pat3")]
    rows = []
    for k, v in vols.items():
        role = "train" if k in train else "heldout"
        if layout == "nnunet":
            folder = "imagesTr" if role == "train" else "imagesTs"
            save_volume(data / folder / f"{k}_0000.nii.gz", v, AFFINE)
            save_volume(data / folder.replace("images", "labels") / f"{k}.nii.gz", (v > v.mean()).astype(np.uint8), AFFINE)
        else:
            save_volume(data / "images" / f"{k}.nii.gz", v, AFFINE)
            rows.append(f"{k}\timages/{k}.nii.gz\t{k.split('_')[0]}\t{role}")
    if layout == "manifest":
        (data / "manifest.tsv").write_text("id\timage\tpatient_id\trole\n" + "\n".join(rows) + "\n")
    syn = tmp_path / "generated"
    save_volume(syn / "gen_a.nii.gz", vols["pat0_s1"] + 0.01 * rng.standard_normal(SHAPE).astype(np.float32), AFFINE)
    save_volume(syn / "gen_b.nii.gz", vols["pat2_s0"] + 0.01 * rng.standard_normal(SHAPE).astype(np.float32), AFFINE)
    save_volume(syn / "gen_c.nii.gz", _anatomy(rng), AFFINE)
    save_volume(syn / "gen_d.nii.gz", _anatomy(rng), AFFINE)
    (tmp_path / "ratings.tsv").write_text(
        "synthetic_id\trater\tscore\n" + "".join(f"gen_{x}\tR1\t{s}\n" for x, s in zip("abcd", (4, 4, 1, 2))))

    p = tiny_params()
    ds = p["datasets"].pop("ncct_demo")
    ds.pop("demo")
    if layout == "nnunet":  # label maps supplied by the user for both sets
        ds["segmentation"] = {"source": "labels", "classes": ["structure"], "synthetic_labels": str(syn / "labels")}
        for f in sorted(syn.glob("gen_*.nii.gz")):
            v = nib.load(f).get_fdata()
            save_volume(syn / "labels" / f.name, (v > v.mean()).astype(np.uint8), AFFINE)
        # lesion-free scans on both sides: a training scan and a synthetic volume with empty label maps
        save_volume(data / "labelsTr" / "pat1_s1.nii.gz", np.zeros(SHAPE, np.uint8), AFFINE)
        save_volume(syn / "labels" / "gen_d.nii.gz", np.zeros(SHAPE, np.uint8), AFFINE)
    else:
        ds.pop("segmentation")
    if layout == "nnunet":
        ds["source"], ds["nnunet_dir"] = "nnunet", str(data)
    else:
        ds["source"], ds["manifest"] = "manifest", str(data / "manifest.tsv")
    ds["preprocess"]["register"] = False
    ds["preprocess"]["intensity"] = {"window": None, "rescale": False}
    ds["synthetic"] = {"source": "folder", "folder": str(syn)}
    ds["ratings"] = str(tmp_path / "ratings.tsv")
    p["datasets"] = {"mydata": ds}
    p["anonymise"]["datasets"] = {}
    p["feature_study"]["datasets"] = []
    p["relict"]["alignment"]["datasets"] = []
    p["generator_sweep"]["dataset"] = None
    p["privacy"]["training_sets"] = []
    p["relict"]["n_closest"] = 3
    wd = tmp_path / "run"
    write_params(wd, p)
    return wd, syn


# whole audits of a user's nnU-Net dataset (about 45 s each): make test-e2e, so that make test stays under
# 10 minutes on 2 cores (CI runs both; init's nnU-Net path is also in tests/test_nnunet_init.py)
@pytest.mark.e2e
@pytest.mark.parametrize("layout", ["nnunet"])  # the manifest layout runs end to end in the clamp test below
def test_user_folder_of_registered_nifti(tmp_path, layout):
    wd, _ = _user_dataset(tmp_path, layout)
    p = __import__("yaml").safe_load((wd / "params.yaml").read_text())
    # the all-pairs jobs split into shards (training blocks; synthetic blocks are covered by tests/test_shards.py)
    shards = 2 if layout == "nnunet" else 1
    p["compute"].update(training_shards=shards, synthetic_shards=1)
    # the layout is what differs: each level runs on the nnU-Net layout (every measure: the demo tests)
    p["relict"]["measures"] = ["mae", "rmse", "emb_rmse"] + (["dice_binary"] if layout == "nnunet" else [])
    write_params(wd, p)
    snakemake(wd, "relict_all")
    metrics = json.loads((wd / "results/metrics/relict.json").read_text())
    expected = set(p["relict"]["measures"])
    assert set(metrics["mydata"]) == expected
    assert "untrained" in metrics["mydata"]["emb_rmse"]["extractor"]
    for measure in sorted(expected):
        rows = {r["synthetic_id"]: r for r in read_tsv(wd / f"results/relict/mydata/ranking_{measure}.tsv")}
        assert rows["gen_a"]["closest_training_id"] == "pat0_s1"
        assert rows["gen_b"]["closest_training_id"] == "pat2_s0"
        if measure == "dice_binary":  # two lesion-free maps agree: distance 0, ranked first (docs/definitions.md)
            assert rows["gen_d"]["closest_training_id"] == "pat1_s1" and float(rows["gen_d"]["score"]) == 0.0
            assert rows["gen_d"]["rank"] == "1" and {rows["gen_a"]["rank"], rows["gen_b"]["rank"]} == {"2", "3"}
            assert all(np.isfinite(float(r["score"])) for r in rows.values())
        else:
            assert {rows["gen_a"]["rank"], rows["gen_b"]["rank"]} == {"1", "2"}
    assert metrics["mydata"]["rmse"]["balanced_accuracy"] == 1.0
    assert metrics["mydata"]["rmse"]["n_closest_used"] == 3
    # the gathered matrix is the unsharded one, rows and columns in the planned order
    gathered = np.load(wd / "results/relict/mydata/measures/mae.npz")
    assert int(gathered["shards"]) == shards and not (wd / "results/relict/mydata/shards").exists()  # shards are temp

    def volumes(ids, folder):
        return np.stack([np.asarray(nib.load(wd / f"results/{folder}/{i}.nii.gz").dataobj, np.float32) for i in ids])

    syn = volumes(gathered["synthetic_ids"], "synthetic/mydata/images")
    train = volumes(gathered["training_ids"], "preprocessed/mydata/images")
    direct = all_pairs_image_measures(syn, train, ["mae"], data_range=1.0)["mae"]
    # Same order and same values. Bitwise equality of sharded and unsharded sums is
    # tested in one process (tests/test_shards.py); across processes (Snakemake's job vs
    # this one) CI saw float32-rounding differences (relative 8e-8), so compare at 1e-6.
    np.testing.assert_allclose(gathered["values"], direct, rtol=1e-6, atol=0)


def test_bad_synthetic_volumes_stop_the_run_naming_the_file(tmp_path):
    wd, syn = _user_dataset(tmp_path, "manifest")
    p = __import__("yaml").safe_load((wd / "params.yaml").read_text())
    p["relict"]["measures"] = ["mae", "rmse"]  # the image level reads the files first
    write_params(wd, p)
    bad = np.zeros(SHAPE, np.float32)
    bad[3, 3, 3] = np.nan
    save_volume(syn / "gen_nan.nii.gz", bad, AFFINE)
    proc = snakemake(wd, "relict_all", check=False)
    assert proc.returncode != 0
    assert "gen_nan.nii.gz: contains 1 NaN" in proc.stdout + proc.stderr
    (syn / "gen_nan.nii.gz").unlink()
    save_volume(syn / "gen_small.nii.gz", np.zeros((10, 10, 10), np.float32), AFFINE)
    proc = snakemake(wd, "relict_all", check=False)
    assert proc.returncode != 0
    assert "gen_small.nii.gz: synthetic volume has shape [10, 10, 10]" in proc.stdout + proc.stderr


def test_invalid_params_are_refused_before_any_job(tmp_path):
    p = tiny_params()
    p["relict"]["measures"] = ["mae", "psnr"]
    write_params(tmp_path, p)
    proc = snakemake(tmp_path, check=False)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "relict.measures.1" in out and "allowed values: ['mae', 'rmse', 'ssim'," in out
    assert not (tmp_path / "results").exists()


@pytest.mark.slow
def test_n_larger_than_training_set_is_clamped_with_a_warning(tmp_path):
    wd, _ = _user_dataset(tmp_path, "manifest")
    p = __import__("yaml").safe_load((wd / "params.yaml").read_text())
    p["relict"]["n_closest"] = 50
    write_params(wd, p)
    snakemake(wd, "results/relict/mydata/ranking_mae.tsv")  # one measure is enough (and fast)
    rows = read_tsv(wd / "results/relict/mydata/ranking_mae.tsv")
    assert {r["n_used"] for r in rows} == {"6"}
    assert "n_closest=50 exceeds the number of training volumes (6)" in (wd / "logs/relict_ratio/mydata/mae.log").read_text()


def _privacy_on(wd, manifest_rows=None):
    p = __import__("yaml").safe_load((wd / "params.yaml").read_text())
    p["privacy"].update(training_sets=["mydata"], spaces=["image"], latent_autoencoder=None)
    write_params(wd, p)
    if manifest_rows is not None:
        manifest = wd.parent / "mydata" / "manifest.tsv"
        manifest.write_text("\n".join(manifest_rows) + "\n")


def test_privacy_filter_refuses_data_without_re_identification_pairs(tmp_path):
    wd, _ = _user_dataset(tmp_path, "manifest")
    manifest = (tmp_path / "mydata" / "manifest.tsv").read_text().splitlines()
    # as given: one held-out patient, nothing to calibrate the filter on
    _privacy_on(wd)
    proc = snakemake(wd, "privacy_all", check=False, extra=["-n"])
    assert proc.returncode != 0
    assert "privacy filter for dataset mydata: calibration needs held-out scans of at least two patients" in (
        proc.stdout + proc.stderr)
    # no patient_id column: every scan its own patient, no positive pair
    _privacy_on(wd, ["id\timage\trole"] + ["\t".join(r.split("\t")[:2] + r.split("\t")[3:]) for r in manifest[1:]])
    proc = snakemake(wd, "privacy_all", check=False, extra=["-n"])
    assert proc.returncode != 0
    assert "no training patient has two scans" in proc.stdout + proc.stderr
    # a patient with scans on both sides of the split
    rows = [manifest[0]] + [r.replace("\tpat3\t", "\tpat0\t") for r in manifest[1:]]
    _privacy_on(wd, rows)
    proc = snakemake(wd, "privacy_all", check=False, extra=["-n"])
    assert proc.returncode != 0
    assert "patients with scans in both the training and the held-out set: ['pat0']" in proc.stdout + proc.stderr


def test_snakemake_lint_is_clean(root):
    import subprocess
    from workflow_helpers import BIN, env

    proc = subprocess.run([str(BIN / "snakemake"), "--lint"], cwd=root, env=env(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.e2e
def test_nnunet_predictions_and_filter_on_a_new_synthetic_set(tmp_path):
    """Segmentation from nnU-Net (a predictions folder, and a command following nnU-Net's
    -i/-o contract), and the paper's automation step: thresholds tuned on a rated
    dataset filter a second, unrated synthetic set of the same training data."""
    wd, syn = _user_dataset(tmp_path, "nnunet")
    p = __import__("yaml").safe_load((wd / "params.yaml").read_text())
    ds = p["datasets"]["mydata"]
    # every training and synthetic volume's prediction, in nnU-Net's output naming ({id}.nii.gz)
    preds = tmp_path / "nnunet_out"
    data = tmp_path / "mydata"
    for f in sorted((data / "labelsTr").glob("*.nii.gz")):
        save_volume(preds / f.name, nib.load(f).get_fdata().astype(np.uint8), AFFINE)
    for f in sorted((syn / "labels").glob("*.nii.gz")):
        save_volume(preds / f.name, nib.load(f).get_fdata().astype(np.uint8), AFFINE)
    ds["segmentation"] = {"source": "nnunet", "classes": ["structure"],
                          "nnunet": {"predictions": str(preds), "command": None}}
    # a second synthetic set: fresh copies of two training scans and one new volume, unrated
    rng = np.random.default_rng(5)
    batch2 = tmp_path / "batch2"
    for name, src in (("b2_x", "pat1_s0"), ("b2_y", "pat2_s1")):
        v = nib.load(data / "imagesTr" / f"{src}_0000.nii.gz").get_fdata()
        save_volume(batch2 / f"{name}.nii.gz", v + 0.01 * rng.standard_normal(SHAPE), AFFINE)
    save_volume(batch2 / "b2_z.nii.gz", _anatomy(rng), AFFINE)
    # its nnU-Net predictions: the source scans' labels for the copies, nothing for the new volume
    for name, src in (("b2_x", "pat1_s0"), ("b2_y", "pat2_s1")):
        shutil.copy(preds / f"{src}.nii.gz", preds / f"{name}.nii.gz")
    save_volume(preds / "b2_z.nii.gz", np.zeros(SHAPE, np.uint8), AFFINE)
    # the same training set (training_from: nothing of mydata is preprocessed or segmented again)
    p["datasets"]["batch2"] = {"training_from": "mydata", "synthetic": {"source": "folder", "folder": str(batch2)},
                               "ratings": None, "filter_with": "mydata"}
    p["relict"]["review"]["filter_measures"] = ["rmse"]
    p["relict"]["measures"] = ["rmse", "dice_binary"]  # what this test checks (the others: tests above)
    write_params(wd, p)
    snakemake(wd, "relict_all", "filter_all")
    m = json.loads((wd / "results/metrics/relict.json").read_text())
    # gen_d (a non-replica) and training scan pat1_s1 are both lesion-free: Dice distance 0, so the
    # segmentation level calls gen_d a replica (docs/definitions.md); the two true replicas are found
    assert m["mydata"]["dice_binary"]["balanced_accuracy"] == 0.75
    assert m["mydata"]["dice_binary"]["sensitivity"] == 1.0
    rejected = {r["synthetic_id"] for r in read_tsv(wd / "results/filter/batch2/rejected.tsv")}
    kept = {r["synthetic_id"] for r in read_tsv(wd / "results/filter/batch2/kept.tsv")}
    assert rejected == {"b2_x", "b2_y"} and kept == {"b2_z"}
    summary = read_tsv(wd / "results/filter/summary.tsv")
    assert [(r["dataset"], r["n_rejected"], r["sensitivity"]) for r in summary] == [("batch2", "2", "NA")]
    assert not (wd / "results/preprocessed/batch2").exists()  # the training side was not redone
    assert not (wd / "results/relict/segmentation/batch2/labels/pat1_s0.nii.gz").exists()

    # the command path: a stand-in for nnUNetv2_predict with nnU-Net's -i/-o contract; the command
    # labels the held-out scans too (they calibrate the segmentation level), so it finds theirs
    for f in sorted((data / "labelsTs").glob("*.nii.gz")):
        shutil.copy(f, preds / f.name)
    fake = tmp_path / "bin" / "fake_nnunet_predict"
    fake.parent.mkdir()
    fake.write_text(f"""#!{__import__('sys').executable}
import sys, shutil, pathlib
args = sys.argv[1:]
inp, out = pathlib.Path(args[args.index('-i') + 1]), pathlib.Path(args[args.index('-o') + 1])
out.mkdir(parents=True)
for f in inp.glob('*_0000.nii.gz'):
    shutil.copy(pathlib.Path('{preds}') / (f.name[:-len('_0000.nii.gz')] + '.nii.gz'), out)
""")
    fake.chmod(0o755)
    p["datasets"]["mydata"]["segmentation"]["nnunet"] = {"predictions": None, "command": f"{fake} -d 1 -c 3d_fullres"}
    p["datasets"].pop("batch2")
    for f in preds.glob("b2_*"):
        f.unlink()
    write_params(wd, p)
    snakemake(wd, "relict_all", extra=["--forcerun", "nnunet_predict"])
    made = (wd / "results/relict/segmentation/mydata/nnunet_predictions").iterdir()
    assert sorted(x.name for x in made if not x.name.startswith(".")) == sorted(
        x.name for x in preds.iterdir())
    m = json.loads((wd / "results/metrics/relict.json").read_text())
    assert m["mydata"]["dice_binary"]["balanced_accuracy"] == 0.75  # as above, from the command's predictions


def test_anonymisation_refuses_unusable_labels_before_any_job(tmp_path):
    wd, _ = _user_dataset(tmp_path, "manifest")
    p = __import__("yaml").safe_load((wd / "params.yaml").read_text())
    labels = tmp_path / "classes.tsv"
    p["anonymise"]["datasets"] = {"mydata": {"labels": str(labels), "column": "diagnosis"}}
    write_params(wd, p)
    # one training scan without a label
    labels.write_text("id\tdiagnosis\n" + "".join(f"pat{i}_s{s}\t{'AB'[i % 2]}\n" for i in range(4) for s in range(2)
                                                  if (i, s) != (1, 0)))
    proc = snakemake(wd, "anonymise_all", check=False, extra=["-n"])
    assert proc.returncode != 0
    assert "anonymise.datasets.mydata: class labels: 1 training volume(s) have no row" in proc.stdout + proc.stderr
    assert "pat1_s0" in proc.stdout + proc.stderr
    # complete, but the one held-out patient (pat3) gives the test set a single class, and class B has 2 vectors
    labels.write_text("id\tdiagnosis\n" + "".join(f"pat{i}_s{s}\t{'AB'[i % 2]}\n" for i in range(4) for s in range(2)))
    p["anonymise"]["k_same"] = [2, 3]
    write_params(wd, p)
    proc = snakemake(wd, "anonymise_all", check=False, extra=["-n"])
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "the held-out (test) scans hold a single class ['B']" in out
    # k-Same anonymises the training patients without the validation ones (one of A's two patients)
    assert ("k-Same with k=3: class(es) {'A': 2, 'B': 2} have fewer than 3 training vectors outside the "
            "validation patients") in out
    assert not (wd / "results").exists()


def test_demo_profile_is_the_default_plus_threads_of_existing_rules(root):
    """make demo's profile differs from the default only in set-threads, and every rule it
    names exists (Snakemake ignores a misspelt name there silently, and the job would keep
    both cores)."""
    import subprocess

    import yaml
    from workflow_helpers import BIN, env

    profiles = root / "workflow" / "profiles"
    demo = yaml.safe_load((profiles / "demo" / "config.yaml").read_text())
    default = yaml.safe_load((profiles / "default" / "config.yaml").read_text())
    threads = demo.pop("set-threads")
    first = demo.pop("prioritize")
    assert demo == default
    assert threads and all(v == 1 for v in threads.values())
    # the prioritised targets are samples of the demo's generators (params.yaml)
    params = yaml.safe_load((root / "params.yaml").read_text())
    sweep = params["generator_sweep"]
    generators = {d for d, c in params["datasets"].items() if c.get("synthetic", {}).get("source") == "ldm"}
    generators |= {f"{sweep['dataset']}_n{n}" for n in sweep["n_training"]}
    assert {t.split("/")[2] for t in first} == generators
    assert all(t.startswith("results/synthetic/") and t.endswith("/images/gen001.nii.gz") for t in first)
    proc = subprocess.run([str(BIN / "snakemake"), "--list-rules"], cwd=root, env=env(), capture_output=True,
                          text=True, check=True)
    rules = set(proc.stdout.split())
    assert set(threads) <= rules, sorted(set(threads) - rules)


@pytest.mark.slow
def test_cheap_per_volume_steps_run_as_one_job_per_dataset(root):
    """Simulating a demo patient or spiking a volume takes a fraction of a second, less than a
    job's start (Python, NumPy, nibabel, SciPy): the demo's DAG has one such job per dataset,
    not one per volume (issue 19), and the per-scan registration keeps one job per scan."""
    import re
    import subprocess

    import yaml
    from workflow_helpers import BIN, env

    proc = subprocess.run([str(BIN / "snakemake"), "-n", "--forceall", "--quiet", "rules"], cwd=root, env=env(),
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    counts = {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)\s*$", proc.stdout, re.M)}
    datasets = yaml.safe_load((root / "params.yaml").read_text())["datasets"]
    source = {d: datasets[c.get("training_from") or d]["source"] for d, c in datasets.items()}
    spiked = {d for d, c in datasets.items() if c["synthetic"]["source"] == "spiked"}
    tof = {d for d in datasets if source[d] == "demo_tof"}
    simulated = {d for d, c in datasets.items() if not c.get("training_from") and source[d].startswith("demo_")}
    expected = ({f"spike_{d}" for d in spiked - tof} | {f"spike_tof_{d}" for d in spiked & tof}
                | {f"demo_patients_{d}" for d in simulated - tof} | {f"demo_tof_subjects_{d}" for d in simulated & tof})
    batched = {r: n for r, n in counts.items() if r.startswith(("spike_", "demo_patients_", "demo_tof_subjects_"))}
    assert batched == dict.fromkeys(expected, 1)
    assert counts["preprocess_scan_labelled"] > len(simulated) * 10


def test_spiked_set_on_unlabelled_user_scans_writes_images_only(tmp_path):
    """The spiked positive control on a user's own scans without label maps: one job for the
    set, every volume written, no label maps asked for; a replica is nearest its source."""
    wd, _ = _user_dataset(tmp_path, "manifest")
    p = __import__("yaml").safe_load((wd / "params.yaml").read_text())
    spiked = tiny_params()["datasets"]["ncct_demo"]["synthetic"]
    spiked["spiked"].update(n_replicas=2, n_nonreplicas=1)
    p["datasets"]["mydata"].update(synthetic=spiked, ratings=None)
    write_params(wd, p)
    snakemake(wd, "synthetic_all")
    rows = read_tsv(wd / "results/synthetic/mydata/synthetic.tsv")
    assert [r["kind"] for r in rows].count("replica") == 2 and len(rows) == 3
    assert not (wd / "results/synthetic/mydata/labels").exists()
    training = {f.name.split(".")[0]: np.asarray(nib.load(f).dataobj, np.float32)
                for f in (wd / "results/preprocessed/mydata/images").glob("*.nii.gz")}
    for r in (r for r in rows if r["kind"] == "replica"):
        volume = np.asarray(nib.load(wd / r["image"]).dataobj, np.float32)
        assert min(training, key=lambda t: float(np.mean((training[t] - volume) ** 2))) == r["source_id"]


# a minute of Snakemake: make test-e2e (CI runs both)
@pytest.mark.e2e
def test_shortlist_search_gives_the_exhaustive_ranking_and_measures_its_recall(tmp_path):
    """relict.search.mode shortlist on the user dataset (issue 31): each synthetic volume and
    held-out scan keeps K = 2 x n candidates of 6 training scans by block means; two synthetic
    volumes and one held-out scan are also compared with every training scan. The rankings
    equal the exhaustive run's wherever the sampled rows say the shortlist held the n closest,
    and the metrics, the search files and the verdict carry the measured recall."""
    wd, _ = _user_dataset(tmp_path, "manifest")
    p = __import__("yaml").safe_load((wd / "params.yaml").read_text())
    p["relict"]["measures"] = ["mae", "ssim", "ncc"]
    p["relict"]["recall"]["measure"] = "mae"
    p["relict"]["n_closest"] = 2
    p["relict"]["search"].update(mode="exhaustive")
    write_params(wd, p)
    snakemake(wd, "relict_all")
    exhaustive = {m: read_tsv(wd / f"results/relict/mydata/ranking_{m}.tsv") for m in p["relict"]["measures"]}
    full = {m: np.load(wd / f"results/relict/mydata/measures/{m}.npz") for m in p["relict"]["measures"]}
    metrics = json.loads((wd / "results/metrics/relict.json").read_text())
    assert metrics["mydata"]["mae"]["search_mode"] == "exhaustive"
    assert metrics["mydata"]["mae"]["search_pairs_fraction"] == 1.0

    p["relict"]["search"].update(mode="shortlist", shortlist={"factor": 2, "block_mm": 8.0},
                                 recall={"sample": 2, "seed": 0, "min_recall": 0.999})
    # the alignment-aware level on the shortlist too: each volume aligned among its candidates only
    p["relict"]["alignment"].update(datasets=["mydata"], measures=["mae"], candidates=2)
    write_params(wd, p)
    snakemake(wd, "relict_all", "verdict")
    aligned = np.load(wd / "results/relict/mydata/measures/mae_aligned.npz")
    shortlisted = np.isfinite(np.load(wd / "results/relict/mydata/measures/mae.npz")["distances"])
    assert np.array_equal(np.isfinite(aligned["distances"]), shortlisted)  # aligned among the shortlist only
    assert np.all(aligned["distances"][shortlisted] <= full["mae"]["distances"][shortlisted] + 1e-9)
    # the aligned ratio's own check: 2 volumes aligned to every training volume, so it covers the shortlist and
    # the K = 2 aligned candidates together
    found = json.loads((wd / "results/relict/mydata/search/mae_aligned.json").read_text())
    assert found["mode"] == "candidates" and found["k"] == 2 and found["n_sampled"] == 2
    assert found["pairs_computed"] == 4 * 2 and 0 <= found["recall_top_n"] <= 1
    metrics = json.loads((wd / "results/metrics/relict.json").read_text())
    shortlist = np.load(wd / "results/relict/mydata/shortlist/synthetic.npz")
    assert int(shortlist["k"]) == 4 and len(shortlist["sampled"]) == 2
    for m in p["relict"]["measures"]:
        got = np.load(wd / f"results/relict/mydata/measures/{m}.npz")
        computed = np.isfinite(got["distances"])
        # 2 sampled rows of 6 and 2 rows of 4 candidates: 20 of 24 pairs, each equal to the exhaustive value
        assert computed.sum() == 2 * 6 + 2 * 4, m
        np.testing.assert_allclose(got["values"][computed], full[m]["values"][computed], rtol=1e-6)
        assert np.all(np.isnan(got["values"][~computed]))
        report = json.loads((wd / f"results/relict/mydata/search/{m}.json").read_text())
        assert report["mode"] == "shortlist" and report["n_sampled"] == 2
        assert report["pairs_computed"] == 20 and report["pairs_total"] == 24
        assert metrics["mydata"][m]["search_recall_top_n"] == report["recall_top_n"]
        # recall from the sampled rows, recomputed here from the exhaustive matrix
        d = full[m]["distances"]
        cand = shortlist[f"candidates_{'standardised' if m == 'ncc' else 'raw'}"]
        rows = shortlist["sampled"]
        exact = np.argsort(d[rows], axis=1, kind="stable")[:, :2]
        want = np.mean([len(set(e) & set(c)) / 2 for e, c in zip(exact, cand[rows])])
        assert report["recall_top_n"] == pytest.approx(want)
        assert "search_heldout_recall_top_n" in metrics["mydata"][m]
        if report["recall_top_n"] == 1.0:
            ranked = read_tsv(wd / f"results/relict/mydata/ranking_{m}.tsv")
            mine = {r["synthetic_id"]: (r["closest_training_id"], r["rank"]) for r in ranked}
            assert {r["synthetic_id"]: r["closest_training_id"] for r in exhaustive[m]} == {
                k: v[0] for k, v in mine.items()}
    verdict = (wd / "results/verdict.rst").read_text()
    assert "shortlist search (relict.search)" in verdict and "recall of the exact n closest" in verdict


@pytest.mark.e2e
def test_the_2p5d_fd_runs_where_weights_are_given_and_lands_in_fidelity_json(tmp_path):
    """fidelity.fd_2p5d (issue 45): with a weights file, rule slice_features embeds every slice of the
    training, held-out and synthetic scans and the fidelity job reports the 2.5D FD with its CI and
    floor, per plane too; the rule reads the weights file, so a new file reruns it. (Random weights
    in RadImageNet's layout: the pretrained file is in no package; its protocol is checked against
    NV-Generate-CTMR's in test_fidelity_slices.py.)"""
    import torch

    from synthaudit.fidelity.slices import _trunk
    from workflow_helpers import ncct_only

    torch.manual_seed(0)
    weights = tmp_path / "RadImageNet-ResNet50_notop.pth"
    torch.save(_trunk().state_dict(), weights)
    params = ncct_only(tiny_params())
    params["fidelity"]["fd_2p5d"]["weights"] = str(weights)
    wd = tmp_path / "wd"
    write_params(wd, params)
    snakemake(wd, "results/fidelity/ncct_demo/fidelity.json")
    f = json.loads((wd / "results/fidelity/ncct_demo/fidelity.json").read_text())
    for key in ("fd_2p5d", "fd_2p5d_xy", "fd_2p5d_yz", "fd_2p5d_zx"):
        v = f["synthetic"][key]
        assert v["value"] > 0 and v["ci"][0] <= v["value"] <= v["ci"][1] and f["floor"][key]["value"] > 0
    assert f["fd_2p5d"]["slices"]["synthetic"]["yz"] == 9 * 44  # 9 samples x 44 sagittal slices of the ROI
    assert "RadImageNet" in f["fd_2p5d"]["definition"]
    torch.save(_trunk().state_dict(), weights)  # other weights: the slices are embedded again
    dry = snakemake(wd, "results/fidelity/ncct_demo/fidelity.json", extra=["-n"])
    assert "slice_features" in dry.stdout
