"""The README agrees with the code and the benchmarks: its exit-code table is the code's (every
status envlock uses, and no other), and its speed table is what bench/results/ says."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from envlock import errors
from envlock.runs import launch
from tests.conftest import run_envlock
from tests.projects import torch_profile_text, write_seed_project
from tests.support import UV

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_exit_code_table_matches_the_code() -> None:
    text = README.read_text()
    table = text.split("Exit codes (`tests/cli/test_readme.py` checks this table", 1)[1]
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
    bench = README.parent / "bench" / "readme_table.py"
    done = subprocess.run([sys.executable, str(bench), "--check"], capture_output=True, text=True)
    assert done.returncode == 0, "run `python bench/readme_table.py` after a benchmark run"


# -- the README's console transcripts are what the commands print --------------------------
# Each ```console block of the README is run (when its first command is in RUN) or named in
# NOT_RUN with the reason: a new transcript cannot go unchecked. A block runs as one bash
# script in a project whose paths stand for the README's; what each command prints (stdout
# and stderr, in order) must be the lines shown under it, with lock ids, timings, file
# counts and the project's path masked. A command shown without output is run, not compared;
# a line `…the same report…` stands for any lines.
SEED = "$ envlock apply -y train.toml"
HOLD = "$ envlock rollback train.toml"
ADD = "$ envlock add train.toml sglang --dry-run"
NO_RELEASE = "$ envlock add -y train.toml sglang"
DIFF = "$ envlock run train.toml -- python train.py --lr 3e-4 --ckpt runs/a"
RUN = (SEED, HOLD, ADD, NO_RELEASE, DIFF)
NOT_RUN = {
    "$ envlock check train.toml": (
        "GPU facts of a node with an NVIDIA driver: tests/cli/test_gpu.py"
    ),
    "$ envlock init train.toml --from /srv/venv --venv /srv/venv --find-links ./wheels": (
        "a pip-built venv at a path of the README's: tests/cli/test_adopt.py runs the same steps"
    ),
    "$ envlock snapshot train.toml runs/a --config a.json --metric tok_per_s=20000 --metric"
    " step=1000": (
        "two runs on cu128 then cu130 with typed-in metrics: tests/cli/test_snapshot_data.py"
        "::test_diff_answers_why_the_run_got_slower runs the same steps"
    ),
}
MARK = "@@envlock-readme-transcript@@"
NO_DRIVER = "no NVIDIA driver: skipping GPU checks"


def console_blocks() -> list[list[str]]:
    blocks = re.findall(r"^```console\n(.*?)^```", README.read_text(), re.M | re.S)
    return [block.splitlines() for block in blocks]


def bare(line: str) -> str:
    """A command line without its trailing `# comment`."""
    return re.sub(r"\s+# .*$", "", line)


def commands_and_outputs(block: list[str]) -> list[tuple[str, list[str]]]:
    steps: list[tuple[str, list[str]]] = []
    for line in block:
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            steps[-1][1].append(line)
    return steps


def masked(lines: list[str], project: Path, ids: dict[str, str]) -> list[str]:
    """Lock ids by order of appearance in the block (`ids`: the same id stays the same),
    times, counts, paths, Python's patch release."""

    def lock_id(match: re.Match[str]) -> str:
        return ids.setdefault(match.group(0), f"<lock {len(ids) + 1}>")

    out = []
    for line in lines:
        line = line.replace(str(project), "/tmp/demo").rstrip()
        line = re.sub(r"\b[0-9a-f]{12}\b", lock_id, line)
        line = re.sub(r"\b\d+(\.\d+)? ?(ms|s)\b", "<time>", line)
        line = re.sub(r"\bPython (\d+\.\d+)\.\d+", r"Python \1.<patch>", line)
        out.append(re.sub(r"\b\d+ files\b", "<n> files", line))
    return out


def matches(expected: list[str], actual: list[str]) -> bool:
    """`expected` with `…the same report…` lines standing for any run of lines."""
    if "…the same report…" not in expected:
        return expected == actual
    cut = expected.index("…the same report…")
    head, tail = expected[:cut], expected[cut + 1 :]
    return actual[: len(head)] == head and (not tail or actual[-len(tail) :] == tail)


