"""Benchmark the first compiled step: cold vs warm vs restored archive vs loaded mega-cache.

    python bench/bench_cache.py [--runs 3] [--torch 2.13.0] [--backend auto] [--find-links DIR]

One environment is locked and applied into a temporary root (CPU torch from this machine's
find-links, or a CUDA build where `nvidia-smi` finds a GPU; --backend and --torch override).
A small model (two Linear layers) is compiled with torch.compile through `envlock run`, on
cuda when torch sees a GPU, else on cpu. The script times its own first compiled call (the
compile, or the cache load, plus one step), so interpreter and import start-up stay out.
Each round, in this order, after a priming run that also saves the two portable forms:
  * cold                the build's cache dir emptied
  * warm                the same dir, as the cold run left it
  * restored            the dir emptied, then `envlock cache PROFILE restore ARCHIVE`
  * restored_elsewhere  the same, into a second root (same lock, another path), as on a
                        node that was never warm
  * megacache           the dir emptied, then `envlock run --compile-artifacts FILE`
Bytecode is written (under PYTHONPYCACHEPREFIX) and primed in both roots first: inductor
imports lazily during the first step, and bytecode compiles must not count as compiles.
Medians over --runs rounds, as ratios to cold in the same run. The hit/miss counters of
inductor's FX graph cache are recorded per run as a check on what each run measured.
Results: bench/results/cache.json and a table on stdout.
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
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.projects import compile_env, torch_profile_text  # noqa: E402

RESULTS = REPO / "bench" / "results" / "cache.json"
ENVLOCK = [sys.executable, "-m", "envlock"]
MODES = ("cold", "warm", "restored", "restored_elsewhere", "megacache")


SCRIPT = """\
import json
import os
import sys
import time

import torch
from torch._dynamo.utils import counters

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 16)
).to(device)
compiled = torch.compile(model)
x = torch.randn(32, 64, device=device)


def sync():
    if device == "cuda":
        torch.cuda.synchronize()


with torch.no_grad():
    sync()
    started = time.perf_counter()
    compiled(x)
    sync()
    first_step_s = time.perf_counter() - started
    for _ in range(3):
        compiled(x)
    sync()
result = {
    "device": device,
    "torch": torch.__version__,
    "first_step_s": first_step_s,
    "hit": counters["inductor"]["fxgraph_cache_hit"],
    "miss": counters["inductor"]["fxgraph_cache_miss"],
}
if len(sys.argv) > 1:
    import envlock_megacache  # on PYTHONPATH under `envlock run`

    result["saved_bytes"] = envlock_megacache.save(sys.argv[1])["bytes"]
