# Two commands for a fresh machine: `make demo` and `make test`. Each creates .venv and installs first.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
# Real data beside the repo doubles as the offline mirror for ir_datasets archives (cran.tar.gz ...).
SHARED_DATA := $(abspath ../shared/data)
ifeq ($(origin PIPELINE_MIRROR), undefined)
ifneq ($(wildcard $(SHARED_DATA)),)
export PIPELINE_MIRROR := $(SHARED_DATA)
endif
endif

.PHONY: install demo test bench clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch is pinned exactly (2.13.0) in pyproject.toml: a looser pin pulls GBs of CUDA wheels
	$(BIN)/pip install -q -e ".[cpu,test]"
	touch $@

install: $(BIN)/.installed

# BM25 alone, then BM25 + HCAN (2-fold cross-validation and 3 epochs keep the demo to a few minutes on
# 2 cores; `python -m pipeline.run --reranker hcan` alone runs the full 5-fold, 10-epoch protocol)
demo: install
	$(BIN)/python -m pipeline.run --dataset cranfield --reranker none
	PIPELINE_THREADS=1 $(BIN)/python -m pipeline.run --dataset cranfield --reranker hcan --folds 2 --set epochs=3

test: install
	$(BIN)/python -m pytest -q

bench: install
	$(BIN)/python benchmarks/first_stage.py --output benchmarks/results/first_stage.md
	$(BIN)/python benchmarks/reranker_speed.py --output benchmarks/results/reranker_speed.md

clean:
	rm -rf $(VENV) indexes/cache
