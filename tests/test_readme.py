"""The README agrees with the code and the benchmarks: its exit-code table is the code's (every
status envlock uses, and no other), and its speed table is what bench/results/ says."""

from __future__ import annotations

import re
from pathlib import Path

from envlock import errors
from envlock.runs import launch

README = Path(__file__).resolve().parent.parent / "README.md"


def test_the_exit_code_table_matches_the_code() -> None:
    text = README.read_text()
    table = text.split("Exit codes (`tests/test_readme.py` checks this table", 1)[1]
    documented = {int(m) for m in re.findall(r"^\| (\d+) \|", table.split("\n\n", 2)[1], re.M)}
    used = {
        errors.EXIT_DRIFT,
        errors.EXIT_USAGE,
        errors.EXIT_FAILED,
        errors.EXIT_INTERRUPTED,
        launch.NOT_EXECUTABLE,
        launch.NOT_FOUND,
        0,
    }
    assert documented == used


def test_the_speed_table_is_the_one_the_benchmark_results_give() -> None:
    """`make bench` writes bench/results/*.json; the README's table is rendered from them."""
    import subprocess
    import sys

    bench = README.parent / "bench" / "readme_table.py"
    done = subprocess.run([sys.executable, str(bench), "--check"], capture_output=True, text=True)
    assert done.returncode == 0, "run `python bench/readme_table.py` after a benchmark run"
