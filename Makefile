# The two commands of the README: `make demo` and `make test`. Each creates the
# environment if it is missing (pinned by constraints.txt: torch 2.13.0 is never replaced).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# the benchmarks (bench/synthaudit_bench) sit beside the package, not in the wheel
BENCH := PYTHONPATH=bench $(BIN)/python -m
STAMP := $(VENV)/.installed
PROFILE := --workflow-profile workflow/profiles/default
# make demo: the default profile, plus one thread for the jobs the demo's small volumes leave single-threaded
DEMO_PROFILE := --workflow-profile workflow/profiles/demo

.PHONY: demo test test-e2e test-slurm test-slurm-run install lint wheel lock numerics-digests baseline demo-check demo-check-all report privacy anonymise augmentation feature-study real-anatomy dvc-repro clean bench bench-quick bench-loop bench-shortlist bench-alignment-recall bench-cvae bench-local bench-gpu

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
	# the FRD tests' reference implementation, without its dependencies (OpenCV serves only its 2D resize)
	$(UV) --no-deps frd-score==1.0.1 || $(BIN)/python -m pip install --quiet --no-deps frd-score==1.0.1
	# the membership tests' reference (DOMIAS's density ratio), without its dependencies: its baselines module
	# needs only numpy, scipy, torch and scikit-learn (geomloss and tensorboardX serve its own training)
	$(UV) --no-deps domias==0.0.5 || $(BIN)/python -m pip install --quiet --no-deps domias==0.0.5
	@touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/snakemake $(DEMO_PROFILE)
	$(BIN)/snakemake $(DEMO_PROFILE) --report results/report.html
	@$(BIN)/python -m synthaudit where

test: $(STAMP)
	$(BIN)/python -m pytest

# the whole audits from a user's side (pyproject's e2e marker: the wheel in a fresh venv, dvc repro,
# every input init accepts, a crash and rerun), minutes each, and the slow checks (pyproject's slow marker:
# reference comparisons, a bench's plumbing, a training that must learn); CI runs them after make test
test-e2e: $(STAMP)
	$(BIN)/python -m pytest -m 'e2e or slow'

privacy: $(STAMP)
	$(BIN)/snakemake $(PROFILE) privacy_all

# CVAE feature-space anonymisation against k-Same on the demo's embeddings (docs/anonymisation.md)
anonymise: $(STAMP)
	$(BIN)/snakemake $(PROFILE) anonymise_all

# replicas under augmentation: plain vs alignment-aware measures per replica kind (docs/augmentation.md)
augmentation: $(STAMP)
	$(BIN)/snakemake $(PROFILE) augmentation_all

# the feature-level study that chose relict.features: every candidate encoder, smoothing, pooling grid
# and scaling scored on the demos' truth, then on real anatomy (docs/feature_study.md, docs/real_anatomy.md)
feature-study: $(STAMP)
	$(BIN)/snakemake $(PROFILE) feature_study_all
	bench/real_anatomy/run.sh feature-study

# Real anatomy (docs/real_anatomy.md): real heads from registry packages (Debian, PyPI, npm), a replica
# cohort with a known truth, `synthaudit init` + one snakemake command as a user runs them, every measure
# scored per replica kind: results/bench/real_anatomy_cohort.{json,md}
real-anatomy: $(STAMP)
	bench/real_anatomy/run.sh audit

# The tiny audit through a real one-node SLURM cluster on this machine (needs root: tests/slurm/up.sh
# installs Debian's slurm-wlm and munge and starts them): a failed job resubmitted, then the master
# killed and the run finished after --unlock, identical to a local run (tests/test_slurm.py)
test-slurm: $(STAMP)
	tests/slurm/up.sh
	$(MAKE) test-slurm-run

# the SLURM tests on a cluster already up (.ci/run brings it up first, when it can)
test-slurm-run: $(STAMP)
	$(BIN)/python -m pytest -m slurm -n0 tests/test_slurm.py

# the rules' lint and format (.ci/run): Snakemake's own checks, snakefmt (pyproject: 120 columns), and a
# spell check of what a user reads first (codespell; the project's words: pyproject's [tool.codespell])
lint: $(STAMP)
	$(BIN)/snakemake --lint
	$(BIN)/snakefmt --check Snakefile workflow/rules
	$(BIN)/codespell README.md docs/

