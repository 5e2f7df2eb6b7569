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
	@echo "installing into $(VENV): torch (CPU), pyserini, faiss, transformers ... a few minutes"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch is pinned exactly (2.13.0) in pyproject.toml: a looser pin pulls GBs of CUDA wheels
	$(BIN)/pip install --progress-bar off -e ".[cpu,test,pyterrier]"
	touch $@

install: $(BIN)/.installed

# The headline command, exactly: TREC Microblog 2014 (HCAN's own data), HCAN trained on 2011-2013 with a
# CPU budget, combined with QL by a weight tuned on dev queries; prints QL, HCAN alone and HCAN + QL
demo: install
	$(BIN)/python -m pipeline.run --reranker hcan

# Two pytest-xdist workers, a test file per turn (its module fixtures built once): CI's 2 cores, ~1.6x
# faster than one process; TEST_WORKERS=0 runs in this process (pdb, -x), TEST_WORKERS=4 on a larger machine
TEST_WORKERS ?= 2
test: install
	$(BIN)/python -m pytest -q --durations=30 $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)

bench: install
	$(BIN)/python benchmarks/first_stage.py --output benchmarks/results/first-stage/bm25-rm3.md
	$(BIN)/python benchmarks/reranker_speed.py --output benchmarks/results/speed/reranker.md

clean:
	rm -rf $(VENV) indexes/cache