print(json.dumps(result))
"""


def has_gpu() -> bool:
    try:
        proc = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return proc.returncode == 0 and "GPU" in proc.stdout


def envlock(env: dict[str, str], *args: str | Path) -> str:
    proc = subprocess.run(
        [*ENVLOCK, *map(str, args)], env=env, capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        sys.exit(f"envlock {' '.join(map(str, args))} failed:\n{proc.stdout}{proc.stderr}")
    return proc.stdout


def compile_run(
    env: dict[str, str],
    profile: Path,
    script: Path,
    *args: str | Path,
    artifacts: Path | None = None,
) -> dict[str, Any]:
    """The script under `envlock run`: its JSON line, plus the wall time of the whole run."""
    options: list[str | Path] = ["--compile-artifacts", artifacts] if artifacts else []
    started = time.perf_counter()
    out = envlock(env, "run", profile, *options, "--", "python", script, *args)
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    result["wall_s"] = time.perf_counter() - started
    return result


def empty_cache_dir(path: Path) -> None:
    """What a lost cache looks like: the build's dir as apply creates it, nothing in it."""
    shutil.rmtree(path, ignore_errors=True)
    (path / "inductor").mkdir(parents=True)
    (path / "triton").mkdir()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--torch", default=os.environ.get("ENVLOCK_BENCH_TORCH", "2.13.0"))
    parser.add_argument(
        "--backend",
        default=os.environ.get("ENVLOCK_BENCH_BACKEND", "auto"),
        help="cpu, cuXYZ, pypi, …; auto: cu128 where nvidia-smi finds a GPU, else cpu",
    )
    parser.add_argument(
        "--find-links",
        action="append",
        default=[],
        metavar="DIR",
        help="a wheel directory for the profile (repeatable): e.g. a CUDA torch built offline",
    )
    args = parser.parse_args()
    backend = args.backend if args.backend != "auto" else ("cu128" if has_gpu() else "cpu")
    work = Path(tempfile.mkdtemp(prefix="envlock-bench-cache-"))
    env = compile_env(work)
    samples: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    results: dict[str, Any] = {"runs": args.runs, "backend": backend}
    try:
        profile = work / "benchcache.toml"
        profile.write_text(
            torch_profile_text(
                "benchcache",
                torch=args.torch,
                backend=backend,
                find_links=tuple(os.path.abspath(d) for d in args.find_links),
            )
        )
        script = work / "compile_step.py"
        script.write_text(SCRIPT)
        artifacts, archive = work / "artifacts.bin", work / "cache.tar.gz"
        envlock(env, "lock", profile)
        envlock(env, "apply", "-y", profile)
        status = json.loads(envlock(env, "cache", profile, "status", "--json"))
        cache_dir = Path(_active_entry(status)["dir"])
        # A second root applying the same lock: the same build at another path.
        (work / "elsewhere").mkdir()
        other = work / "elsewhere" / profile.name
        shutil.copy(profile, other)
        shutil.copy(work / "pylock.benchcache.toml", other.parent)
        envlock(env, "apply", "-y", other)
        other_dir = Path(
            _active_entry(json.loads(envlock(env, "cache", other, "status", "--json")))["dir"]
        )

        # Priming: bytecode written, the mega-cache file and the archive made from a cold run.
        prime = compile_run(env, profile, script, artifacts)
        envlock(env, "cache", profile, "save", archive)
        compile_run(env, other, script)
        results.update(
            fingerprint=status["active"],
            device=prime["device"],
            torch=prime["torch"],
            megacache_bytes=prime["saved_bytes"],
            archive_bytes=archive.stat().st_size,
        )
        for _ in range(args.runs):
            empty_cache_dir(cache_dir)
            samples["cold"].append(compile_run(env, profile, script))
            samples["warm"].append(compile_run(env, profile, script))
            empty_cache_dir(cache_dir)
            envlock(env, "cache", profile, "restore", archive)
            samples["restored"].append(compile_run(env, profile, script))
            empty_cache_dir(other_dir)
            envlock(env, "cache", other, "restore", archive)
            samples["restored_elsewhere"].append(compile_run(env, other, script))
            empty_cache_dir(cache_dir)
            samples["megacache"].append(compile_run(env, profile, script, artifacts=artifacts))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    for mode in MODES:
        runs = samples[mode]
        results[mode] = {
            "first_step_s": statistics.median(r["first_step_s"] for r in runs),
            "wall_s": statistics.median(r["wall_s"] for r in runs),
            "hits": [r["hit"] for r in runs],
            "misses": [r["miss"] for r in runs],
        }
    cold = results["cold"]["first_step_s"]
    results["ratios"] = {
        f"{mode}_vs_cold": results[mode]["first_step_s"] / cold for mode in MODES[1:]
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    report(results)


def _active_entry(status: dict[str, Any]) -> dict[str, Any]:
    (entry,) = [d for d in status["dirs"] if d["active"]]
    return entry


def report(r: dict[str, Any]) -> None:
    labels = {
        "cold": "cold (empty cache dir)",
        "warm": "warm (the dir as the cold run left it)",
        "restored": "restored (`envlock cache restore ARCHIVE`)",
        "restored_elsewhere": "restored into another root (another path)",
        "megacache": "mega-cache (`run --compile-artifacts FILE`)",
    }
    width = max(map(len, labels.values()))
    sizes = (
        f"archive {r['archive_bytes'] / 1e6:.2f} MB, mega-cache {r['megacache_bytes'] / 1e6:.2f} MB"
    )
    print(
        f"\nenvlock compile-cache benchmark: torch {r['torch']} on {r['device']}, "
        f"first compiled step, median of {r['runs']} runs ({sizes})"
    )
    print(f"  {'':<{width}}  {'first step':>10}  {'vs cold':>8}  {'whole run':>9}  hits/misses")
    for mode in MODES:
        m = r[mode]
        ratio = "1.00x" if mode == "cold" else f"{r['ratios'][f'{mode}_vs_cold']:.2f}x"
        counts = ", ".join(f"{h}/{s}" for h, s in zip(m["hits"], m["misses"], strict=True))
        print(
            f"  {labels[mode]:<{width}}  {m['first_step_s']:>8.2f} s  {ratio:>8}  "
            f"{m['wall_s']:>7.1f} s  {counts}"
        )


if __name__ == "__main__":
    main()
