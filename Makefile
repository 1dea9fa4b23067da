# envlock — set-up, tests, lint and the demo. Needs only python3 (3.10+) and the registries.
PYTHON ?= python3
UV := $(PYTHON) -m uv

.PHONY: help setup demo test lint bench system-deps clean

help:
	@echo "make demo   lock, apply, check and run the local CPU-torch profile"
	@echo "make test   install what the tests need and run the whole suite"
	@echo "make lint   ruff and mypy"
	@echo "make bench  run the benchmarks in bench/ and print ratios"

# uv comes from its PyPI wheel; envlock's own environment is a uv project (.venv).
setup:
	@$(UV) --version >/dev/null 2>&1 || $(PYTHON) -m pip install --quiet "uv>=0.13,<0.14"
	$(UV) sync --quiet --compile-bytecode
	@# envlock itself is installed editable: compile it too, so that start-up reads bytecode
	@# even where PYTHONDONTWRITEBYTECODE is set.
	.venv/bin/python -m compileall -q envlock

demo: setup
	.venv/bin/envlock lock profiles/local-cpu.toml
	.venv/bin/envlock apply -y profiles/local-cpu.toml
	.venv/bin/envlock check profiles/local-cpu.toml
	.venv/bin/envlock run profiles/local-cpu.toml -- python -c "import torch; print('torch', torch.__version__, 'sum =', torch.ones(3).sum().item())"

system-deps:
	bash tests/setup/system-deps.sh lxc debootstrap openssh-server

test: setup system-deps
	.venv/bin/python -m pytest

lint: setup
	.venv/bin/ruff check envlock tests bench
	.venv/bin/ruff format --check envlock tests bench
	.venv/bin/mypy

bench: setup
	.venv/bin/python bench/run_all.py

clean:
	rm -rf .envlock .venv .pytest_cache .mypy_cache .ruff_cache
