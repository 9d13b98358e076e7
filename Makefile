# envd — the two commands a newcomer needs:
#   make serve   start the daemon on this machine (installs Docker and builds the image if needed)
#   make test    run the whole test suite
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
IMAGE  ?= envd-sandbox:latest
LISTEN ?= 127.0.0.1:50051
DATA_DIR ?= /var/lib/envd
PYTEST_ARGS ?=

.PHONY: serve test deps docker image proto proto-check lint bench clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

deps: $(BIN)/.installed

docker:
	scripts/ensure-docker.sh

image: docker
	images/build.sh $(IMAGE)

serve: deps image
	$(BIN)/envd serve --listen $(LISTEN) --data-dir $(DATA_DIR) --image $(IMAGE)

test: deps image
	$(BIN)/python -m pytest $(PYTEST_ARGS)

proto: deps
	$(BIN)/python -m grpc_tools.protoc -I proto --python_out=. --pyi_out=. --grpc_python_out=. \
		proto/envd/v1/environment.proto

# The generated code is committed; this fails when it is stale.
proto-check: deps
	@tmp=$$(mktemp -d) && \
	$(BIN)/python -m grpc_tools.protoc -I proto --python_out=$$tmp --pyi_out=$$tmp \
		--grpc_python_out=$$tmp proto/envd/v1/environment.proto && \
	diff -r $$tmp/envd/v1 envd/v1 -x __pycache__ -x __init__.py && rm -rf $$tmp && echo "generated code is fresh"

lint: deps
	$(BIN)/ruff check envd engine tests bench
	$(BIN)/mypy envd engine

bench: deps image
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
