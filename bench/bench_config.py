"""Benchmark `envlock diff` of two checkpoints with a big config against torch.load.

    python bench/bench_config.py [--python TORCH_PYTHON] [--keys 300000] [--repeat 3]

Two torch.save files whose `config` dict has `--keys` keys and differs in one value (issue
#40: "a 300k-key config diffs in seconds with memory independent of its size"); envlock's
answer must name that value's key (`param_17`), read again from the folded config. Each
measurement is a fresh process (time includes interpreter start and imports; peak RSS is that
process's own): (a) `envlock diff --json A B`, (b) the obvious baseline, torch.load of both
(weights_only=True) and a compare of their config dicts naming the keys that differ, with
`import torch`. Also envlock at half and twice the keys, to show how memory grows with size.
Results go to bench/results/config.json.
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
from tests.checkpoint_factory import measure, run_torch  # noqa: E402

RESULTS = REPO / "bench" / "results" / "config.json"
GOAL_SECONDS = 10.0  # "in seconds"
GOAL_RSS_VS_TORCH = 1.0  # no more memory than loading both with torch

WRITE = """
import sys, torch
out, keys, changed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
config = {f"param_{i}": f"value-{i}-xxxxxxxxxx" for i in range(keys)}
if changed >= 0:
    config[f"param_{changed}"] = "changed"
torch.manual_seed(0)
torch.save({"model": torch.nn.Linear(4, 3).state_dict(), "config": config, "step": 1}, out)
"""
# What a user would run with torch: load both, compare the configs, name what differs.
TORCH_DIFF = """
import sys, torch
a, b = (torch.load(p, weights_only=True)["config"] for p in sys.argv[1:3])
print(sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k)))
"""


def main() -> None:
    args = _parse()
    work = Path(tempfile.mkdtemp(prefix="envlock-bench-config-"))
    try:
        python = Path(args.python) if args.python else torch_venv(work)
        files = {}
        for keys in (args.keys // 2, args.keys, args.keys * 2):
            for side, changed in (("a", -1), ("b", 17)):
                path = work / f"{side}{keys}.pt"
                run_torch(python, WRITE, str(path), str(keys), str(changed))
                files[(side, keys)] = str(path)
        pair = [files[("a", args.keys)], files[("b", args.keys)]]
        envlock = [sys.executable, "-m", "envlock", "diff", "--json"]
        results = {
            "envlock diff": _diff_runs([*envlock, *pair], args.repeat),
            "torch.load + dict compare": median_run(
                [str(python), "-c", TORCH_DIFF, *pair], args.repeat
            ),
        }
        sizes = {
            keys: _diff_runs([*envlock, files[("a", keys)], files[("b", keys)]], 1)
            for keys in (args.keys // 2, args.keys * 2)
        }
        sizes[args.keys] = results["envlock diff"]
        size = Path(pair[0]).stat().st_size
        file_sizes = {k: Path(files[("a", k)]).stat().st_size for k in sizes}
        torch_version = run_torch(python, "import torch; print(torch.__version__)").strip()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report = _report(results, sizes, size, file_sizes, args, torch_version)
    _print(report)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwrote {RESULTS.relative_to(REPO)}")


def _diff_runs(argv: list[str], repeat: int) -> dict[str, Any]:
    """median_run for `envlock diff`, whose answer here is exit 1 (the configs differ)."""
    runs = [measure(argv) for _ in range(repeat + 1)][1:]
    for run in runs:
        if run.returncode != 1:
            raise SystemExit(f"envlock diff failed ({run.returncode}):\n{run.stderr}")
        (group,) = json.loads(run.stdout)["groups"]
        if group["changes"][0].get("paths") != ["param_17"]:  # the answer, not only a time
            raise SystemExit(f"envlock diff did not name param_17: {group['changes'][0]}")
    seconds = sorted(r.seconds for r in runs)
    return {
        "seconds": seconds[len(seconds) // 2],
        "seconds_all": seconds,
        "peak_rss_mb": max(r.peak_rss_bytes for r in runs) / 1e6,
    }


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", help="a python with torch (default: build a CPU-torch venv)")
    parser.add_argument("--keys", type=int, default=300_000, help="keys of each config")
    parser.add_argument("--repeat", type=int, default=3, help="measured runs per tool")
    return parser.parse_args()


def _report(
    results: dict[str, dict[str, Any]],
    sizes: dict[int, dict[str, Any]],
    size: int,
    file_sizes: dict[int, int],
    args: argparse.Namespace,
    torch: str,
) -> dict[str, Any]:
    ours = results["envlock diff"]
    for r in results.values():
        r["time_vs_envlock"] = r["seconds"] / ours["seconds"]
        r["rss_vs_envlock"] = r["peak_rss_mb"] / ours["peak_rss_mb"]
    baseline = results["torch.load + dict compare"]
    rss_vs_torch = ours["peak_rss_mb"] / baseline["peak_rss_mb"]
    return {
        "keys": args.keys,
        "file_bytes": size,
        "repeat": args.repeat,
        "python": platform.python_version(),
        "torch": torch,
        "machine": f"{platform.machine()} {platform.system()}",
        "results": results,
        "by_keys": {
            str(k): {
                "seconds": v["seconds"],
                "peak_rss_mb": v["peak_rss_mb"],
                "pickle_mb": file_sizes[k] / 1e6,
            }
            for k, v in sorted(sizes.items())
        },
        "rss_vs_torch": rss_vs_torch,
        "goals": {
            "seconds_max": GOAL_SECONDS,
            "rss_vs_torch_max": GOAL_RSS_VS_TORCH,
            "met": ours["seconds"] <= GOAL_SECONDS and rss_vs_torch <= GOAL_RSS_VS_TORCH,
        },
    }


def _print(report: dict[str, Any]) -> None:
    mb = report["file_bytes"] / 1e6
    print(f"two {mb:.1f} MB files, {report['keys']:,} config keys each; torch {report['torch']}")
    print(f"{'tool':<28}{'seconds':>10}{'peak RSS MB':>14}{'time ×':>10}{'RSS ×':>10}")
    for name, r in report["results"].items():
        print(
            f"{name:<28}{r['seconds']:>10.2f}{r['peak_rss_mb']:>14.1f}"
            f"{r['time_vs_envlock']:>10.2f}{r['rss_vs_envlock']:>10.2f}"
        )
    print("envlock diff by size: " + ", ".join(
        f"{int(k):,} keys ({v['pickle_mb']:.0f} MB pickle) {v['seconds']:.1f} s "
        f"{v['peak_rss_mb']:.0f} MB"
        for k, v in report["by_keys"].items()
    ))  # fmt: skip
    goals = report["goals"]
    print(
        f"goals: <= {goals['seconds_max']:.0f} s, peak RSS <= torch's "
        f"(got {report['rss_vs_torch']:.2f}x): " + ("met" if goals["met"] else "NOT met")
    )


if __name__ == "__main__":
    main()
