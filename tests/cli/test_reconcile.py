"""The local reconciler end to end through the real CLI: apply, check, run, rollback, gc.

Everything is real: uv builds the venvs from the suite's wheelhouse, the polluter is
installed with uv the way a user would, files are edited on disk.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from envlock.ui import size
from tests.conftest import Envlock
from tests.projects import write_seed_project
from tests.support import uv_install


def site(project: Path) -> Path:
    return project / "venv" / "lib" / "python3.11" / "site-packages"


def drift_kinds(result: subprocess.CompletedProcess[str]) -> list[tuple[str, str]]:
    data = json.loads(result.stdout)
    return [(d["kind"], d["subject"]) for d in data["drift"]]


@pytest.fixture
def seed(tmp_path: Path, wheelhouse: Path, envlock: Envlock) -> Path:
    """An applied seed project: torch 2.11.0+cu128 with training deps and a pinned script."""
    profile = write_seed_project(tmp_path / "proj", wheelhouse)
    assert envlock("lock", profile).returncode == 0
    result = envlock("apply", "-y", profile)
    assert result.returncode == 0, result.stderr
    return profile


def pollute_with_sglang(profile: Path, wheelhouse: Path) -> None:
    """What a user does: install another package into the live venv with uv directly (the
    synthetic polluter, which swaps torch's build label)."""
    uv_install(profile.parent / "venv" / "bin" / "python", [wheelhouse], "sglang==0.5.0")


def test_seed_scenario(seed: Path, wheelhouse: Path, envlock: Envlock) -> None:
    # The pinned build runs through envlock run.
    probe = "import torch; print(torch.__version__, torch.version.cuda)"
    ran = envlock("run", seed, "--", "python", "-c", probe)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "2.11.0+cu128 12.8"

    pollute_with_sglang(seed, wheelhouse)
    check = envlock("check", "--json", seed)
    assert check.returncode == 1
    kinds = drift_kinds(check)
    assert ("torch-build", "torch") in kinds
    assert ("cuda-libraries", "nvidia-* libraries") in kinds
    extras = {subject for kind, subject in kinds if kind == "package-extra"}
    assert extras == {"sglang", "flashinfer-python", "sgl-kernel"}
    torch_item = next(d for d in json.loads(check.stdout)["drift"] if d["kind"] == "torch-build")
    assert torch_item["expected"] == "2.11.0+cu128" and torch_item["actual"] == "2.11.0+cu130"
    human = envlock("check", seed)
    assert "cu128 to cu130" in human.stdout and "nvidia-*-cu13" in human.stdout

    refused = envlock("run", seed, "--", "python", "-c", "print('ran')")
    assert refused.returncode == 1 and "ran" not in refused.stdout
    assert "refusing to run" in refused.stderr

    restored = envlock("rollback", "--resync", seed)
    assert restored.returncode == 0, restored.stderr
    assert envlock("check", seed).returncode == 0
    again = envlock("run", seed, "--", "python", "-c", probe)
    assert again.stdout.strip() == "2.11.0+cu128 12.8"


def test_bare_python_lacks_what_envlock_run_has(seed: Path, envlock: Envlock) -> None:
    # The seed failure: the system interpreter has no torch; envlock run's has.
    bare = subprocess.run(
        ["python3", "-c", "import trainutil"],
        capture_output=True,
        text=True,
        env={"PATH": os.environ["PATH"]},
    )
    assert bare.returncode != 0 and "No module named 'trainutil'" in bare.stderr
    ran = envlock("run", seed, "--", "python3", "-c", "import trainutil, sys; print(sys.prefix)")
    assert ran.returncode == 0, ran.stderr
    assert "/generations/1-" in ran.stdout


@pytest.mark.parametrize(
    ("damage", "kind"),
    [
        ("edit", "file-modified"),
        ("delete", "file-missing"),
        ("pth", "pth-injection"),
        ("downgrade", "package-version"),
        ("script", "script-modified"),
        ("script-delete", "script-missing"),
        ("venv-link", "venv-link"),
    ],
)
def test_drift_is_detected_and_repaired(
    seed: Path, wheelhouse: Path, envlock: Envlock, damage: str, kind: str
) -> None:
    project = seed.parent
    if damage == "edit":
        with open(site(project) / "trainutil" / "__init__.py", "a") as handle:
            handle.write("# edited in place\n")
    elif damage == "delete":
        (site(project) / "tinydep" / "__init__.py").unlink()
    elif damage == "pth":
        (site(project) / "zz-inject.pth").write_text("import os\n")
    elif damage == "downgrade":
        uv_install(project / "venv/bin/python", [wheelhouse], "tinydep==0.9")
    elif damage == "script":
        with open(project / "deployed" / "train.py", "a") as handle:
            handle.write("print('tampered')\n")
    elif damage == "script-delete":
        (project / "deployed" / "train.py").unlink()
    elif damage == "venv-link":
        (project / "venv").unlink()
        (project / "venv").symlink_to(project / "root" / "generations")

    check = envlock("check", "--json", seed)
    assert check.returncode == 1
    assert kind in [k for k, _ in drift_kinds(check)]

    fixed = envlock("apply", "-y", seed)
    assert fixed.returncode == 0, fixed.stderr
    assert envlock("check", seed).returncode == 0
    deep = envlock("check", "--deep", seed)
    assert deep.returncode == 0, deep.stdout
    ran = envlock("run", seed, "--", "python", "-c", "import tinydep; print(tinydep.VERSION)")
    assert ran.stdout.strip() == "1.0"


def test_in_place_edit_is_reported_as_cache_corruption_and_not_reused(
    seed: Path, envlock: Envlock
) -> None:
    target = site(seed.parent) / "trainutil" / "__init__.py"
    assert os.stat(target).st_nlink > 1, "uv should hardlink from its cache"
    with open(target, "a") as handle:  # in place: the cache's copy changes too
        handle.write("raise SystemExit('corrupted')\n")
    deep = envlock("check", "--deep", "--json", seed)
    item = next(d for d in json.loads(deep.stdout)["drift"] if d["kind"] == "file-modified")
    assert "uv's cache copy is corrupted too" in item["detail"]
    assert envlock("apply", "-y", seed).returncode == 0
    # The rebuilt file is pristine: the corrupted cache entry was not linked back in.
    assert "corrupted" not in target.read_text()
    assert envlock("check", "--deep", seed).returncode == 0


def test_noop_apply_says_why(seed: Path, envlock: Envlock) -> None:
    again = envlock("apply", "-y", seed)
    assert again.returncode == 0
    assert "nothing to do: generation 1 matches lock" in again.stdout
    plan = envlock("plan", seed)
    assert plan.returncode == 0


def test_generations_rollback_and_gc(seed: Path, envlock: Envlock) -> None:
    text = seed.read_text().replace('"tinydep==1.0"', '"tinydep==0.9"')
    seed.write_text(text)
    assert envlock("plan", seed).returncode == 2  # stale lock refused
    assert envlock("lock", "--check", seed).returncode == 1
    assert envlock("lock", seed).returncode == 0
    planned = envlock("plan", "--json", seed)
    assert planned.returncode == 1
    assert next(a["kind"] for a in json.loads(planned.stdout)["actions"]) == "build"
    assert envlock("apply", "-y", seed).returncode == 0
    version = "import tinydep; print(tinydep.VERSION)"
    assert envlock("run", seed, "--", "python", "-c", version).stdout.strip() == "0.9"

    listed = json.loads(envlock("generations", "--json", seed).stdout)
    assert [g["number"] for g in listed["generations"]] == [1, 2]
    assert listed["current"].startswith("2-")

    back = envlock("rollback", "--json", seed)
    assert back.returncode == 0, back.stderr
    assert json.loads(back.stdout)["current"].startswith("1-")
    # Generation 1 is built from the old lock: a rollback holds it there, judged against its
    # own lock (clean), until apply switches forward.
    held = envlock("check", "--json", seed)
    assert held.returncode == 0 and drift_kinds(held) == []
    assert json.loads(held.stdout)["hold"]["generation"] == json.loads(back.stdout)["current"]
    # The lock it was judged by is the held generation's, as the text says, not the profile's.
    judged = json.loads(held.stdout)
    assert judged["judged_lock_id"] == judged["hold"]["lock_id"] != judged["lock_id"]
    assert f"lock {judged['judged_lock_id']}" in envlock("check", seed).stdout
    ran = envlock("run", seed, "--", "python", "-c", version)
    assert ran.stdout.strip() == "1.0"

    # Apply switches to the existing generation 2 rather than rebuilding it.
    forward = envlock("apply", "-y", "--json", seed)
    actions = [a["kind"] for a in json.loads(forward.stdout)["actions"]]
    assert "build" not in actions and "switch" in actions
    assert envlock("rollback", "--to", "1", seed).returncode == 0
    assert envlock("apply", "-y", seed).returncode == 0

    # gc never removes the active generation or the previous one.
    gc = envlock("gc", "-y", "--keep", "0", "--json", seed)
    assert gc.returncode == 0
    remaining = json.loads(envlock("generations", "--json", seed).stdout)["generations"]
    assert [g["number"] for g in remaining] == [1, 2]

    # A third generation leaves the first to gc: listed by --dry-run, asked for, removed.
    seed.write_text(text.replace('"tinydep==0.9"', '"tinydep==1.0"'))
    seed.write_text(seed.read_text().replace('"trainutil", ', ""))
    assert envlock("lock", seed).returncode == 0
    assert envlock("apply", "-y", seed).returncode == 0
    first = listed["generations"][0]["name"]
    would = envlock("gc", "--keep", "1", "--dry-run", seed)
    assert would.returncode == 0, would.stderr
    assert f"would remove 1 generation(s): {first}" in would.stdout
    assert "dry run: nothing removed" in would.stderr
    unasked = envlock("gc", "--keep", "1", seed)  # stdin is not a terminal: nobody to ask
    assert unasked.returncode == 2 and "pass -y to remove them, or --dry-run" in unasked.stderr
    after = json.loads(envlock("generations", "--json", seed).stdout)["generations"]
    assert [g["number"] for g in after] == [1, 2, 3]
    adds = listed["generations"][0]["adds_bytes"]
    removed = envlock("gc", "-y", "--keep", "1", seed)
    assert removed.returncode == 0 and f"removed {first}" in removed.stdout
    # `run` above wrote bytecode into it after its build: the freed figure says so, and the
    # part `generations` showed (its adds) is named as such.
    assert f"{size(adds)} of it their files as built (`generations`' adds)" in removed.stderr
    after = json.loads(envlock("generations", "--json", seed).stdout)["generations"]
    assert [g["number"] for g in after] == [2, 3]


def test_env_values_reach_the_command_literally(
    tmp_path: Path, wheelhouse: Path, envlock: Envlock
) -> None:
    canary = tmp_path / "CANARY"
    nasty = f'it\'s "quoted" $(touch {canary}); `touch {canary}` ; echo > {canary}'
    profile = write_seed_project(tmp_path / "p", wheelhouse, env={"NASTY": nasty})
    assert envlock("lock", profile).returncode == 0
    assert envlock("apply", "-y", profile).returncode == 0
    ran = envlock(
        "run",
        profile,
        "--",
        "python",
        "-c",
        "import os, sys; sys.stdout.write(os.environ['NASTY'])",
    )
    assert ran.stdout == nasty
    assert not canary.exists()


def test_run_passes_exit_code_stdin_and_cache_variables(seed: Path, envlock: Envlock) -> None:
    code = (
        "import os, sys; data = sys.stdin.read(); "
        "print(data.upper()); print(os.environ['TORCHINDUCTOR_CACHE_DIR']); "
        "print(os.environ['VIRTUAL_ENV']); sys.exit(7)"
    )
    ran = envlock("run", seed, "--", "python", "-c", code, input="hello")
    assert ran.returncode == 7
    lines = ran.stdout.splitlines()
    assert lines[0] == "HELLO"
    assert "/cache/torch-2.11.0+cu128-" in lines[1] and lines[1].endswith("/inductor")
    assert Path(lines[1]).is_dir()
    assert "/generations/1-" in lines[2]
