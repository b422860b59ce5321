# flexatt — common tasks. `make help` lists them.
#
# The environment is a virtualenv in .venv. PyTorch is installed FIRST and pinned (CPU build
# 2.13.0), so that no dependency pulls a multi-GB CUDA build; elsewhere, point pip at the CPU
# wheels, e.g. `make TORCH_PIP_ARGS="--index-url https://download.pytorch.org/whl/cpu" venv`.

PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
TORCH_PIP_ARGS ?=
BIN := $(VENV)/bin
STAMP := $(VENV)/.flexatt-installed
RESULTS := benchmarks/results
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c  # a benchmark piped into tee fails its target when it fails
# Stages run `python` and `dvc` from the virtualenv.
export PATH := $(abspath $(BIN)):$(PATH)
# W&B stays offline unless you have configured an API key.
export WANDB_MODE ?= $(if $(WANDB_API_KEY),online,offline)

.PHONY: help venv test test-slow test-all repro smoke char bible grc bible_tf grc_tf units reordering params bench bench-scale bench-pipeline clean report push pull

help:
	@echo "make repro      create .venv and run the pipeline (flexatt repro: dvc repro, independent stages side by side)"
	@echo "make test       create .venv and run the fast test suite (minutes; run it before every change)"
	@echo "make test-slow  only the slow tests: the smoke pipeline, DVC queue, real sweeps, DDP training"
	@echo "make test-all   every test, fast and slow (what CI runs, besides other precisions and SIMD levels)"
	@echo "make smoke      the tiny synthetic 'smoke' profile's pipeline (pipelines/smoke/; minutes)"
	@echo "make char       the character-level 'char' profile's pipeline up to Table 1 (pipelines/char/; hours)"
	@echo "make grc        the Koine Greek -> English 'grc' profile as units (about half an hour to an hour a unit; resumes)"
	@echo "make grc_tf     the Transformer on the Greek corpus as units (pipelines/grc_tf/; about 2 hours a unit)"
	@echo "make bible_tf   the Transformer on the Bible as units (pipelines/bible_tf/; about 2 hours a unit)"
	@echo "make reordering flexible's window against how much the data reorders: smoke runs at 4 levels (~18 min)"
	@echo "make bible  the bible profile's units, one model each at an equal budget (about an hour a unit; resumes)"
	@echo "make units      both: the first seed of every claim on each corpus before any second seed (resumes)"
	@echo "make params     recompose params.yaml and the profiles' pipelines/<profile>/ from dvc.yaml and conf/"
	@echo "make bench      run the benchmarks (after make repro and make char: they use their models)"
	@echo "make bench-scale  filter + tokenize at 1M and 4.5M generated pairs: wall time and peak memory (run alone)"
	@echo "make bench-pipeline  time dvc repro from scratch, per stage"
	@echo "make report     every DVC plot and figure in one HTML page that opens offline (dvc_plots/report.html)"
	@echo "make push       upload the pipeline's outputs (models, data) to the DVC remote (REMOTE=name: another one)"
	@echo "make pull       download them from the DVC remote: trained models without make repro (docs/sharing.md)"

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet $(TORCH_PIP_ARGS) "$(TORCH)"
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

venv: $(STAMP)

test: $(STAMP)  # PYTEST_ARGS: more pytest options, e.g. PYTEST_ARGS=--durations=25
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# one process: the slow tests share the smoke pipeline's copy (a session fixture), and the DDP
# test starts two processes of its own
test-slow: $(STAMP)
	$(BIN)/python -m pytest -m slow -n 0 $(PYTEST_ARGS)

test-all: test test-slow

# stages side by side where they are independent (flexatt repro: the results dvc repro gives)
repro: $(STAMP)
	$(BIN)/flexatt repro
	@cat results/table1.md
	@echo "Figures: results/figures/ (PNG); all plots: dvc plots show (dvc_plots/index.html)"
	@echo "W&B runs: wandb/ (offline; upload with: wandb sync wandb/offline-run-*)"

report: $(STAMP)
	$(BIN)/flexatt report

# the DVC remote (docs/sharing.md): the default one of .dvc/config, or REMOTE=name
push: $(STAMP)
	$(BIN)/dvc push $(if $(REMOTE),-r $(REMOTE),)

pull: $(STAMP)
	$(BIN)/dvc pull --allow-missing $(if $(REMOTE),-r $(REMOTE),)  # pending units' weights do not exist yet

params: $(STAMP)
	$(BIN)/flexatt params
	$(BIN)/flexatt pipeline smoke char paper bible_tf grc_tf

