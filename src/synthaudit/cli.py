"""Command line: ``python -m synthaudit {init,validate,where}``.

Why: a user with folders of NIfTI should get an audit folder without editing the
repository's configuration (init), be able to check a params file without starting
Snakemake (validate), and find the results of a finished run without knowing the layout
(where).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .config import ParamsError, load_params
from .io import read_metrics


def _validate(args) -> int:
    try:
        params = load_params(args.params)
    except ParamsError as e:
        print(e, file=sys.stderr)
        return 2
    from .workflow_plan import PlanError, WorkflowPlan

    try:  # as the workflow does: training_from entries read their training side from the named dataset
        plans = WorkflowPlan(params).plans
    except PlanError as e:
        print(e, file=sys.stderr)
        return 2
    for name, p in plans.items():
        print(f"{name}: {len(p.train)} training, {len(p.heldout)} held-out, {len(p.synthetic)} synthetic volumes")
    print(f"{args.params}: valid")
    return 0


def _init(args) -> int:
    from .workspace import Inputs, WorkspaceError, write_workspace

    if args.nnunet and not (Path(args.nnunet) / "imagesTr").is_dir():
        print(f"synthaudit init: {args.nnunet}: not an nnU-Net raw dataset (no imagesTr/ folder)", file=sys.stderr)
        return 2
    inp = Inputs(training=Path(args.training or args.nnunet), synthetic=Path(args.synthetic),
                 heldout=Path(args.heldout) if args.heldout else None,
                 labels=Path(args.labels) if args.labels else None,
                 synthetic_labels=Path(args.synthetic_labels) if args.synthetic_labels else None,
                 patient_ids=Path(args.patient_ids) if args.patient_ids else None,
                 patient_pattern=args.patient_pattern, registered=args.registered, modality=args.modality,
                 ratings=Path(args.ratings) if args.ratings else None, classes=args.classes or [], name=args.name,
                 timing=not args.no_timing)
    try:
        p = write_workspace(Path(args.audit_dir), inp)  # checked as the workflow will, then renamed into place
    except (WorkspaceError, ParamsError) as e:
        print(f"synthaudit init: {e}", file=sys.stderr)
        return 2
    d = Path(args.audit_dir)
    print(f"\nwrote {d}/: params.yaml, data/manifest.tsv, Snakefile, dvc.yaml, profiles/")
    print(f"  {p['n_train']} training scans of {p['n_patients']} patients ({p['patients']}), "
          f"{p['n_heldout']} held-out, {p['n_synthetic']} synthetic volumes"
          + (f"; grid {' x '.join(map(str, p['summary']['shape']))}" if p["summary"]["shape"] else ""))
    print("  levels: " + "; ".join(p["levels"]))
    print("  calibrated replica calls: " + ("yes (false-positive rate from the held-out scans)" if p["calibrated"]
                                            else "no (needs >= 19 held-out scans; the ranking is complete without)"))
    sr = p["search"]
    if sr["mode"] == "exhaustive":
        how = f"every pair computed (exhaustive search: at most relict.search.auto_above_pairs = {sr['threshold']:,})"
    else:
        how = (f"shortlist search above {sr['threshold']:,} pairs (relict.search): {sr['k']} candidates per volume, "
               f"{sr['pairs']:,} pairs computed, {sr['sample']} volumes also searched exhaustively to measure its recall")
    from .review.timing import estimated_wall_seconds

    est = p["estimate"]
    print(f"  work: {p['pairs']:,} volume pairs per measure; {how}")
    print("  time (job-minutes on 2 threads; " + est["how"] + (f", {est['machine']}" if est["machine"] else "")
          + "; the segmentation U-Net and FRD within label classes extra): "
          + "; ".join(f"{stage} {seconds / 60:.1f}" for stage, seconds in est["stages_s"].items())
          + f"; the whole run about {estimated_wall_seconds(est) / 60:.0f} min on this machine"
          + f" (written to {d}/data/estimate.json; the verdict sets the measured times beside them)")
    der = p.get("derived")
    if der:
        print(f"  from your data: n_closest {der['n_closest']} (RELICT: 50"
              + ("" if der["n_closest"] == 50 else f"; {der['n_train']} training scans") + "); augmented copies "
              + ("searched (relict.alignment on" if der["alignment_on"] else "NOT searched (relict.alignment off")
              + f": about {der['alignment_hours']:.1f} h on 2 threads for {der['alignment_pairs']} pairs; "
              f"pre-selection on {der['preselect_factor']}-voxel blocks)"
              + (f"; feature level: {der['extractor']} (pretrained, docs/real_anatomy.md)" if der.get("extractor")
                 else "")
              + f"; FRD {'on' if der['frd_on'] else 'off'} (fidelity.frd: about {der['frd_hours']:.1f} h of "
              "PyRadiomics on 2 processes)"
              + (f"; privacy filters' training {der['privacy_hours_range'][0] * 60:.1f}-"
                 f"{der['privacy_hours_range'][1] * 60:.1f} job-minutes (early stopping decides)"
                 if der.get("privacy_hours_range") else ""))
    if p["warning"]:
        print(f"  WARNING: {p['warning']}")
    print(f"\nnext:\n  cd {d}\n  snakemake --cores all          # or: dvc repro; SLURM: --workflow-profile "
          "profiles/slurm\n  python -m synthaudit where      # the verdict and where everything is")
    return 0


def _where(args) -> int:
    root = Path(args.root)
    params = load_params(root / "params.yaml")
    metrics = root / "results/metrics/relict.json"
    from .review.verdict import dataset_verdict, verdict_lines

    aligned = set((params["relict"].get("alignment") or {}).get("datasets") or [])
    verdicts = [v for v in (dataset_verdict(root, d, params["relict"]["measures"], aligned=d in aligned)
                            for d in params["datasets"]) if v]
    if verdicts:  # the answer first: which volumes are copies, of whom
        print("\nverdict")
        for v in verdicts:
            print("\n".join("  " + line for line in verdict_lines(v)))
    from .resources import version

    data = json.loads(metrics.read_text()) if metrics.is_file() else {}
    made_by = data.pop("synthaudit", {})  # the provenance entry; the rest: one entry per dataset
    print(f"\nsynthaudit results (synthaudit {version()}"
          + (f"; metrics written by {made_by['version']}, params SHA-256 {made_by.get('params_sha256', '?')[:16]}"
             if made_by.get("version") else "")
          + (f", {made_by['numerics']} numerics ({made_by.get('isa', '?')}) on {made_by.get('device', '?')}"
             if made_by.get("numerics") else "") + ")")
    for d in params["datasets"]:
        print(f"  [{d}]")
        rankings = sorted((root / "results/relict" / d).glob("ranking_*.tsv"))
        for path in rankings:  # the measures this dataset was ranked by (its own list, its levels)
            m = path.stem.removeprefix("ranking_")
            print(f"    ranking ({m}):{' ' * max(1, 16 - len(m))}{path.relative_to(root)}")
        if not rankings:
            print("    rankings:         not computed yet")
        print(f"    figures:          results/figures/{d}/")
        print(f"    registration QC:  results/preprocessed/{d}/qc.tsv, qc_montage.png")
    print(f"  metrics:            {metrics.relative_to(root)}")
    print("  verdict page:       results/verdict.html (read first: the decision and the copies at full width)")
    print("  report:             results/report.html")
    if metrics.is_file():
        for d, per in data.items():
            for m, e in per.items():
                if "balanced_accuracy" in e:
                    print(f"    {d:>12} {m:>5}: balanced accuracy {_f(e['balanced_accuracy'])} at threshold "
                          f"{_f(e['threshold'])} (sensitivity {_f(e['sensitivity'])}, specificity "
                          f"{_f(e['specificity'])}, AUC {_f(e['auc'])})")
    copies = root / "results/metrics/copies.json"
    if copies.is_file():  # calibrated calls against the held-out scans, combined over the measures
        print(f"  calibrated copies:  {copies.relative_to(root)}, results/relict/<dataset>/copies.tsv")
        for d, c in read_metrics(copies).items():
            if "n_copies" not in c:  # a set without calibrated measures
                continue
            print(f"    {d:>12}: {c['n_copies']} synthetic volume(s) called copies at a false-positive rate of "
                  f"{c['rate']:g} ({_pct(c.get('percent_synthetic_copies'))}), {c['n_patients_copied']} training "
                  f"patient(s) copied ({_pct(c.get('percent_patients_copied'))}); {c['n_heldout']} held-out scans")
            if c.get("local_anatomy_blocks") == 0:
                print(f"    {'':>12}  local copies: nothing tested (no block has anatomy in half its voxels; "
                      f"results/relict/{d}/local/)")
            elif "local_n_called" in c:  # relict.local: regions copied into new volumes, and its controls
                sizes = [k.removeprefix("local_control_").removesuffix("mm_sensitivity") for k in c
                         if k.startswith("local_control_") and k.endswith("mm_sensitivity")
                         and "whole_volume" not in k]
                print(f"    {'':>12}  local copies: {c['local_n_called']} volume(s) called; positive controls called "
                      + (", ".join(f"{s} mm {c[f'local_control_{s}mm_sensitivity']:.2f}" for s in sizes) or "none")
                      + f" (results/relict/{d}/local/)")
    privacy = root / "results/metrics/privacy.json"
    if privacy.is_file():
        print(f"  privacy filters:    {privacy.relative_to(root)}, results/privacy/<training set>/<space>/")
        for owner, spaces in read_metrics(privacy).items():
            for space, e in spaces.items():
                if not isinstance(e, dict):
                    continue
                flagged = ", ".join(f"{n} {_f(x['flag_rate'])}" for n, x in e["synthetic"].items())
                print(f"    {owner:>12} {space:>6}: verification AUC {_f(e['verification_auc'])}, specificity "
                      f"{_f(e['specificity'])}, flag rate {flagged}")
    membership = root / "results/metrics/membership.json"
    if membership.is_file():  # synthaudit.membership: do the samples tell who trained the generator?
        print(f"  membership:         {membership.relative_to(root)}, results/membership/<dataset>/")
        for d, e in read_metrics(membership).items():
            aucs = {k: a for k, a in e.items() if isinstance(a, dict) and "auc" in a}
            if aucs:
                name = max(aucs, key=lambda k: (aucs[k]["auc"], k))
                a = aucs[name]
                print(f"    {d:>12}: strongest attack {name}, AUC {_f(a['auc'])} [{_f(a['auc_ci_low'])}, "
                      f"{_f(a['auc_ci_high'])}] ({e['members']} member, {e['nonmembers']} non-member patients)")
    gate = root / "results/gate.json"
    print("  the decision:       " + (f"{gate.relative_to(root)}: {json.loads(gate.read_text())['result']}"
                                      if gate.is_file() else "synthaudit gate (not run yet)")
          + "; the card: synthaudit card (docs/gate.md)")
    return 0


def _gate(args) -> int:
    from .review.gate import PolicyError, run

    try:
        return run(args.audit_dir, args.policy, args.out)
    except (PolicyError, FileNotFoundError) as e:
        print(f"synthaudit gate: {e}", file=sys.stderr)
        return 2


def _card(args) -> int:
    from .review.card import write

    card = write(args.audit_dir)
    n = sum(len(rows) for rows in card["files"].values())
    print(f"{Path(args.audit_dir) / 'results/audit_card.json'} (and .md): {n} volume(s) by SHA-256, "
          f"gate {card['gate']['result']}")
    return 0


def _verify_card(args) -> int:
    from .review.card import verify

    lines, status = verify(args.card, args.folder)
    print("\n".join(lines))
    return status


def _convert_dicom(argv) -> int:
    from .dicom import main as convert_dicom

    return convert_dicom(argv)


def _f(v) -> str:
    return "NA" if v is None else f"{v:.3f}"


def _pct(v) -> str:
    return "NA" if v is None else f"{v:.1f} %"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="synthaudit", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    i = sub.add_parser("init", help="make an audit folder from your folders (NIfTI, DICOM series, an nnU-Net dataset)")
    i.add_argument("audit_dir", help="the new folder (its params.yaml, manifest, Snakefile and results)")
    src = i.add_mutually_exclusive_group(required=True)
    src.add_argument("--training", help="folder of training NIfTI or DICOM series, a manifest TSV, or an nnU-Net "
                                        "raw dataset")
    src.add_argument("--nnunet", metavar="DATASET_FOLDER",
                     help="an nnU-Net raw dataset (imagesTr/, labelsTr/, dataset.json; imagesTs/ held out)")
    i.add_argument("--synthetic", required=True, help="folder of the generator's samples")
    i.add_argument("--heldout", help="folder of held-out real scans (never trained on): calibration, privacy")
    i.add_argument("--labels", help="folder of label maps <id>.nii.gz for the real scans (segmentation level)")
    i.add_argument("--synthetic-labels", help="folder of label maps for the synthetic volumes (else a U-Net)")
    i.add_argument("--registered", action="store_true", help="scans and samples are on one grid already")
    i.add_argument("--patient-ids", help="TSV with columns id, patient_id")
    i.add_argument("--patient-pattern", help="regular expression whose first group is the patient, e.g. '^(.+)_'")
    i.add_argument("--modality", choices=["ct", "mri"], default="ct", help="template and window when registering")
    i.add_argument("--ratings", help="rating table (synthetic_id, rater, score 1-4): evaluation")
    i.add_argument("--classes", nargs="+", help="names of label values 1, 2, ... (default class1, ...)")
    i.add_argument("--name", default="audit", help="the dataset's name in params.yaml and results/")
    i.add_argument("--no-timing", action="store_true", help="skip timing the heavy stages on your samples "
                   "(up to about a minute): the estimate then uses constants measured elsewhere")
    i.set_defaults(func=_init)
    v = sub.add_parser("validate", help="check params.yaml and the datasets it names")
    v.add_argument("params", nargs="?", default="params.yaml")
    v.set_defaults(func=_validate)
    w = sub.add_parser("where", help="print where the results of a run are")
    w.add_argument("--root", default=".")
    w.set_defaults(func=_where)
    g = sub.add_parser("gate", help="hold a finished audit's metrics against a release policy (exit 0 pass, "
                       "1 fail, 2 inconclusive)")
    g.add_argument("audit_dir", nargs="?", default=".", help="the audit folder (its results/metrics/)")
    g.add_argument("--policy", help="a policy YAML (default: the shipped workflow/gate/policy.yaml; docs/gate.md)")
    g.add_argument("--out", help="where to write the result (default: AUDIT_DIR/results/gate.json)")
    g.set_defaults(func=_gate)
    c = sub.add_parser("card", help="write results/audit_card.json and .md: every input by SHA-256, provenance, the gate")
    c.add_argument("audit_dir", nargs="?", default=".")
    c.set_defaults(func=_card)
    vc = sub.add_parser("verify-card", help="check that a folder's volumes are the ones an audit card names")
    vc.add_argument("card", help="an audit_card.json")
    vc.add_argument("folder", help="the folder of volumes you hold (NIfTI files, or DICOM series that init "
                                        "converted)")
    vc.set_defaults(func=_verify_card)
    dc = sub.add_parser("convert-dicom", help="DICOM series to NIfTI for init (one volume per series folder, "
                        "checked; OUT/patients.tsv from PatientID)")
    dc.add_argument("folder", help="a folder of series folders (one series each), or one series folder")
    dc.add_argument("out", help="the folder for the NIfTI files (then: synthaudit init --training OUT "
                                "--patient-ids OUT/patients.tsv ...)")
    dc.set_defaults(func=lambda a: _convert_dicom([a.folder, a.out]))
    args = ap.parse_args(argv)
    return args.func(args)
