"""Benchmark writing a snapshot next to a checkpoint, on an environment with CPU torch.

    python bench/bench_snapshot.py [--runs 5]

Measures `envlock.snapshot(dir, profile=…, config=…)` from Python (what a training script
calls at every checkpoint save; goal ≤ 0.2 s, no torch import) and the `envlock snapshot`
CLI, against the obvious baselines: `pip freeze` (uv's, the fast one) and importing torch to
read its version. Results: bench/results/snapshot.json and a table on stdout.
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
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import envlock  # noqa: E402
from envlock.base.uvbin import uv_path  # noqa: E402
from tests.projects import torch_profile_text  # noqa: E402

RESULTS = REPO / "bench" / "results" / "snapshot.json"


def timed(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    work = Path(tempfile.mkdtemp(prefix="envlock-bench-snapshot-"))
    try:
        profile = work / "bench.toml"
        profile.write_text(torch_profile_text("bench"))
        for step in (["lock"], ["apply", "-y"]):
            subprocess.run(
                [sys.executable, "-m", "envlock", *step, str(profile)],
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        python = str(work / "venv" / "bin" / "python")
        # Bytecode, as a normal machine would have it after the first import (this project's
        # machines set PYTHONDONTWRITEBYTECODE, which would make every import recompile).
        subprocess.run(
            [python, "-m", "compileall", "-q", "-j", "0", str(work / "venv" / "lib")],
            check=False,
            stdout=subprocess.DEVNULL,
        )
        config = {"lr": 3e-4, "batch_size": 64, "model": {"layers": 24, "dim": 2048}}
        envlock.snapshot(work / "warmup", profile=profile, config=config)

        def api() -> float:
            started = time.perf_counter()
            envlock.snapshot(work / "ckpt", profile=profile, config=config)
            return time.perf_counter() - started

        results = {
            "runs": runs,
            "api_s": statistics.median(api() for _ in range(runs)),
            "cli_s": statistics.median(
                timed(
                    [
                        sys.executable,
                        "-m",
                        "envlock",
                        "snapshot",
                        "--force",
                        str(profile),
                        str(work / "cli"),
                    ]
                )
                for _ in range(runs)
            ),
            "uv_pip_freeze_s": statistics.median(
                timed([uv_path(), "pip", "freeze", "--python", python]) for _ in range(runs)
            ),
            "import_torch_s": statistics.median(
                timed([python, "-c", "import torch"]) for _ in range(runs)
            ),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results["api_vs_import_torch"] = results["api_s"] / results["import_torch_s"]
    results["api_vs_uv_pip_freeze"] = results["api_s"] / results["uv_pip_freeze_s"]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nenvlock snapshot on a CPU-torch environment (median of {runs})")
    print(f"  envlock.snapshot() from Python : {results['api_s'] * 1000:.0f} ms")
    print(f"  envlock snapshot (CLI)         : {results['cli_s'] * 1000:.0f} ms")
    print(
        f"  uv pip freeze (baseline)       : {results['uv_pip_freeze_s'] * 1000:.0f} ms "
        f"(snapshot is {results['api_vs_uv_pip_freeze']:.2f}x)"
    )
    print(
        f"  python -c 'import torch'       : {results['import_torch_s'] * 1000:.0f} ms "
        f"(snapshot is {results['api_vs_import_torch']:.2f}x)"
    )


if __name__ == "__main__":
    main()