bench: $(STAMP)  # the figures of benchmarks/results/ (*.json; the printed tables in *.txt), as benchmarks/README.md quotes them
	$(BIN)/python benchmarks/train_throughput.py | tee $(RESULTS)/train_throughput.txt
	$(BIN)/python benchmarks/product_speed.py | tee $(RESULTS)/product_speed.txt
	$(BIN)/python benchmarks/decode_speed.py | tee $(RESULTS)/decode_speed.txt
	$(BIN)/python benchmarks/beam_speed.py --sentences 2000 --batch-size 150 --beams 1 5 --split \
		| tee $(RESULTS)/beam_speed.txt
	$(BIN)/python benchmarks/beam_speed.py --sentences 500 --beams 20 \
		--out $(RESULTS)/beam_speed_20.json | tee $(RESULTS)/beam_speed_20.txt
	$(BIN)/python benchmarks/beam_speed.py --level char --sentences 500 --beams 1 5 20 --split \
		--paths compiled --out $(RESULTS)/beam_speed_char.json | tee $(RESULTS)/beam_speed_char.txt
	bash benchmarks/setup_joeynmt.sh
	$(BIN)/python benchmarks/joeynmt_throughput.py | tee $(RESULTS)/joeynmt_throughput.txt
	$(BIN)/python benchmarks/joeynmt_decode.py | tee $(RESULTS)/joeynmt_decode.txt
	bash benchmarks/setup_opennmt.sh
	$(BIN)/python benchmarks/opennmt_decode.py | tee $(RESULTS)/opennmt_decode.txt
	$(BIN)/python benchmarks/train_epoch.py --baseline dbbd211 --rounds 2 --out $(RESULTS)/train_epoch.json \
		| tee $(RESULTS)/train_epoch.txt
	$(BIN)/python benchmarks/pipeline.py --noop-only

bench-scale: $(STAMP)  # filter + tokenize on generated corpora of 1M and 4.5M pairs: time and memory (hours; run alone)
	$(BIN)/python benchmarks/scale.py --sizes 1000000 4500000 --train-probe

bench-pipeline: $(STAMP)  # deletes the stage outputs and times dvc repro from scratch
	$(BIN)/python benchmarks/pipeline.py --from-scratch

# the smoke profile's pipeline (pipelines/smoke/), every stage; its results in results/smoke/ (git-ignored)
smoke: $(STAMP)
	$(BIN)/flexatt repro pipelines/smoke/dvc.yaml
	@cat results/smoke/table1.md

# the char profile's pipeline (pipelines/char/) up to Table 1, its results in results/char/; its models
# are what the benchmarks' character level measures; a second run resumes
char: $(STAMP)
	$(BIN)/flexatt repro pipelines/char/dvc.yaml:evaluate

# the Greek profile's pipeline (pipelines/grc/): its pending units (units.yaml), then its report;
# COMMIT=1 commits each finished unit (frozen) and the report the moment each is done
grc: $(STAMP)
	$(BIN)/flexatt repro $(if $(COMMIT),--commit,) pipelines/grc/dvc.yaml:report

# the Transformer on the Greek corpus (pipelines/grc_tf/, conf/units/grc_tf.yaml), as `make grc`
grc_tf: $(STAMP)
	$(BIN)/flexatt repro $(if $(COMMIT),--commit,) pipelines/grc_tf/dvc.yaml:report

# the Transformer on the Bible (pipelines/bible_tf/, conf/units/bible_tf.yaml), as `make bible`
bible_tf: $(STAMP)
	$(BIN)/flexatt repro $(if $(COMMIT),--commit,) pipelines/bible_tf/dvc.yaml:report

# the synthetic task at reordering levels 0, 0.25, 0.5, 1 (copies kept in artifacts/reordering/),
# with the real corpora whose results exist -> results/reordering/summary.json, the plot and figure
reordering: $(STAMP)
	$(BIN)/python scripts/reordering_sweep.py

# the Bible profile's pipeline (pipelines/bible/), as `make grc`; started again, it runs the units
# not yet done (one cut mid-training resumes from its last epoch on the same machine)
bible: $(STAMP)
	$(BIN)/flexatt repro $(if $(COMMIT),--commit,) pipelines/bible/dvc.yaml:report

# both long profiles: each claim's first seed on both corpora, then the other seeds, then the
# fine-tuning pairs (flexatt repro orders the units by their plan's stage)
units: $(STAMP)
	$(BIN)/flexatt repro $(if $(COMMIT),--commit,) pipelines/bible/dvc.yaml:report pipelines/grc/dvc.yaml:report

clean:
	rm -rf artifacts logs multirun outputs .pytest_cache