def run_block(block: list[str], project: Path, env: dict[str, str]) -> None:
    """The block's commands in one bash (so `echo $?` sees the command before it)."""
    steps = commands_and_outputs(block)
    script = ["exec 2>&1", f"cd {shlex.quote(str(project))}"]
    for command, _ in steps:
        command = command.replace("/opt/venv", str(project / "venv"))
        script += [command, f"__s=$?; echo {MARK}; (exit $__s)"]
    done = subprocess.run(
        ["bash", "-c", "\n".join(script)], capture_output=True, text=True, env=env, timeout=300
    )
    printed = done.stdout.split(f"{MARK}\n")
    assert len(printed) == len(steps) + 1, done.stdout  # every command ran
    shown_ids: dict[str, str] = {}
    printed_ids: dict[str, str] = {}
    for (command, expected), actual in zip(steps, printed, strict=False):
        if expected:
            # The README's transcripts are a GPU node's: this machine's driverless note
            # about a CUDA build is the one line they do not show.
            lines = [line for line in actual.splitlines() if line != NO_DRIVER]
            shown, got = masked(expected, project, shown_ids), masked(lines, project, printed_ids)
            assert matches(shown, got), (
                f"$ {command}\nREADME:\n" + "\n".join(shown) + "\nprinted:\n" + "\n".join(got)
            )


def test_every_console_transcript_is_run_or_says_why_not() -> None:
    firsts = [bare(block[0]) for block in console_blocks()]
    assert sorted(firsts) == sorted([*RUN, *NOT_RUN]), "add the new transcript to RUN"


@pytest.fixture(scope="module")
def transcript_project(tmp_path_factory: pytest.TempPathFactory, wheelhouse: Path) -> Path:
    """The README's train.toml: torch 2.11.0+cu128 and a pinned script, on a local root
    locked and applied once for the transcripts that share it."""
    profile = write_seed_project(
        tmp_path_factory.mktemp("readme") / "demo", wheelhouse, name="train"
    )
    for step in (("lock", profile), ("apply", "-y", profile)):
        assert run_envlock(*step).returncode == 0
    return profile


def transcript_env(wheelhouse: Path) -> dict[str, str]:
    """envlock and uv on PATH; a bare `uv pip install` finds the test wheels, offline."""
    path = f"{Path(sys.executable).parent}:{Path(UV).parent}:{os.environ['PATH']}"
    return {
        **os.environ,
        "PATH": path,
        "UV_FIND_LINKS": str(wheelhouse),
        "UV_OFFLINE": "1",
        "UV_NO_INDEX": "1",
        "NO_COLOR": "1",
    }


def block_of(first: str) -> list[str]:
    (block,) = [b for b in console_blocks() if bare(b[0]) == first]
    return block


def test_the_failure_it_prevents_transcript(transcript_project: Path, wheelhouse: Path) -> None:
    project = transcript_project.parent
    run_block(block_of(SEED), project, transcript_env(wheelhouse))


def test_the_rollback_hold_transcript(transcript_project: Path, wheelhouse: Path) -> None:
    """A second generation from another lock, then the README's rollback and check."""
    project = transcript_project.parent
    text = transcript_project.read_text()
    transcript_project.write_text(text.replace("tinydep==1.0", "tinydep==0.9"))
    for step in (("lock", transcript_project), ("apply", "-y", transcript_project)):
        assert run_envlock(*step).returncode == 0
    run_block(block_of(HOLD), project, transcript_env(wheelhouse))


def test_the_add_transcript(tmp_path: Path, pypi_wheelhouse: Path) -> None:
    """train.toml on the suite's mirror of PyPI: torch 2.11.0 (CUDA 13.0) and numpy."""
    project = tmp_path / "demo"
    project.mkdir()
    mirror_profile(project, pypi_wheelhouse)
    run_block(block_of(ADD), project, transcript_env(pypi_wheelhouse))

    # Then the same profile on a mirror without sglang 0.5.2: no release fits.
    only_new = tmp_path / "wheels"
    shutil.copytree(pypi_wheelhouse, only_new)
    (old,) = only_new.glob("sglang-0.5.2-*.whl")
    old.unlink()
    mirror_profile(project, only_new)
    run_block(block_of(NO_RELEASE), project, transcript_env(only_new))


def mirror_profile(project: Path, wheels: Path) -> Path:
    """train.toml: torch 2.11.0 from the mirror and numpy, locked and applied."""
    profile = project / "train.toml"
    profile.write_text(
        torch_profile_text(
            "train",
            torch="2.11.0",
            backend="pypi",
            packages=("numpy",),
            find_links=(str(wheels),),
            offline=True,
        )
    )
    for step in (("lock", profile), ("apply", "-y", profile)):
        assert run_envlock(*step).returncode == 0
    return profile


def test_the_snapshot_diff_transcript(transcript_project: Path, wheelhouse: Path) -> None:
    """The README's train.py (its ```python block), run twice, then diff."""
    project = transcript_project.parent
    (script,) = re.findall(r"^```python\n(# train\.py\n.*?)^```", README.read_text(), re.M | re.S)
    (project / "train.py").write_text(script)
    assert run_envlock("apply", "-y", transcript_project).returncode == 0
    run_block(block_of(DIFF), project, transcript_env(wheelhouse))
