"""Benchmark `envlock inspect` against torch.load on the same >= 1 GB checkpoint.

    python bench/bench_inspect.py [--python TORCH_PYTHON] [--gib 1] [--layers 64] [--repeat 3]

Each measurement is a fresh process (time includes interpreter start and imports; peak RSS is
that process's own, from os.wait4): (a) envlock inspect, (b) torch.load(weights_only=True,
mmap=True) including `import torch`, (c) a full torch.load. Runs are warm-cache: each tool runs
once before the measured repeats. Results go to bench/results/inspect.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.timing import median_run, torch_venv  # noqa: E402
from tests.checkpoint_factory import inspect_argv, make_big, run_torch  # noqa: E402

RESULTS = REPO / "bench" / "results" / "inspect.json"
GOAL_SPEEDUP_VS_MMAP = 10.0
GOAL_PEAK_MB = 50.0

# What a user would run to see keys and shapes with torch: load, then walk every tensor.
TORCH_SCRIPT = """
import sys, torch
sd = torch.load(sys.argv[1], weights_only=True, mmap=sys.argv[2] == "mmap")
print(sum(t.numel() for t in sd["model"].values()))
"""


def main() -> None:
    args = _parse()
    work = Path(tempfile.mkdtemp(prefix="envlock-bench-inspect-"))
    try:
        python = Path(args.python) if args.python else torch_venv(work)
        ckpt = work / "big.pt"
        size = make_big(python, ckpt, gib=args.gib, layers=args.layers)
        cases = {
            "envlock inspect": inspect_argv(str(ckpt), "--json"),
            "torch.load mmap": [str(python), "-c", TORCH_SCRIPT, str(ckpt), "mmap"],
            "torch.load full": [str(python), "-c", TORCH_SCRIPT, str(ckpt), "full"],
        }
        results = {name: median_run(argv, args.repeat) for name, argv in cases.items()}
        torch_version = run_torch(python, "import torch; print(torch.__version__)").strip()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report = _report(results, size, args, torch_version)
    _print(report)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwrote {RESULTS.relative_to(REPO)}")


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", help="a python with torch (default: build a CPU-torch venv)")
    parser.add_argument("--gib", type=float, default=1.0, help="checkpoint size in GiB")
    parser.add_argument("--layers", type=int, default=64, help="tensors to spread it over")
    parser.add_argument("--repeat", type=int, default=3, help="measured runs per tool")
    return parser.parse_args()


def _report(
    results: dict[str, dict[str, Any]], size: int, args: argparse.Namespace, torch: str
) -> dict[str, Any]:
    ours = results["envlock inspect"]
    for r in results.values():
        r["time_vs_envlock"] = r["seconds"] / ours["seconds"]
        r["rss_vs_envlock"] = r["peak_rss_mb"] / ours["peak_rss_mb"]
    speedup = results["torch.load mmap"]["time_vs_envlock"]
    return {
        "checkpoint_bytes": size,
        "tensors": args.layers or 1,
        "repeat": args.repeat,
        "python": platform.python_version(),
        "torch": torch,
        "machine": f"{platform.machine()} {platform.system()}",
        "results": results,
        "goals": {
            "speedup_vs_mmap_min": GOAL_SPEEDUP_VS_MMAP,
            "speedup_vs_mmap": speedup,
            "peak_rss_mb_max": GOAL_PEAK_MB,
            "met": speedup >= GOAL_SPEEDUP_VS_MMAP and ours["peak_rss_mb"] <= GOAL_PEAK_MB,
        },
    }


def _print(report: dict[str, Any]) -> None:
    gb = report["checkpoint_bytes"] / 1e9
    print(f"checkpoint: {gb:.2f} GB, {report['tensors']} tensors; torch {report['torch']}")
    print(f"{'tool':<18}{'seconds':>10}{'peak RSS MB':>14}{'time ×':>10}{'RSS ×':>10}")
    for name, r in report["results"].items():
        print(
            f"{name:<18}{r['seconds']:>10.3f}{r['peak_rss_mb']:>14.1f}"
            f"{r['time_vs_envlock']:>10.1f}{r['rss_vs_envlock']:>10.1f}"
        )
    goals = report["goals"]
    print(
        f"goals: >= {goals['speedup_vs_mmap_min']:.0f}x faster than mmap load "
        f"(got {goals['speedup_vs_mmap']:.1f}x), <= {goals['peak_rss_mb_max']:.0f} MB peak: "
        + ("met" if goals["met"] else "NOT met")
    )


if __name__ == "__main__":
    main()
