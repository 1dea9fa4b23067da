"""Benchmark the local reconciler against raw uv, pip and sha256sum, in the same run.

    python bench/bench_reconcile.py [--runs 3]

On a CPU-torch environment (torch from this machine's find-links or the CPU index, plus
numpy) it measures, each as a median of fresh processes:
  * apply into a fresh root from a warm uv cache  vs  `uv venv && uv pip sync` of the lock
  * no-op apply, fast check, deep check           vs  `uv pip sync --dry-run` of the lock
  * rollback (CLI, and the switch alone)          vs  rebuilding the previous env with uv / pip
  * deep-check throughput                         vs  `sha256sum` over the same files
Results: bench/results/reconcile.json and a table on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
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

from envlock.lock import read_lock  # noqa: E402
from envlock.reconcile.context import gather_state, open_context  # noqa: E402
from envlock.reconcile.execute import execute  # noqa: E402
from envlock.reconcile.plan import plan_rollback  # noqa: E402
from envlock.uvbin import uv_path  # noqa: E402
from tests.projects import torch_profile_text  # noqa: E402

RESULTS = REPO / "bench" / "results" / "reconcile.json"
ENVLOCK = [sys.executable, "-m", "envlock"]


def timed(argv: list[str], **kwargs: Any) -> float:
    started = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kwargs)
    return time.perf_counter() - started


def median_of(runs: int, fn: Callable[[], float]) -> float:
    return statistics.median(fn() for _ in range(runs))


def write_profile(work: Path, packages: list[str]) -> Path:
    profile = work / "bench.toml"
    profile.write_text(torch_profile_text("bench", packages=tuple(packages)))
    return profile


def raw_uv_build(lock: Path, dest: Path) -> float:
    shutil.rmtree(dest, ignore_errors=True)
    started = time.perf_counter()
    subprocess.run([uv_path(), "venv", "-q", "--python", "3.11", str(dest)], check=True)
    subprocess.run(
        [uv_path(), "pip", "sync", "-q", str(lock), "--python", str(dest / "bin" / "python")],
        check=True,
    )
    return time.perf_counter() - started


def pip_build(lock: Path, dest: Path) -> float:
    """The pip way: a venv, then every locked wheel installed (pip's cache warm)."""
    urls = [w["url"] for p in read_lock(lock).packages.values() for w in p.wheels[:1]]
    shutil.rmtree(dest, ignore_errors=True)
    started = time.perf_counter()
    base_python = os.path.join(sys.base_prefix, "bin", "python3")
    subprocess.run([base_python, "-m", "venv", str(dest)], check=True)
    subprocess.run(
        [str(dest / "bin" / "pip"), "install", "-q", "--no-deps", *urls],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return time.perf_counter() - started


def tree_bytes(path: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(path):
        for name in files:
            full = os.path.join(dirpath, name)
            if not os.path.islink(full):
                total += os.lstat(full).st_size
    return total


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    runs = args.runs
    work = Path(tempfile.mkdtemp(prefix="envlock-bench-"))
    results: dict[str, Any] = {"runs": runs}
    try:
        profile = write_profile(work, ["numpy>=1.26"])
        subprocess.run([*ENVLOCK, "lock", str(profile)], check=True)
        lock = work / "pylock.bench.toml"
        raw_uv_build(lock, work / "warm")  # warm uv's cache: both sides start warm

        def fresh_apply() -> float:
            shutil.rmtree(work / "root", ignore_errors=True)
            (work / "venv").unlink(missing_ok=True)
            return timed([*ENVLOCK, "apply", "-y", str(profile)])

        results["apply_s"] = median_of(runs, fresh_apply)
        results["raw_uv_build_s"] = median_of(runs, lambda: raw_uv_build(lock, work / "raw"))
        gen = Path(os.path.realpath(work / "root" / "current"))

        results["noop_apply_s"] = median_of(
            runs + 2, lambda: timed([*ENVLOCK, "apply", "-y", str(profile)])
        )
        results["check_s"] = median_of(runs + 2, lambda: timed([*ENVLOCK, "check", str(profile)]))
        results["check_deep_s"] = median_of(
            runs, lambda: timed([*ENVLOCK, "check", "--deep", str(profile)])
        )
        results["uv_sync_dry_run_s"] = median_of(
            runs + 2,
            lambda: timed(
                [
                    uv_path(),
                    "pip",
                    "sync",
                    "--dry-run",
                    "-q",
                    str(lock),
                    "--python",
                    str(gen / "bin" / "python"),
                ]
            ),
        )
        ctx = open_context(profile)
        results["check_in_process_s"] = median_of(runs + 2, lambda: _in_process_check(ctx))
        results["python_startup_s"] = median_of(
            runs + 2, lambda: timed([sys.executable, "-c", "import envlock.commands.check"])
        )

        nbytes = tree_bytes(gen)
        results["env_bytes"] = nbytes
        results["sha256sum_s"] = median_of(
            runs,
            lambda: timed(
                [
                    "sh",
                    "-c",
                    'find "$1" -type f -print0 | xargs -0 sha256sum > /dev/null',
                    "sh",
                    str(gen),
                ]
            ),
        )

        # A second generation (numpy pinned differently) to roll back from.
        write_profile(work, ["numpy>=1.26", "six"])
        subprocess.run([*ENVLOCK, "lock", str(profile)], check=True)
        subprocess.run(
            [*ENVLOCK, "apply", "-y", str(profile)],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        results["rollback_s"] = median_of(
            runs + 2, lambda: timed([*ENVLOCK, "rollback", str(profile)])
        )
        ctx = open_context(profile, allow_stale=True)
        results["rollback_switch_s"] = median_of(runs + 2, lambda: _switch_only(ctx))
        results["pip_build_s"] = (
            pip_build(lock, work / "pip-warm"),
            pip_build(lock, work / "pip"),
        )[1]
    finally:
        shutil.rmtree(work, ignore_errors=True)

    mb = results["env_bytes"] / 1e6
    results["deep_mb_s"] = mb / results["check_deep_s"]
    results["sha256sum_mb_s"] = mb / results["sha256sum_s"]
    results["ratios"] = {
        "apply_vs_raw_uv": results["apply_s"] / results["raw_uv_build_s"],
        "check_vs_uv_dry_run": results["check_s"] / results["uv_sync_dry_run_s"],
        "deep_throughput_vs_sha256sum": results["deep_mb_s"] / results["sha256sum_mb_s"],
        "rollback_vs_uv_rebuild": results["rollback_s"] / results["raw_uv_build_s"],
        "rollback_vs_pip_rebuild": results["rollback_s"] / results["pip_build_s"],
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    report(results)


def _in_process_check(ctx: Any) -> float:
    from envlock.reconcile.context import check

    started = time.perf_counter()
    check(ctx)
    return time.perf_counter() - started


def _switch_only(ctx: Any) -> float:
    """The rollback itself: plan from state, then the agent swaps the symlink."""
    state = gather_state(ctx)
    plan = plan_rollback(state, None)
    started = time.perf_counter()
    execute(ctx, plan)
    return time.perf_counter() - started


def report(r: dict[str, Any]) -> None:
    q = r["ratios"]
    rows = [
        (
            "apply (fresh root, warm uv cache)",
            f"{r['apply_s']:.2f} s",
            f"raw uv venv+sync {r['raw_uv_build_s']:.2f} s",
            f"{q['apply_vs_raw_uv']:.2f}x",
        ),
        ("no-op apply (CLI)", f"{r['noop_apply_s']:.2f} s", "", ""),
        (
            "fast check (CLI)",
            f"{r['check_s']:.2f} s",
            f"uv pip sync --dry-run {r['uv_sync_dry_run_s']:.2f} s",
            f"{q['check_vs_uv_dry_run']:.2f}x",
        ),
        ("fast check (in process, no start-up)", f"{r['check_in_process_s']:.3f} s", "", ""),
        ("envlock CLI start-up (imports)", f"{r['python_startup_s']:.2f} s", "", ""),
        (
            "deep check (CLI)",
            f"{r['check_deep_s']:.2f} s",
            f"{r['deep_mb_s']:.0f} MB/s vs sha256sum {r['sha256sum_mb_s']:.0f} MB/s",
            f"{q['deep_throughput_vs_sha256sum']:.2f}x throughput",
        ),
        (
            "rollback (CLI)",
            f"{r['rollback_s']:.2f} s",
            f"uv rebuild {r['raw_uv_build_s']:.2f} s / pip {r['pip_build_s']:.1f} s",
            f"{q['rollback_vs_uv_rebuild']:.3f}x / {q['rollback_vs_pip_rebuild']:.4f}x",
        ),
        ("rollback switch itself", f"{r['rollback_switch_s'] * 1000:.0f} ms", "", ""),
    ]
    width = max(len(row[0]) for row in rows)
    print(
        f"\nenvlock reconciler benchmark ({r['env_bytes'] / 1e6:.0f} MB CPU-torch env, "
        f"median of {r['runs']}+ runs)"
    )
    for name, ours, baseline, ratio in rows:
        print(f"  {name:<{width}}  {ours:>9}  {baseline:<44} {ratio}")


if __name__ == "__main__":
    main()
