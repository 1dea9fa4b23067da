"""Benchmark what making a generation durable costs, against the alternative, in one run.

    python bench/bench_durability.py [--runs 5]

Before `generation.json` makes a new generation count, apply puts its files on disk: one
syncfs() of the root's file system (what envlock does), or an fsync of each file and
directory (what it does on FUSE, and the obvious baseline). Both are measured on a fresh
hardlinked copy of a real CPU-torch generation (as uv builds one: links into its cache),
beside the whole fresh apply. Results: bench/results/durability.json and a table on stdout.
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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from envlock.agent.core import fsync_path, syncfs  # noqa: E402
from tests.projects import torch_profile_text  # noqa: E402

RESULTS = REPO / "bench" / "results" / "durability.json"


def envlock(*args: str | Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "envlock", *map(str, args)],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def fresh_copy(gen: Path, dest: Path) -> Path:
    """A new tree of hardlinks to the generation's files, as uv's install makes: its
    directory entries and link counts are new, not yet on disk."""
    shutil.rmtree(dest, ignore_errors=True)
    subprocess.run(["cp", "-al", str(gen), str(dest)], check=True)
    return dest


def by_syncfs(tree: Path) -> float:
    started = time.perf_counter()
    assert syncfs(str(tree))
    return time.perf_counter() - started


def by_fsync_each(tree: Path) -> float:
    paths = []
    for dirpath, _, names in os.walk(tree):
        paths += [dirpath, *(os.path.join(dirpath, n) for n in names)]
    started = time.perf_counter()
    with ThreadPoolExecutor(16) as pool:  # as the agent does it on FUSE
        list(pool.map(fsync_path, paths, chunksize=64))
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    work = Path(tempfile.mkdtemp(prefix="envlock-bench-durability-"))
    try:
        profile = work / "bench.toml"
        profile.write_text(torch_profile_text("bench"))
        envlock("lock", profile)
        started = time.perf_counter()
        envlock("apply", "-y", profile)
        apply_s = time.perf_counter() - started
        gen = (work / "root" / "current").resolve()
        files = sum(len(names) for _, _, names in os.walk(gen))
        samples = {"syncfs": [], "fsync_each": []}
        for _ in range(runs):
            subprocess.run(["sync"], check=True)
            samples["syncfs"].append(by_syncfs(fresh_copy(gen, work / "copy")))
            subprocess.run(["sync"], check=True)
            samples["fsync_each"].append(by_fsync_each(fresh_copy(gen, work / "copy")))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results = {
        "runs": runs,
        "files": files,
        "apply_s": apply_s,
        "syncfs_s": statistics.median(samples["syncfs"]),
        "fsync_each_s": statistics.median(samples["fsync_each"]),
    }
    results["syncfs_share_of_apply"] = results["syncfs_s"] / apply_s
    results["fsync_each_vs_syncfs"] = results["fsync_each_s"] / results["syncfs_s"]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nmaking a {files:,}-file generation durable (median of {runs})")
    print(
        f"  syncfs() of the file system  : {results['syncfs_s'] * 1000:.0f} ms "
        f"({results['syncfs_share_of_apply']:.1%} of a fresh apply, {apply_s:.2f} s)"
    )
    print(
        f"  fsync of each file (baseline): {results['fsync_each_s']:.2f} s "
        f"({results['fsync_each_vs_syncfs']:.0f}x syncfs)"
    )


if __name__ == "__main__":
    main()
