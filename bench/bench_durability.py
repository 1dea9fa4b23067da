"""Benchmark what making a generation durable costs, against the alternatives, in one run.

    python bench/bench_durability.py [--runs 3] [--writer-gb 2]

Before `generation.json` makes a new generation count, apply puts its files on disk. Three
ways, each on a fresh hardlinked copy of a real CPU-torch generation (as uv builds one:
links into its cache), idle and while another process writes `--writer-gb` GB to the same
file system (a training job saving a checkpoint):
- envlock's `make_durable`: one syncfs() of the root's file system (it also waits for
  every other writer's pending data);
- only the generation's own files, as cheaply as Linux allows: the writeback of every file
  started at once, fdatasync of each, then each directory fsynced, deepest first (what
  issue 41 proposed, to be kept only if it measured faster under the writer: it does not);
- an fsync of each file and directory (the obvious baseline, and envlock's way on FUSE).
Results: bench/results/durability.json and a table on stdout.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from envlock.agent.core import fsync_path, make_durable  # noqa: E402 (syncfs where it can)
from tests.projects import torch_profile_text  # noqa: E402

RESULTS = REPO / "bench" / "results" / "durability.json"
CHUNK = 8 << 20


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


def by_fsync_each(tree: Path) -> None:
    """The obvious baseline: an fsync of each file and directory, 16 at a time."""
    paths = []
    for dirpath, _, names in os.walk(tree):
        paths += [dirpath, *(os.path.join(dirpath, n) for n in names)]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(fsync_path, paths, chunksize=64))


def by_own_data(tree: Path) -> None:
    """Only the tree's own files, as cheaply as Linux allows: every file's writeback
    started at once (sync_file_range), then fdatasync of each (no journal commit for a
    link count), then each directory fsynced, deepest first."""
    libc = ctypes.CDLL(None, use_errno=True)
    start = libc.sync_file_range
    start.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    dirs, fds = [], []
    for dirpath, _, names in os.walk(tree):
        dirs.append(dirpath)
        for name in names:
            try:
                fd = os.open(os.path.join(dirpath, name), os.O_RDONLY | os.O_NOFOLLOW)
            except OSError:  # a symlink
                continue
            start(fd, 0, 0, 2)  # SYNC_FILE_RANGE_WRITE
            fds.append(fd)
    for fd in fds:
        os.fdatasync(fd)
        os.close(fd)
    for dirpath in reversed(dirs):
        fsync_path(dirpath)


def by_envlock(tree: Path) -> None:
    assert make_durable(str(tree)) == "syncfs"


WAYS: dict[str, Callable[[Path], None]] = {
    "envlock": by_envlock,
    "own_data": by_own_data,
    "fsync_each": by_fsync_each,
}


class Writer:
    """Another process's big write in flight: `size` bytes into `path`, never fsynced (its
    pages pending, as a checkpoint's are while it is saved)."""

    def __init__(self, path: Path, size: int) -> None:
        self.path, self.size = path, size
        self.thread = threading.Thread(target=self.write, daemon=True)

    def write(self) -> None:
        block = os.urandom(CHUNK)
        with open(self.path, "wb") as handle:
            for _ in range(self.size // CHUNK):
                handle.write(block)

    def __enter__(self) -> Writer:
        self.thread.start()
        time.sleep(1.0)  # a second of pending pages before the sync starts
        return self

    def __exit__(self, *exc: object) -> None:
        self.thread.join()
        self.path.unlink()
        subprocess.run(["sync"], check=True)


def timed(way: Callable[[Path], None], tree: Path) -> float:
    started = time.perf_counter()
    way(tree)
    return time.perf_counter() - started


def measure(gen: Path, work: Path, runs: int, writer_bytes: int) -> dict[str, dict[str, float]]:
    samples: dict[str, dict[str, list[float]]] = {
        load: {name: [] for name in WAYS} for load in ("idle", "writer")
    }
    for _ in range(runs):
        for name, way in WAYS.items():
            copy = fresh_copy(gen, work / "copy")
            subprocess.run(["sync"], check=True)
            copy = fresh_copy(gen, work / "copy")
            samples["idle"][name].append(timed(way, copy))
            copy = fresh_copy(gen, work / "copy")
            with Writer(work / "checkpoint.bin", writer_bytes):
                samples["writer"][name].append(timed(way, copy))
    return {
        load: {name: statistics.median(values) for name, values in ways.items()}
        for load, ways in samples.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--writer-gb", type=float, default=2.0)
    parser.add_argument("--tree", help="an existing tree instead of a fresh torch generation")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="envlock-bench-durability-"))
    apply_s = None
    try:
        if args.tree:
            gen = Path(args.tree).resolve()
        else:
            profile = work / "bench.toml"
            profile.write_text(torch_profile_text("bench"))
            envlock("lock", profile)
            started = time.perf_counter()
            envlock("apply", "-y", profile)
            apply_s = time.perf_counter() - started
            gen = (work / "root" / "current").resolve()
        files = sum(len(names) for _, _, names in os.walk(gen))
        medians = measure(gen, work, args.runs, int(args.writer_gb * (1 << 30)))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report(args.runs, args.writer_gb, files, apply_s, medians)


def report(
    runs: int, writer_gb: float, files: int, apply_s: float | None, medians: dict[str, Any]
) -> None:
    results: dict[str, Any] = {
        "runs": runs,
        "files": files,
        "writer_gb": writer_gb,
        "apply_s": apply_s,
        **{f"{load}_{name}_s": s for load, ways in medians.items() for name, s in ways.items()},
    }
    writer = medians["writer"]
    results["writer_envlock_vs_own_data"] = writer["envlock"] / writer["own_data"]
    results["writer_envlock_vs_fsync_each"] = writer["envlock"] / writer["fsync_each"]
    idle = medians["idle"]
    results["idle_envlock_vs_fsync_each"] = idle["envlock"] / idle["fsync_each"]
    if apply_s:
        results["idle_envlock_share_of_apply"] = idle["envlock"] / apply_s
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nmaking a {files:,}-file generation durable (median of {runs})")
    print(f"{'':28} {'idle':>9} {f'{writer_gb:g} GB writer':>14}")
    for name, label in (
        ("envlock", "envlock: syncfs()"),
        ("own_data", "own files: fdatasync, dirs"),
        ("fsync_each", "fsync of each file and dir"),
    ):
        idle, busy = medians["idle"][name], writer[name]
        print(f"  {label:26} {idle * 1000:7.0f} ms {busy * 1000:11.0f} ms")
    print(
        f"  under the writer: envlock {results['writer_envlock_vs_own_data']:.2f}x own files, "
        f"{results['writer_envlock_vs_fsync_each']:.2f}x fsync of each file"
    )


if __name__ == "__main__":
    main()
