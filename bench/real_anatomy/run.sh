#!/usr/bin/env bash
# The real-anatomy benchmark (docs/real_anatomy.md), as a new user would run an audit:
# fetch the real scans (registries only), build the cohort with its truth, `synthaudit init` with no
# hand edit, then
#   run.sh audit          one `snakemake --cores all`, every measure scored per replica kind:
#                         results/bench/real_anatomy_<config>.{json,md}   (make real-anatomy)
#   run.sh blur           the same cohort at several generator blurs, the image level's calls against the
#                         matched null and the held-out scans as they are: results/bench/real_anatomy_blur_<config>.{json,md}
#   run.sh feature-study  the workflow's feature-level study, augmented copies left unrated:
#                         results/bench/real_anatomy_feature_study_<config>.{md,tsv}   (make feature-study)
# The cohort and the audit folders stay in data/real_anatomy/ (CONFIG=... picks another cohort.yaml).
set -euo pipefail
MODE="${1:-audit}"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
BIN="$ROOT/.venv/bin"
DATA="${DATA:-$ROOT/data/real_anatomy}"
CONFIG="${CONFIG:-$ROOT/bench/real_anatomy/cohort.yaml}"
NAME="$(basename "$CONFIG" .yaml)"
COHORT="$DATA/$NAME"
export PATH="$BIN:$PATH"
OUT="$DATA" "$ROOT/bench/real_anatomy/fetch.sh"
[ -f "$COHORT/truth.tsv" ] || "$BIN/python" "$ROOT/bench/real_anatomy/build_cohort.py" \
    --nifti "$DATA/nifti" --out "$COHORT" --config "$CONFIG"

init() {  # init <folder> <ratings> [--heldout <folder>]
  [ -f "$1/params.yaml" ] || "$BIN/python" -m synthaudit init "$1" --training "$COHORT/training" \
      --synthetic "$COHORT/synthetic" --ratings "$2" --registered --patient-pattern '^(p\d+)_' --modality mri "${@:3}"
}

case "$MODE" in
  audit)
    AUDIT="$DATA/audit_$NAME"
    init "$AUDIT" "$COHORT/ratings.tsv" --heldout "$COHORT/heldout"
    start=$(date +%s)
    (cd "$AUDIT" && "$BIN/snakemake" --cores all && "$BIN/snakemake" --cores 1 --report results/report.html)
    wall=$(( $(date +%s) - start ))
    mkdir -p "$ROOT/results/bench"
    "$BIN/python" "$ROOT/bench/real_anatomy/evaluate.py" --workspace "$AUDIT" --cohort "$COHORT" \
        --out "$ROOT/results/bench/real_anatomy_$NAME.json" --wall-seconds "$wall"
    ;;
  blur)  # the same training and held-out scans, one synthetic set per generator blur: the matched null's table
    SETS=(--set "$COHORT")
    for b in $("$BIN/python" -c "import sys, yaml; print(*yaml.safe_load(open(sys.argv[1]))['blur_table_vox'])" "$CONFIG"); do
      [ -f "${COHORT}_blur${b/./}/truth.tsv" ] || "$BIN/python" "$ROOT/bench/real_anatomy/build_cohort.py" \
          --nifti "$DATA/nifti" --out "${COHORT}_blur${b/./}" --config "$CONFIG" --generator-blur-vox "$b"
      SETS+=(--set "${COHORT}_blur${b/./}")
    done
    "$BIN/python" "$ROOT/bench/real_anatomy/blur_table.py" compute "${SETS[@]}" \
        --out "$ROOT/results/bench/real_anatomy_blur_$NAME.json"
    ;;
  feature-study)
    STUDY="$DATA/feature_study_$NAME"
    init "$STUDY" "$COHORT/ratings_plain.tsv"
    (cd "$STUDY" && "$BIN/snakemake" --cores all feature_study_all)
    mkdir -p "$ROOT/results/bench"
    # the table the docs link (its TSV stays in the study's workspace: one file per claim)
    cp "$STUDY/results/feature_study/table.md" "$ROOT/results/bench/real_anatomy_feature_study_$NAME.md"
    echo "real-anatomy feature study: results/bench/real_anatomy_feature_study_$NAME.md"
    ;;
  *) echo "usage: $0 [audit|blur|feature-study]" >&2; exit 2 ;;
esac
