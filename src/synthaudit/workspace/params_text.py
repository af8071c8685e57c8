"""The workspace's params.yaml: the installed workflow's file with its comments, edited round-trip
(ruamel.yaml), its datasets replaced by this audit and every stage that names a demo dataset switched."""

from __future__ import annotations

from pathlib import Path

from .. import resources
from .discover import Inputs, MIN_HELDOUT_AT_5_PERCENT
from . import estimate as _limits  # the budgets as the decision read them (a test may change them)
from .estimate import (
    ALIGNMENT_CANDIDATES_PER_N, ALIGNMENT_RANKED_KEEP_PER_N, ALIGNMENT_RANKED_PER_N, RELICT_N, class_names,
    derived_defaults, privacy_possible,
)


COMMENT_COLUMN = 32  # where params.yaml's end-of-line comments start


def _yaml():
    from ruamel.yaml import YAML

    y = YAML()  # round-trip
    y.preserve_quotes = True
    y.width = 4096  # a long value is never folded onto a second line
    y.indent(mapping=2, sequence=4, offset=2)
    y.representer.add_representer(type(None), lambda r, _: r.represent_scalar("tag:yaml.org,2002:null", "null"))
    return y


def load_round_trip(text: str):
    return _yaml().load(text)


def dump_round_trip(doc) -> str:
    import io

    out = io.StringIO()
    _yaml().dump(doc, out)
    return out.getvalue()


def _flow(value):
    """Lists and mappings written in flow style ([a, b], {}), as params.yaml writes short ones."""
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    if isinstance(value, list) and not isinstance(value, CommentedSeq):
        seq = CommentedSeq(_flow(v) for v in value)
        seq.fa.set_flow_style()
        return seq
    if isinstance(value, dict) and not isinstance(value, CommentedMap):
        m = CommentedMap((k, _flow(v)) for k, v in value.items())
        m.fa.set_flow_style()
        return m
    return value


def _last_leaf(mapping, key):
    """(mapping, key) of the last scalar entry inside ``mapping[key]``: where ruamel keeps the
    comment lines that follow a block (they belong to the next key)."""
    from ruamel.yaml.comments import CommentedMap

    while isinstance(mapping[key], CommentedMap) and len(mapping[key]) and not mapping[key].fa.flow_style():
        mapping, key = mapping[key], list(mapping[key].keys())[-1]
    return mapping, key


def _following_lines(mapping, key, indent: int) -> str:
    """The comment lines after ``mapping[key]``'s value that are indented at most ``indent``
    (headings of what follows) and the blank lines before them: kept when the value is replaced;
    deeper lines continue the replaced entry's own comment and go with it."""
    leaf_map, leaf_key = _last_leaf(mapping, key)
    token = (leaf_map.ca.items.get(leaf_key) or [None] * 4)[2]
    if token is None:
        return ""
    lines = token.value.split("\n")[1:]  # the first line is the entry's own comment
    for i, line in enumerate(lines):
        if line.strip() and len(line) - len(line.lstrip()) <= indent:
            while i > 0 and not lines[i - 1].strip():
                i -= 1
            return "\n".join(lines[i:])
    blank = 0
    while blank < len(lines) and not lines[-1 - blank].strip():
        blank += 1
    return "\n" * (blank - 1) if blank > 1 else ""


def _set(doc, path: str, value, comment: str | None = None) -> None:
    """Replace a dotted key's value (a block becomes ``value``), with ``comment`` on its line."""
    *parents, key = path.split(".")
    mapping = doc
    for k in parents:
        if k not in mapping:
            raise KeyError(path)
        mapping = mapping[k]
    if key not in mapping:
        raise KeyError(path)
    indent = mapping.lc.key(key)[1]
    tail = _following_lines(mapping, key, indent)
    mapping[key] = _flow(value)
    mapping.ca.items.pop(key, None)
    if comment is not None:
        width = indent + len(dump_round_trip({key: _flow(value)}).split("\n")[0])  # the line, comment aside
        mapping.yaml_add_eol_comment("# " + comment, key, column=max(COMMENT_COLUMN, width + 2))
    if tail:
        leaf_map, leaf_key = _last_leaf(mapping, key)
        items = leaf_map.ca.items.setdefault(leaf_key, [None] * 4)
        if items[2] is None:
            from ruamel.yaml.tokens import CommentToken
            from ruamel.yaml.error import CommentMark

            items[2] = CommentToken("\n", CommentMark(0), None)
        items[2].value = items[2].value.rstrip("\n") + "\n" + tail


