"""Run every benchmark in bench/ and print its table (`make bench`).

Each writes bench/results/<name>.json; the site's Benchmarks page
(docs/benchmarks.md) takes its figures from those files.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
SCRIPTS = [
    "bench_reconcile.py",
    "bench_snapshot.py",
    "bench_inspect.py",
    "bench_weights.py",
    "bench_config.py",
    "bench_cache.py",
    "bench_data.py",
    "bench_durability.py",
    "bench_bisect.py",
]
REMOTE = ["bench_remote.py", "bench_fleet.py"]


def main() -> int:
    failed = []
    for name in SCRIPTS:
        if not (BENCH / name).exists():
            continue
        print(f"== {name}", flush=True)
        if subprocess.run([sys.executable, str(BENCH / name)], cwd=REPO).returncode != 0:
            failed.append(name)
    for name in REMOTE:  # pytest files: they use the remote tests' sshd, LXC and fakepve
        print(f"== {name}", flush=True)
        remote = [
            sys.executable,
            "-m",
            "pytest",
            str(BENCH / name),
            "-p",
            "tests.remote.fixtures",
            "-q",
            "-s",
        ]
        if subprocess.run(remote, cwd=REPO).returncode != 0:
            failed.append(name)
    # The Benchmarks page's speed table, from the results just written.
    if subprocess.run([sys.executable, str(BENCH / "readme_table.py")], cwd=REPO).returncode:
        failed.append("readme_table.py")
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
