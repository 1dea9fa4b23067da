"""The README's exit-code table is the code's: every status envlock uses, and no other."""

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
