"""What the checkpoint benchmarks share: a CPU-torch venv to write checkpoints with, and the
timing loop (fresh processes, the first a warm-up, the median of the rest)."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.checkpoint_factory import measure  # noqa: E402
from tests.support import make_torch_venv  # noqa: E402


def torch_venv(work: Path) -> Path:
    print("building a CPU-torch venv (tests.support.make_torch_venv)…", file=sys.stderr)
    return make_torch_venv(work / "venv", compile_bytecode=True)


def median_run(argv: list[str], repeat: int, *, shown: int = 3) -> dict[str, Any]:
    """`argv` run `repeat` + 1 times as a fresh process each: seconds (median and all) and
    the peak RSS of the measured runs. A failure ends the benchmark, naming argv[:shown]."""
    runs = [measure(argv) for _ in range(repeat + 1)][1:]  # the first run warms caches
    for run in runs:
        if run.returncode != 0:
            raise SystemExit(f"{argv[:shown]} failed ({run.returncode}):\n{run.stderr}")
    seconds = [r.seconds for r in runs]
    return {
        "seconds": statistics.median(seconds),
        "seconds_all": seconds,
        "peak_rss_mb": max(r.peak_rss_bytes for r in runs) / 1e6,
    }
