"""Benchmark `envlock diff --weights` against `sha256sum` of the same files, in the same run.

    python bench/bench_weights.py [--python TORCH_PYTHON] [--mib 200] [--layers 16] [--repeat 3]

Two torch.save checkpoints of `--mib` MiB of float32 each (the second a copy: equal, so the
diff reads every tensor of both), each measured as a fresh process, warm page cache (each
tool runs once before the measured repeats): (a) `envlock diff --weights A B`, (b)
`sha256sum A B`. Both read every byte of both files; the ratio is what a per-tensor digest
through envlock's gate and budget costs over hashing the files whole. Results go to
bench/results/weights.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.timing import median_run, torch_venv  # noqa: E402
from tests.checkpoint_factory import make_big  # noqa: E402

RESULTS = REPO / "bench" / "results" / "weights.json"
GOAL_RATIO = 1.5  # envlock diff --weights / sha256sum of the same files


def main() -> None:
    args = _parse()
    work = Path(tempfile.mkdtemp(prefix="envlock-bench-weights-"))
    try:
        python = Path(args.python) if args.python else torch_venv(work)
        a, b = work / "a.pt", work / "b.pt"
        size = make_big(python, a, gib=args.mib / 1024, layers=args.layers)
        shutil.copyfile(a, b)
        diff = [sys.executable, "-m", "envlock", "diff", "--weights", "--json", str(a), str(b)]
        cases = {"envlock diff --weights": diff, "sha256sum": ["sha256sum", str(a), str(b)]}
        results = {name: median_run(argv, args.repeat, shown=5) for name, argv in cases.items()}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ratio = results["envlock diff --weights"]["seconds"] / results["sha256sum"]["seconds"]
    report = {
        "checkpoint_bytes": size,
        "files": 2,
        "tensors": args.layers + 1,
        "repeat": args.repeat,
        "python": platform.python_version(),
        "machine": f"{platform.machine()} {platform.system()}",
        "results": results,
        "weights_vs_sha256sum": ratio,
        "goal_ratio_max": GOAL_RATIO,
        "met": ratio <= GOAL_RATIO,
    }
    for name, r in results.items():
        print(f"{name:<24}{r['seconds']:>8.3f} s{r['peak_rss_mb']:>9.1f} MB peak RSS")
    print(f"ratio: {ratio:.2f}× sha256sum (goal ≤ {GOAL_RATIO}×)")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {RESULTS.relative_to(REPO)}")


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", help="a python with torch (default: build a CPU-torch venv)")
    parser.add_argument("--mib", type=float, default=200.0, help="each checkpoint's size")
    parser.add_argument("--layers", type=int, default=16, help="tensors to spread it over")
    parser.add_argument("--repeat", type=int, default=3, help="measured runs per tool")
    return parser.parse_args()


if __name__ == "__main__":
    main()
