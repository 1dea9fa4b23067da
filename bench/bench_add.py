"""Benchmark `envlock add --dry-run` against `uv pip install --dry-run`, in the same run.

    python bench/bench_add.py [--runs 5]

On an applied environment resolved offline from the PyPI-mirroring test wheelhouse (torch
2.11.0 with its CUDA 13.0 libraries, numpy: 29 packages), each a median of fresh processes:
  * adding one small package (tqdm, no dependencies): envlock resolves the whole profile
    with the torch pin, compares the locks and looks up tqdm's newest release; uv resolves
    tqdm against the installed environment
  * adding the polluter sglang: envlock also resolves it without the pin to say why it
    chose 0.5.2; uv picks sglang 0.5.23 and torch 2.14.1 (what a plain install does)
Both sides start from a warm uv cache. Results: bench/results/add.json and a table on stdout.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from envlock.base.uvbin import uv_path  # noqa: E402
from tests.projects import torch_profile_text  # noqa: E402
from tests.wheelhouse import build_pypi_wheelhouse  # noqa: E402

RESULTS = REPO / "bench" / "results" / "add.json"
ENVLOCK = [sys.executable, "-m", "envlock"]


def timed(argv: list[str], *, expect: int = 0) -> float:
    """Seconds one fresh process takes; its exit status must be `expect` (a dry run that
    finds a change exits 1)."""
    started = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if proc.returncode != expect:
        raise SystemExit(f"{argv} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}")
    return elapsed


def median_of(runs: int, fn: Callable[[], float]) -> float:
    return statistics.median(fn() for _ in range(runs))


def setup(work: Path) -> tuple[Path, Path]:
    wheels = build_pypi_wheelhouse(work / "wheels")
    profile = work / "ml.toml"
    profile.write_text(
        torch_profile_text(
            "ml",
            torch="2.11.0",
            backend="pypi",
            packages=("numpy",),
            find_links=(str(wheels),),
            offline=True,
        )
    )
    for step in (["lock"], ["apply", "-y"]):
        subprocess.run([*ENVLOCK, *step, str(profile)], check=True, capture_output=True)
    return profile, wheels


def uv_install_dry_run(work: Path, wheels: Path, requirement: str) -> list[str]:
    return [
        uv_path(),
        "pip",
        "install",
        "--dry-run",
        "--quiet",
        "--offline",
        "--no-index",
        "--find-links",
        str(wheels),
        "--python",
        str(work / "venv" / "bin" / "python"),
        requirement,
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    runs = args.runs
    work = Path(tempfile.mkdtemp(prefix="envlock-bench-add-"))
    results: dict[str, Any] = {"runs": runs}
    try:
        profile, wheels = setup(work)
        for requirement in ("tqdm", "sglang"):
            envlock_argv = [*ENVLOCK, "add", "--dry-run", str(profile), requirement]
            uv_argv = uv_install_dry_run(work, wheels, requirement)
            timed(envlock_argv, expect=1)  # warm: both sides then start from a warm cache
            timed(uv_argv)
            results[f"envlock_add_dry_run_{requirement}_s"] = median_of(
                runs, lambda a=envlock_argv: timed(a, expect=1)
            )
            results[f"uv_install_dry_run_{requirement}_s"] = median_of(
                runs, lambda a=uv_argv: timed(a)
            )
        results["python_startup_s"] = median_of(
            runs, lambda: timed([sys.executable, "-c", "import envlock.commands.add"])
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results["ratios"] = {
        f"add_{r}_vs_uv_install": results[f"envlock_add_dry_run_{r}_s"]
        / results[f"uv_install_dry_run_{r}_s"]
        for r in ("tqdm", "sglang")
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    report(results)


def report(results: dict[str, Any]) -> None:
    print(f"median of {results['runs']} fresh processes")
    for requirement in ("tqdm", "sglang"):
        ours = results[f"envlock_add_dry_run_{requirement}_s"]
        uv = results[f"uv_install_dry_run_{requirement}_s"]
        ratio = results["ratios"][f"add_{requirement}_vs_uv_install"]
        print(
            f"  add {requirement:7} envlock add --dry-run {ours * 1000:7.0f} ms   "
            f"uv pip install --dry-run {uv * 1000:6.0f} ms   ratio {ratio:.1f}x"
        )
    startup = results["python_startup_s"] * 1000
    print(f"  python start-up importing envlock.commands.add: {startup:.0f} ms")


if __name__ == "__main__":
    main()
