# envlock — set-up, tests, lint and the demo. Needs only python3 (3.10+) and the registries.
PYTHON ?= python3
UV := $(PYTHON) -m uv

.PHONY: help setup demo test lint bench mutate system-deps clean

help:
	@echo "make demo   lock, apply, check and run the local CPU-torch profile"
	@echo "make test   install what the tests need and run the whole suite"
	@echo "make lint   ruff and mypy"
	@echo "make bench  run the benchmarks in bench/ and print ratios"
	@echo "make mutate mutation testing of the pure core and security helpers (not in test)"

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

# Mutation testing ([tool.mutmut] in pyproject.toml: which files, which fast tests). Not part
# of `make test`. mutants/ is rebuilt from the working tree each time, so a run never tests a
# stale copy; the score and the survivors are printed at the end.
mutate: setup
	rm -rf mutants
	nice -n 10 .venv/bin/mutmut run --max-children $${MUTATE_JOBS:-2}
	@.venv/bin/mutmut results --all true | grep -v -e ': killed$$' -e ': no tests$$' || true
	@.venv/bin/mutmut results --all true | awk -F': ' '{n[$$2]++; t++} END { \
		for (s in n) printf "%s: %d\n", s, n[s]; \
		r = t - n["no tests"]; \
		printf "mutation score: %d of %d mutants that the fast tests reach killed (%.1f%%)\n", n["killed"], r, 100 * n["killed"] / r; \
		printf "all mutants, I/O functions no fast test runs included: %d of %d (%.1f%%)\n", n["killed"], t, 100 * n["killed"] / t }'

clean:
	rm -rf .envlock .venv .pytest_cache .mypy_cache .ruff_cache mutants
