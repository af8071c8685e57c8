# The two commands of the README: `make demo` and `make test`. Each creates the
# environment if it is missing (pinned by constraints.txt: torch 2.13.0 is never replaced).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PROFILE := --workflow-profile workflow/profiles/default
# make demo: the default profile, plus one thread for the jobs the demo's small volumes leave single-threaded
DEMO_PROFILE := --workflow-profile workflow/profiles/demo

.PHONY: demo test install lint report privacy anonymise augmentation feature-study real-anatomy dvc-repro clean bench bench-quick bench-loop

# uv installs the same pins as pip (constraints.txt) in 34 s instead of 85 s on 2 cores, bytecode
# compiled; it does not read pip's configuration, so pip's find-links (a local torch CPU wheel) are passed on.
UV_VERSION := 0.13.9
UV := $(BIN)/uv pip install --python $(BIN)/python --quiet $(foreach d,$(PIP_FIND_LINKS),--find-links $(d))

$(STAMP): requirements.txt constraints.txt pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet uv==$(UV_VERSION) && $(UV) --compile-bytecode -r requirements.txt -c constraints.txt \
	  || { echo "uv failed (it reads no pip.conf: set UV_INDEX_URL for a mirror); installing with pip"; \
	       $(BIN)/python -m pip install --quiet -r requirements.txt -c constraints.txt; }
	$(UV) --no-deps --no-build-isolation -e . || $(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	@touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/snakemake $(DEMO_PROFILE)
	$(BIN)/snakemake $(DEMO_PROFILE) --report results/report.html
	@$(BIN)/python -m synthaudit where

test: $(STAMP)
	$(BIN)/python -m pytest

privacy: $(STAMP)
	$(BIN)/snakemake $(PROFILE) privacy_all

# CVAE feature-space anonymisation against k-Same on the demo's embeddings (README, "Anonymisation")
anonymise: $(STAMP)
	$(BIN)/snakemake $(PROFILE) anonymise_all

# replicas under augmentation: plain vs alignment-aware measures per replica kind (README item 17)
augmentation: $(STAMP)
	$(BIN)/snakemake $(PROFILE) augmentation_all

# the feature-level study that chose relict.features: every candidate encoder, smoothing, pooling grid
# and scaling scored on the demos' truth, then on real anatomy (README "Feature level", docs/real_anatomy.md)
feature-study: $(STAMP)
	$(BIN)/snakemake $(PROFILE) feature_study_all
	bench/real_anatomy/run.sh feature-study

# Real anatomy (docs/real_anatomy.md): real heads from registry packages (Debian, PyPI, npm), a replica
# cohort with a known truth, `synthaudit init` + one snakemake command as a user runs them, every measure
# scored per replica kind: results/bench/real_anatomy_cohort.{json,md}
real-anatomy: $(STAMP)
	bench/real_anatomy/run.sh audit

lint: $(STAMP)
	$(BIN)/snakemake --lint

report: $(STAMP)
	$(BIN)/snakemake $(PROFILE) --report results/report.html

# Benchmark of the all-pairs measures (not part of the tests; README, "Benchmark"):
# bench at RELICT's sizes (NCCT 50 x 774, TOF 50 x 1,782), bench-quick in a few minutes.
bench: $(STAMP)
	$(BIN)/python -m synthaudit.bench --scale ncct tof
	$(BIN)/python -m synthaudit.bench.alignment --spacing 1 --out results/bench/alignment_1mm.json
	$(BIN)/python -m synthaudit.bench.alignment --scale ncct --out results/bench/alignment_ncct.json
	$(BIN)/python -m synthaudit.bench.embedding --spacing 1 --out results/bench/embedding_1mm.json

bench-quick: $(STAMP)
	$(BIN)/python -m synthaudit.bench --scale quick
	$(BIN)/python -m synthaudit.bench.alignment --spacing 2 --out results/bench/alignment_2mm.json
	$(BIN)/python -m synthaudit.bench.embedding --spacing 2 --out results/bench/embedding_2mm.json

# The developer's loop on a fresh clone of HEAD (README, "Benchmark"): make install, make demo
# and make test timed, Snakemake's own CPU (py-spy profile), concurrency; results/bench/loop.json.
bench-loop: $(STAMP)
	$(BIN)/python -m pip install --quiet py-spy -c constraints.txt
	$(BIN)/python -m synthaudit.bench.loop --out results/bench/loop.json --profile-master

clean:
	rm -rf results/cohort results/preprocessed results/synthetic results/relict results/figures \
	       results/plots results/feature_study results/report.html logs benchmarks .snakemake