def set_value(text: str, path: str, value, comment: str | None = None) -> str:
    """``text`` (a params.yaml) with one dotted key set to a Python value, comments kept."""
    doc = load_round_trip(text)
    _set(doc, path, value, comment)
    return dump_round_trip(doc)


def _unet_patch(summary: dict, registered: bool) -> list[int]:
    """The U-Net's training patch: 48 voxels per axis, smaller where the grid is (a multiple of 8,
    what its three downsamplings need); a registered grid under 48 voxels refused the default."""
    shape = summary.get("shape") if registered else None
    return [48 if not shape else max(8, min(48, int(n)) // 8 * 8) for n in (shape or [48, 48, 48])]


def _path(p: Path, workspace: Path | None = None) -> str:
    """An input's absolute path; relative where it lies inside the workspace being written (DICOM
    series converted there), so that the workspace can be renamed into place and moved."""
    p = Path(p).resolve()
    if workspace is not None and p.is_relative_to(Path(workspace).resolve()):
        return str(p.relative_to(Path(workspace).resolve()))
    return str(p)


def _datasets_block(inp: Inputs, summary: dict, manifest: str, n_heldout: int) -> str:
    name = inp.name
    registered = inp.registered
    lines = [
        "datasets:",
        f"  {name}:",
        "    source: manifest            # written by synthaudit init from your folders (ids, patients, roles, labels)",
        f"    manifest: {manifest}",
    ]
    if registered:
        lines += [
            "    preprocess:",
            "      register: false           # --registered: your scans are on one grid already; only checked",
            "      intensity:",
            "        window: null            # intensities as they are: the synthetic volumes are compared as they are",
            "        rescale: false          # too, so both sides stay in the same units",
        ]
    else:
        template = "mni_ct" if inp.modality == "ct" else "mni_t1"
        window = "[-100.0, 200.0]" if inp.modality == "ct" else "null"
        lines += [
            "    preprocess:                 # RELICT 2.1: affine registration to MNI, resampling, ROI crop",
            "      register: true            # your synthetic volumes must be on the output grid below already",
            f"      template: {template}".ljust(32) + "  # mni_ct | mni_t1 | a NIfTI path",
            "      spacing_mm: 2.0           # output voxel spacing (RELICT: 1.0)",
            "      roi:",
            "        size_vox: [91, 109, 91] # RELICT at 1 mm: [182, 218, 182]",
            "        center_mm: [0.5, -17.5, 18.5]",
            "      registration:             # rigid, then affine, to the target (params.yaml: why each value)",
            "        target: reference       # every scan to your first training scan, itself registered to the "
            "template once",
            "                                # (real heads given random poses: 78 of 80 scans kept their patient "
            "nearest; template: 64)",
            "        stages: [rigid, affine] # 6 parameters first: a pose is what differs between two scans",
            "        mask_margin_mm: 0.0     # metric samples the template's head (mni_t1: its brain); null: all",
            "        clip: " + ("[-200.0, 1500.0] # HU range the metric sees" if inp.modality == "ct" else
                            "null              # MRI units are arbitrary: no clipping"),
            "        rotation_search_deg: 30.0  # initial search over head rotations of +-this",
            "        histogram_bins: 50",
            "        sampling_fraction: 0.25",
            "        shrink_factors: [4, 2, 1]  # 8, 4, 2 mm at spacing_mm 2",
            "        smoothing_sigmas_vox: [2, 1, 0.5]",
            "        iterations: 500         # a cap per level; the QC table shows levels that reached it",
            "        learning_rate: 0.2      # step (mm) per iteration at the finest level",
            "        seed: 1",
            "        qc_outlier_mads: 5.0    # QC: a correlation with the registration's target this many",
            "                                # robust SDs below the dataset's median fails (qc.tsv)",
            "        qc_min_correlation: null",
            "      intensity:",
            f"        window: {window}".ljust(32) + "  # clip (HU for CT); null keeps intensities",
            ("        rescale: true           # map the window to [0, 1]: your samples must be in those units"
             if inp.modality == "ct" else
             "        rescale: false          # no window to map (MRI): intensities as they are"),
        ]
    lines += ["    synthetic:", "      source: folder            # your generator's samples (--synthetic)",
              "      folder: null"]  # the path is set by params_text (quoted as YAML needs)
    if inp.labels:
        classes = class_names(inp, summary)
        if inp.synthetic_labels:
            lines += ["    segmentation:", "      source: labels            # your label maps for both sets (--labels, "
                      "--synthetic-labels)",
                      f"      classes: [{', '.join(classes)}]".ljust(30) + "  # label values 1, 2, ...; others are refused",
                      "      synthetic_labels: null"]
        else:
            lines += ["    segmentation:",
                      "      source: unet              # a 3D U-Net trained here on your training labels, run on "
                      "every volume alike",
                      f"      classes: [{', '.join(classes)}]".ljust(30) + "  # label values 1, 2, ...; others are refused",
                      f"      unet: {{epochs: 40, patch_size: {_unet_patch(summary, registered)}, batch_size: 2, "
                      "learning_rate: 0.001,",
                      "             channels: [16, 32, 64, 128], seed: 11}"]
    else:
        lines += ["    # no segmentation level: no --labels (give a folder of <id>.nii.gz label maps to add it)"]
    lines += ["    ratings: null               # a rating table (synthetic_id, rater, score 1-4); null: none"]
    if n_heldout < MIN_HELDOUT_AT_5_PERCENT:
        lines += [f"    # {n_heldout} held-out scans: calibrated calls need >= {MIN_HELDOUT_AT_5_PERCENT} at the 5 % "
                  "rate (--heldout); the ranking is complete without them"]
    return "\n".join(lines) + "\n"


def params_text(inp: Inputs, summary: dict, rows: list[dict], manifest: str = "data/manifest.tsv",
                derived: dict | None = None, workspace: Path | None = None) -> str:
    """The installed workflow's params.yaml with its comments, its datasets replaced by this audit
    and every stage that names a demo dataset switched to what this audit's data support."""
    doc = load_round_trip(resources.default_params().read_text())
    name = inp.name
    heldout = [r for r in rows if r["role"] == "heldout"]
    block = load_round_trip(_datasets_block(inp, summary, manifest, len(heldout)))["datasets"]
    ds = block[name]
    ds["synthetic"]["folder"] = _path(inp.synthetic, workspace)
    if inp.labels and inp.synthetic_labels:
        ds["segmentation"]["synthetic_labels"] = _path(inp.synthetic_labels)
    if inp.ratings:
        ds["ratings"] = _path(inp.ratings)
    _set(doc, "datasets", block)
    _set(doc, "generator_sweep.dataset", None, "off: needs a generator trained here (synthetic.source ldm)")
    on, why = privacy_possible(rows)
    if on:
        _set(doc, "privacy.training_sets", [name], why)
    else:
        _set(doc, "privacy.training_sets", [], f"off: {why}; the filters learn patient identity")
    _set(doc, "privacy.spaces", ["image"], "the latent space needs a generator's autoencoder")
    _set(doc, "privacy.latent_autoencoder", None, "off: no generator trained here")
    d = derived or derived_defaults(inp, rows, 0, summary)
    n = d["n_closest"]
    _set(doc, "relict.n_closest", n,
         f"from your data: RELICT's 50 (774 training volumes there); {d['n_train']} training scans"
         + ("" if n == RELICT_N else f" allow {n} (all of them); ratios are not comparable with n = 50"))
    grid = " x ".join(map(str, d["shape"])) + " at " + "/".join(f"{x:g}" for x in d["spacing_mm"]) + " mm"
    estimate = (f"about {d['alignment_hours']:.1f} h on 2 threads for {d['alignment_pairs']} pairs on your {grid} grid"
                + (f", and {d['alignment_recall_check_pairs']} pairs of its recall check (relict.alignment.recall)"
                   if d.get("alignment_recall_check_pairs") else ""))
    if d["alignment_on"]:
        _set(doc, "relict.alignment.datasets", [name],
             f"on (init): augmented copies (flipped, shifted, rotated) searched; {estimate}; [] turns it off")
    else:
        _set(doc, "relict.alignment.datasets", [],
             f"off (init): {estimate}, above {_limits.ALIGNMENT_BUDGET_HOURS:g} h; [{name}] searches flipped, "
             "shifted and rotated copies (the verdict says they were not)")
    if d["alignment_candidates"] >= d["n_train"]:
        _set(doc, "relict.alignment.candidates", d["alignment_candidates"],
             f"K = every training scan (init: {d['n_train']}, no more than "
             + (f"{ALIGNMENT_RANKED_KEEP_PER_N:g}" if d.get("alignment_coarse_stage") else f"{ALIGNMENT_CANDIDATES_PER_N}")
             + " x n_closest): every pair aligned, the ratio exact by construction")
    elif d.get("alignment_rank_candidates"):
        _set(doc, "relict.alignment.candidates", d["alignment_candidates"],
             f"K = {ALIGNMENT_RANKED_KEEP_PER_N:g} x n_closest (init): the best of rank_candidates by the coarse "
             "search, aligned at full resolution (the 2 mm ranking needed up to 1.5n; docs/benchmarks.md)")
        _set(doc, "relict.alignment.rank_candidates", d["alignment_rank_candidates"],
             f"{ALIGNMENT_RANKED_PER_N} x n_closest (init), at most the training set: pre-selected and ranked on "
             "coarse_mm block means (the 4 mm pre-selection needed up to 2.8n to hold the n closest)")
    else:
        _set(doc, "relict.alignment.candidates", d["alignment_candidates"],
             f"K = {ALIGNMENT_CANDIDATES_PER_N} x n_closest (init), at most the training set: the candidates aligned "
             "at full resolution; held 92-100 % of the ratio's n closest aligned distances on the NCCT benchmark "
             "(docs/benchmarks.md), where K = n left the ratio up to 0.025 low")
    f = d["preselect_factor"]
    _set(doc, "relict.alignment.preselect_block_mm", float(d["preselect_block_mm"]),
         f"{f}x{f}x{f} voxels on your grid ({' x '.join(f'{f * x:g}' for x in d['spacing_mm'])} mm); "
         "larger blocks where memory (mem_mb) needs")
    if d["local_on"]:
        _set(doc, "relict.local.enabled", True,
             f"on (init): regions copied into new volumes; the job holds about {d['local_memory_gb']:.1f} GB "
             "of volumes (synthetic, held-out and positive controls)")
    else:
        why = (f"the job would hold about {d['local_memory_gb']:.0f} GB of volumes, above {_limits.LOCAL_MEMORY_GB:g}"
               if d["n_heldout"] >= 2 else "needs held-out scans (--heldout)")
        _set(doc, "relict.local.enabled", False, f"off (init): {why}")
    frd_cost = (f"about {d['frd_hours']:.1f} h on 2 processes for the PyRadiomics features of "
                f"{d['n_train'] + d['n_heldout'] + d['n_synthetic']} volumes")
    if d["frd_on"]:
        _set(doc, "fidelity.frd", True, f"on (init): FRD beside the embeddings' measures; {frd_cost}")
    else:
        _set(doc, "fidelity.frd", False, f"off (init): {frd_cost}, above {_limits.FRD_BUDGET_HOURS:g} h; "
             "true computes FRD (docs/fidelity.md)")
    if d.get("extractor"):
        _set(doc, "relict.features.extractor", d["extractor"],
             "init: the pretrained 3D CT encoder (installed); on real heads both embedding measures "
             "BA 1.00 without augmented copies, the untrained ResNet-50 0.98 (RMSE) and 0.93 (cosine): "
             "docs/real_anatomy.md. medicalnet_resnet50 is RELICT's (weights: MedicalNet's file)")
    if inp.ratings:
        _set(doc, "feature_study.datasets", [name], "your rating scores each candidate network")
    else:
        _set(doc, "feature_study.datasets", [], "off: needs a rating (--ratings)")
    _set(doc, "anonymise.datasets", {}, "off: needs class labels per scan (docs: anonymisation)")
    return dump_round_trip(doc)
