"""Benchmark `envlock bisect`: builds and wall time against the number of differences.

    python bench/bench_bisect.py [--sizes 8 32 128] [--repeat 3]

For each size n: n packages `p0…p(n-1)`, each moved 1.0 → 2.0 between GOOD and BAD (wheels
built here, resolved offline), one of them slow in 2.0 (its import sleeps 50 ms). The command
measures its own import time as `seconds`; bisect must name that package alone. Reported: the
builds bisect made against the bound 2⌈log2 n⌉ + 2, its probes and runs of the command, its
wall time, and as the baseline of the same run the time of rebuilding one environment by hand
(`uv venv` + `uv pip sync` of BAD's lock) and running the command once in it: what each
guess costs an engineer who bisects by hand. Results: bench/results/bisect.json and a table.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from envlock.base.uvbin import uv_path  # noqa: E402
from tests.projects import torch_profile_text  # noqa: E402
from tests.wheelhouse import build_wheel  # noqa: E402

RESULTS = REPO / "bench" / "results" / "bisect.json"
ENVLOCK = [sys.executable, "-m", "envlock"]
PROBE = "import importlib, json, sys, time\nt = time.perf_counter()\n" + (
    "for i in range(int(sys.argv[1])):\n    importlib.import_module(f'p{i}')\n"
    "print(json.dumps({'seconds': time.perf_counter() - t}))\n"
)


def envlock(*args: str | Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([*ENVLOCK, *map(str, args)], capture_output=True, text=True)
    if done.returncode not in (0, 1):
        raise SystemExit(f"envlock {args[:2]} failed:\n{done.stderr}")
    return done


def project(work: Path, n: int, slow: int) -> Path:
    wheels = work / "wheels"
    wheels.mkdir(parents=True)
    for i in range(n):
        build_wheel(wheels, f"p{i}", "1.0")
        body = "import time\ntime.sleep(0.05)\n" if i == slow else ""
        build_wheel(wheels, f"p{i}", "2.0", files={f"p{i}/__init__.py": body})
    profile = work / "bench.toml"

    def write(version: str) -> None:
        packages = tuple(f"p{i}=={version}" for i in range(n))
        text = torch_profile_text(
            "bench", torch=None, packages=packages, find_links=(str(wheels),), offline=True
        )
        profile.write_text(text)

    for side, version in (("good", "1.0"), ("bad", "2.0")):
        write(version)
        envlock("lock", profile)
        envlock("apply", "-y", profile)
        envlock("snapshot", profile, work / side)
    (work / "probe.py").write_text(PROBE)
    return profile


def by_hand(work: Path, n: int) -> float:
    """One guess by hand: a venv built from BAD's lock, the command run in it."""
    lock = work / "pylock.bench.toml"
    venv = work / "by-hand"
    started = time.perf_counter()
    subprocess.run([uv_path(), "venv", "-q", "--python", sys.executable, str(venv)], check=True)
    subprocess.run(
        [uv_path(), "pip", "sync", "-q", "--offline", "--python", str(venv / "bin" / "python"),
         str(lock)],
        check=True,
    )  # fmt: skip
    subprocess.run([str(venv / "bin" / "python"), str(work / "probe.py"), str(n)], check=True,
                   capture_output=True)  # fmt: skip
    return time.perf_counter() - started


def one(n: int, repeat: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="envlock-bench-bisect-") as tmp:
        work = Path(tmp)
        slow = (2 * n) // 3
        profile = project(work, n, slow)
        started = time.perf_counter()
        done = envlock(
            "bisect", "--json", profile, work / "good", work / "bad", "--metric", "seconds",
            "--repeat", str(repeat), "--", "python", work / "probe.py", str(n),
        )  # fmt: skip
        wall = time.perf_counter() - started
        data = json.loads(done.stdout)
        if data["cause"] != [f"packages:p{slow}"]:
            raise SystemExit(f"n={n}: bisect answered {data['status']} {data['cause']}")
        baseline = by_hand(work, n)
    runs = sum(len(p["values"]) for p in data["probes"])
    return {
        "differences": n,
        "builds": data["builds"],
        "bound": 2 * math.ceil(math.log2(n)) + 2,
        "probes": len(data["probes"]),
        "runs": runs,
        "seconds": round(wall, 2),
        "one_guess_by_hand_seconds": round(baseline, 2),
        "ratio_to_one_guess": round(wall / baseline, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[8, 32, 128])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rows = [one(n, args.repeat) for n in args.sizes]
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps({"repeat": args.repeat, "rows": rows}, indent=2) + "\n")
    print(f"{'moves':>6} {'builds':>6} {'bound':>5} {'probes':>6} {'runs':>5} {'wall s':>7} "
          f"{'1 guess by hand s':>17} {'ratio':>6}")  # fmt: skip
    for r in rows:
        print(
            f"{r['differences']:>6} {r['builds']:>6} {r['bound']:>5} {r['probes']:>6} "
            f"{r['runs']:>5} {r['seconds']:>7} {r['one_guess_by_hand_seconds']:>17} "
            f"{r['ratio_to_one_guess']:>6}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
