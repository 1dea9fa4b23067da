"""Benchmark dataset fingerprints against the obvious baselines, in the same run.

    python bench/bench_data.py [--files 100000] [--runs 5]

The fast fingerprint (listing + a fixed sample) over many small files against
`find DIR -type f -printf '%s %T@ %p\\n'` (the stat floor; goal ≤ 1.5x), and `--deep`
(every byte, in parallel) over fewer large files against `sha256sum` of the same files
(goal ≥ 1x its throughput). The fingerprint runs in process, as the agent runs it.
Results: bench/results/data.json and a table on stdout.
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
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from envlock.agent.dataset import dataset_fingerprint  # noqa: E402

RESULTS = REPO / "bench" / "results" / "data.json"


def make_small_files(root: Path, count: int) -> None:
    per_dir = 1000
    for index in range(count):
        directory = root / f"shard{index // per_dir:04d}"
        if index % per_dir == 0:
            directory.mkdir(parents=True)
        (directory / f"{index:07d}.json").write_bytes(os.urandom(256))


def make_large_files(root: Path, count: int, size: int) -> None:
    root.mkdir(parents=True)
    block = os.urandom(1 << 20)
    for index in range(count):
        with open(root / f"part-{index:03d}.bin", "wb") as handle:
            for _ in range(size >> 20):
                handle.write(block)


def timed(work: object) -> float:
    assert callable(work)
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def run_quiet(argv: list[str], **kwargs: object) -> None:
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, **kwargs)  # type: ignore[call-overload]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="envlock-bench-data-"))
    try:
        small, large = work / "small", work / "large"
        make_small_files(small, args.files)
        make_large_files(large, 8, 64 << 20)
        large_files = sorted(str(p) for p in large.iterdir())
        large_bytes = sum(os.path.getsize(p) for p in large_files)
        # Warm the page cache: both sides then read memory, as on a box that trains daily.
        dataset_fingerprint(str(small))
        dataset_fingerprint(str(large), deep=True)
        find = ["find", str(small), "-type", "f", "-printf", "%s %T@ %p\\n"]
        sha = ["sha256sum", *large_files]
        results = {
            "files": args.files,
            "runs": args.runs,
            "fingerprint_s": statistics.median(
                timed(lambda: dataset_fingerprint(str(small))) for _ in range(args.runs)
            ),
            "find_s": statistics.median(timed(lambda: run_quiet(find)) for _ in range(args.runs)),
            "deep_bytes": large_bytes,
            "deep_s": statistics.median(
                timed(lambda: dataset_fingerprint(str(large), deep=True)) for _ in range(3)
            ),
            "sha256sum_s": statistics.median(timed(lambda: run_quiet(sha)) for _ in range(3)),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results["fingerprint_vs_find"] = results["fingerprint_s"] / results["find_s"]
    results["deep_mb_s"] = results["deep_bytes"] / results["deep_s"] / 1e6
    results["sha256sum_mb_s"] = results["deep_bytes"] / results["sha256sum_s"] / 1e6
    results["deep_vs_sha256sum_throughput"] = results["deep_mb_s"] / results["sha256sum_mb_s"]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\ndataset fingerprints (median of {args.runs}; page cache warm)")
    print(
        f"  fingerprint, {args.files:,} files : {results['fingerprint_s']:.3f} s vs find "
        f"{results['find_s']:.3f} s ({results['fingerprint_vs_find']:.2f}x; goal <= 1.5x)"
    )
    print(
        f"  --deep, {large_bytes / 1e6:.0f} MB        : {results['deep_mb_s']:.0f} MB/s vs "
        f"sha256sum {results['sha256sum_mb_s']:.0f} MB/s "
        f"({results['deep_vs_sha256sum_throughput']:.2f}x; goal >= 1x)"
    )


if __name__ == "__main__":
    main()
