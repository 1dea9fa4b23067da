# envlock — set-up, tests, lint and the demo. Needs only python3 (3.10+) and the registries.
PYTHON ?= python3
UV := $(PYTHON) -m uv

.PHONY: mutate-report help setup demo test test-fast lint bench mutate system-deps clean

help:
	@echo "make demo   lock, apply, check and run the local CPU-torch profile"
	@echo "make test   install what the tests need and run the whole suite"
	@echo "make test-fast  the pure and unit tests (tests/unit), under a minute"
	@echo "make lint   ruff and mypy"
	@echo "make bench  run the benchmarks in bench/ and print ratios"
	@echo "make mutate mutation testing of the pure core and security helpers (not in test)"
	@echo "make docs   build the documentation site into site/ (strict; make docs-serve serves it)"

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

# The documentation site (mkdocs.yml; docs/gen_reference.py writes the Reference pages from the
# code first). Strict: a broken link, a missing page or an unknown anchor fails. Offline: no
# theme fonts or plugins fetch anything. `make test` builds it too (tests/cli/test_docs.py).
.PHONY: docs docs-serve
export NO_MKDOCS_2_WARNING := 1
docs: setup
	.venv/bin/mkdocs build --strict

docs-serve: setup
	.venv/bin/mkdocs serve

system-deps:
	bash tests/setup/system-deps.sh lxc debootstrap openssh-server docker.io strace

test: setup system-deps
	.venv/bin/python -m pytest

# The pure and unit tests: no LXC, sshd, LazyFS, Docker or system packages. Other slices by marker,
# e.g. `.venv/bin/python -m pytest -m "not lxc and not sshd and not lazyfs and not docker"`.
test-fast: setup
	.venv/bin/python -m pytest -q tests/unit

lint: setup
	.venv/bin/ruff check envlock tests bench
	.venv/bin/ruff format --check envlock tests bench
	.venv/bin/mypy

bench: setup
	.venv/bin/python bench/run_all.py

# Mutation testing ([tool.mutmut] in pyproject.toml: which files, which fast tests). Not part
# of `make test`. mutants/ is rebuilt from the working tree each time, so a run never tests a
# stale copy; the survivors and a per-module table (killed of ALL mutants, "no tests"
# included) are printed at the end. On a shared machine: MUTATE_JOBS=1 MUTATE_NICE=19; a
# subset of modules at a time with MUTANTS='envlock.lock.read.* envlock.agent.apply.*'.
mutate: setup
	rm -rf mutants
	nice -n $${MUTATE_NICE:-10} .venv/bin/mutmut run --max-children $${MUTATE_JOBS:-2} $(MUTANTS)
	@$(MAKE) --no-print-directory mutate-report

# The table of the last run (mutants/ as `make mutate` left it). A mutant's name is
# `module.x_function__mutmut_N` (`module.xǁClassǁmethod__mutmut_N` for a method); modules a
# subset run (MUTANTS) did not check are left out of the table and the totals.
mutate-report:
	@.venv/bin/mutmut results --all true | grep -v -e ': killed$$' -e ': no tests$$' -e ': not checked$$' || true
	@.venv/bin/mutmut results --all true | awk -F': ' ' \
		{ m = $$1; sub(/^ +/, "", m); sub(/\.x(_|ǁ).*/, "", m); n[m, $$2]++; a[m]++ } \
		END { printf "%-30s %7s %8s %8s %6s %6s %8s\n", "module", "killed", "survived", "no tests", "other", "all", "killed%"; \
		  for (m in a) { if (a[m] == n[m, "not checked"]) continue; \
		    k = n[m, "killed"]; v = n[m, "survived"]; z = n[m, "no tests"]; o = a[m] - k - v - z; \
		    K += k; Z += z; T += a[m]; \
		    printf "%-30s %7d %8d %8d %6d %6d %7.1f%%\n", m, k, v, z, o, a[m], 100 * k / a[m] | "sort" } \
		  close("sort"); \
		  if (T == 0) exit; \
		  printf "all: %d of %d mutants killed (%.1f%%); no tests %d (%.1f%%); of those the fast tests reach %d of %d (%.1f%%)\n", \
		    K, T, 100 * K / T, Z, 100 * Z / T, K, T - Z, 100 * K / (T - Z) }'

clean:
	rm -rf .envlock .venv .pytest_cache .mypy_cache .ruff_cache mutants
