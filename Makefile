# klue_tc: `make help` lists the targets.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# torch first, pinned: the CPU build on this machine's disk; a looser range pulls a multi-GB CUDA build.
TORCH  ?= torch==2.13.0
# the wheel index for torch alone, e.g. https://download.pytorch.org/whl/cu124 for a CUDA build
TORCH_INDEX ?=
# the sweep files: sweeps/<name>.yaml; `make sweep` asks for one by name (paper is 600 full-size jobs);
# sweeps/_*.yaml are what sweep files share, not sweeps
SWEEPS := $(sort $(basename $(notdir $(filter-out sweeps/_%,$(wildcard sweeps/*.yaml)))))
SWEEP  ?=
ARGS   ?=
DIR    ?=
STORE  ?=
# tokenizers and encoded titles (data.cache_dir's default): make clean removes it
CACHE  := $(or $(KLUE_TC_CACHE),$(HOME)/.cache/klue_tc)

.PHONY: help install lint test test-unit test-all test-slurm sweep sweep-named report ensemble prune bench bench-gpu clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'
	@echo "  variables: SWEEP=$(subst $(eval) ,|,$(SWEEPS))  ARGS=\"hydra overrides\"  DIR=run or sweep dir  STORE=results store  TORCH=torch==2.13.0  TORCH_INDEX=wheel index URL"

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(PY) -m pip install -q -e '.[dev,optuna]'
	touch $@

install: $(VENV)/.installed  ## create .venv and install klue_tc with its dev and optuna extras

lint: install  ## ruff (lint and format check over the whole tree); lint-imports: the rooms import downward
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports

test: install  ## the unit and integration tests (no network, CPU): all but the slow ones
	$(PY) -m pytest

test-unit: install  ## the unit tier: no job, training, process or report/ensemble stage; under 3 minutes on 2 cores
	$(PY) -m pytest -m "not integration and not slow"

test-all: install  ## every test, the slow ones too
	$(PY) -m pytest -m "slow or not slow"

test-slurm: install  ## start a one-node SLURM here (scripts/slurm-local.sh, root) and run the smoke sweep on it
	$(if $(filter 0,$(shell id -u)),,sudo) bash scripts/slurm-local.sh
	$(PY) -m pytest -m slurm -rs -s tests/test_slurm.py

sweep: sweep-named install  ## run sweeps/$(SWEEP).yaml, SWEEP named (resumes: finished jobs are skipped)
	$(PY) -m klue_tc --multirun --config-dir sweeps --config-name $(SWEEP) $(ARGS)

sweep-named:
	@test -n "$(SWEEP)" || { echo "make sweep needs SWEEP=<name>, one of: $(SWEEPS) (sweeps/*.yaml; smoke: 8 tiny jobs, paper: 600 full-size ones)"; exit 2; }
	@test -n "$(filter $(SWEEP),$(SWEEPS))" || { echo "no sweep $(SWEEP): SWEEP is one of $(SWEEPS)"; exit 2; }

report: install  ## F1 comparison table for DIR (a run or sweep directory)
	@test -n "$(DIR)" || { echo "usage: make report DIR=outputs/sweeps/paper"; exit 2; }
	$(PY) -m klue_tc.report $(DIR) $(ARGS)

ensemble: install  ## the ensemble of DIR's records with the linear baselines: ensemble.md, ensemble.csv, DIR/ensemble-model
	@test -n "$(DIR)" || { echo "usage: make ensemble DIR=docs/ensemble (after make sweep SWEEP=ensemble)"; exit 2; }
	$(PY) -m klue_tc.ensemble $(DIR) $(ARGS)

prune: install  ## remove STORE's checkpoints of configurations in no sweep's grid (records stay); ARGS="--dry-run --wandb-older-than 30"
	@test -n "$(STORE)" || { echo "usage: make prune STORE=outputs/sweeps/paper/results [ARGS=\"--dry-run --wandb-older-than 30\"]"; exit 2; }
	$(PY) -m klue_tc.prune $(STORE) $(ARGS)

bench: install  ## training throughput and F1 against the notebook's design, pretraining beside fine-tuning, GFLOP/s, an ensemble served against one model (CPU; ARGS="--runs ensemble": that alone)
	$(PY) -m benchmarks $(ARGS)

bench-gpu: install  ## on a GPU, three phases of <= 4 min: titles/s per encoder, 2/4/8 jobs at once, the paper sweep's wall time
	$(PY) -m benchmarks --gpu $(ARGS)

CLEANED := outputs multirun wandb .pytest_cache .import_linter_cache "$(CACHE)"

clean:  ## remove outputs, W&B offline runs, .pytest_cache and the cache ~/.cache/klue_tc ($KLUE_TC_CACHE), not the venv
	@du -skc $(CLEANED) 2>/dev/null | tail -n 1 | awk '{printf "make clean: frees %.1f MB (outputs, W&B runs, caches)\n", $$1 / 1024}'
	rm -rf $(CLEANED)