# the wheel a user installs (pip install dist/synthaudit-*.whl -c constraints.txt): the library and
# the whole workflow as package data (hatch_build.py)
wheel: $(STAMP)
	rm -rf dist && $(BIN)/python -m pip wheel --quiet --no-deps --no-build-isolation -w dist .
	@ls -l dist/*.whl

# The committed baseline (results/metrics, results/plots, dvc.lock, docs/demo_results.md's tables):
# what make demo and the demo's feature-level study write. After a change that moves a result:
# make baseline, then commit those files with the change.
baseline: demo
	$(BIN)/snakemake $(DEMO_PROFILE) feature_study_all
	$(MAKE) lock numerics-digests
	$(BIN)/python -m synthaudit.review.readme_tables --write

# the fingerprints of every kind of computation at seconds size (synthaudit.numerics_probe), committed
# with the baseline: tests/test_numerics.py checks that every machine reproduces them
numerics-digests: $(STAMP)
	$(BIN)/python -m synthaudit.numerics_probe --out tests/data/numerics_digests.json > /dev/null

# dvc.lock: the code, params and outputs the run in this folder used (dvc commit, no rerun)
# stale outputs (files no rule writes any more) would enter the folders' hashes and fail CI's clean run
lock: $(STAMP)
	$(BIN)/python .ci/dvc_deps.py --write
	$(BIN)/python .ci/stale_outputs.py --delete
	$(BIN)/dvc commit --force --quiet

# CI (.ci/run): the demo, then every tracked metric and plot table compared with the committed one
# (the metric named on failure), dvc.lock's code and params checked against this commit (the
# feature-level study's stage too: its code and params as when its committed metrics were made),
# nothing else tracked changed (.ci/check_baseline.py). The study itself (11 min of CI's 90) is
# re-run and compared by make demo-check-all, after a change that the lock check names for it.
demo-check: demo
	$(BIN)/python .ci/check_baseline.py --targets all

# make demo-check with the demo's feature-level study re-run and compared as well
demo-check-all: demo
	$(BIN)/snakemake $(DEMO_PROFILE) feature_study_all
	$(BIN)/python .ci/check_baseline.py

report: $(STAMP)
	$(BIN)/snakemake $(PROFILE) --report results/report.html

# Benchmark of the all-pairs measures (not part of the tests; docs/benchmarks.md):
# bench at RELICT's sizes (NCCT 50 x 774, TOF 50 x 1,782), bench-quick in a few minutes.
bench: $(STAMP)
	$(BENCH) synthaudit_bench --scale ncct tof
	$(BENCH) synthaudit_bench.alignment --scale ncct --candidates 50 --out results/bench/alignment_ncct.json
	$(BENCH) synthaudit_bench.alignment --scale ncct --candidates 100 --reference-k 150 \
		--out results/bench/alignment_ncct_k100.json
	$(BENCH) synthaudit_bench.alignment --scale ncct --candidates 150 --keep 80 --exact-subset 0 \
		--reference-pairs 0 --exhaustive results/bench/alignment_recall_ncct.npz \
		--out results/bench/alignment_ncct_ranked.json

# the aligned ratio's candidates against every training volume aligned (six synthetic volumes of the
# NCCT bench cohort, ~13 min; docs/benchmarks.md): results/bench/alignment_recall_ncct.json, and every
# pair's distances (.npz) against which `make bench`'s ranked run measures its recall
bench-alignment-recall: $(STAMP)
	$(BENCH) synthaudit_bench.alignment_recall --synthetic 12,2,0,3,25,40 \
		--arrays results/bench/alignment_recall_ncct.npz --out results/bench/alignment_recall_ncct.json

# Di Salvo et al.'s CVAE loss, squared error summed vs averaged, on 1,000 simulated 768-d vectors
# (docs/deviations.md): results/bench/cvae_reconstruction.json
bench-cvae: $(STAMP)
	$(BENCH) synthaudit_bench.cvae_reconstruction --out results/bench/cvae_reconstruction.json

# local replicas (issue 33): regions of 20-40 mm pasted into the demo's held-out scans, the local
# level's sensitivity and false positives by block size and smoothing (docs/local_replicas.md)
bench-local: $(STAMP)
	$(BENCH) synthaudit_bench.local_replicas --out results/bench/local_replicas.json

# the image level's fused Triton kernels against the torch path at RELICT's NCCT size, on a CUDA machine
# (issue 47; docs/benchmarks.md "The image level on a GPU"): results/bench/gpu_image_level.json
bench-gpu: $(STAMP)
	$(BIN)/python bench/gpu/image_level.py

# the shortlist search at 2,000 training x 200 synthetic volumes (3 mm), with a projection to
# 10,000 x 5,000 at 1 mm (docs/large_datasets.md): results/bench/shortlist_scale.{json,md}
bench-shortlist: $(STAMP)
	$(BENCH) synthaudit_bench.shortlist_scale --out results/bench/shortlist_scale.json

bench-quick: $(STAMP)
	$(BENCH) synthaudit_bench --scale quick

# The developer's loop on a fresh clone of HEAD (docs/benchmarks.md): make install, make demo
# and make test timed, Snakemake's own CPU (py-spy profile), concurrency; results/bench/loop.json.
bench-loop: $(STAMP)
	$(BIN)/python -m pip install --quiet py-spy -c constraints.txt
	$(BENCH) synthaudit_bench.loop --out results/bench/loop.json --profile-master

clean:
	rm -rf results/cohort results/preprocessed results/synthetic results/relict results/figures \
	       results/plots results/feature_study results/cache results/report.html logs benchmarks .snakemake
