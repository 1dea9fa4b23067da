"""Every read goes through the gate, over the whole tree: a plain `open`, `Path.open`,
`Path.read_text`/`read_bytes` or `io.open` anywhere in envlock (controller, agent, start-up
set) fails this scan unless its line (or the one above) says why it may: `# own:` — the file
is envlock's own (written by envlock, under its lock, or its own package) or the kernel's.
A file the user named (a profile, its lock, `--config`, a pinned script) is no exception:
it is read through the gate's `read_named`/`open_named` (tests/trust/test_named_files.py),
and a plain read of one, `# named:` or not, fails the scan. And the readers the gate now
guards hold against the shapes that hung or flooded them: a FIFO, a device, a link out.
"""

from __future__ import annotations

import ast
import json
import os
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "envlock"
# Calls that open a file by name. Reads of what is already open (handle.read) are not.
OPENERS = {"open", "read_text", "read_bytes"}
# Receivers whose `.open` is not a file's: zip and tar members, streams.
MEMBER_OPENERS = {"archive", "zipfile", "tarfile"}
REASONS = ("# own:", "# gate:")


def unexplained_opens(source: str, where: str) -> list[str]:
    """The opening calls of `source` whose lines name no reason."""
    lines = source.splitlines()
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        receiver = ast.unparse(func.value) if isinstance(func, ast.Attribute) else ""
        # configparser's read(FILENAMES) opens them by name (read_string does not).
        parser_read = name == "read" and receiver.lower().endswith(("parser", "config"))
        if not parser_read and (
            name not in OPENERS or (isinstance(func, ast.Name) and name != "open")
        ):
            continue  # a function of ours named read_text is not Path's
        if name == "open" and receiver not in ("", "io", "builtins"):
            if receiver in MEMBER_OPENERS or receiver.endswith(("archive", "zip")):
                continue
            if receiver == "os":  # descriptors, judged where they are opened
                continue
        span = lines[max(node.lineno - 2, 0) : (node.end_lineno or node.lineno)]
        if not any(reason in line for line in span for reason in REASONS):
            found.append(f"{where}:{node.lineno}: {lines[node.lineno - 1].strip()}")
    return found


def test_every_module_opens_files_only_through_the_gate_or_says_why() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        found += unexplained_opens(path.read_text(), str(path.relative_to(REPO)))
    assert not found, "opened outside the gate, with no reason given:\n" + "\n".join(found)


PLANTS = (
    "def planted(p):\n    with open(p) as h:\n        return h.read()\n",
    "def planted(p):\n    return Path(p).read_text()\n",
    "def planted(p):\n    return json.load(open(p))\n",
    "def planted(p):\n    return p.read_bytes()\n",
    "def planted(p):\n    with p.open('rb') as h:\n        return h.read()\n",
    "def planted(p):\n    return io.open(p).read()\n",
    "def planted(p):\n    parser = configparser.ConfigParser()\n    parser.read([p])\n",
    # A file the user named is read through the gate too: saying so is no excuse.
    "def planted(p):\n    # named: the profile\n    return p.read_text()\n",
)
PACKAGES = sorted(
    {p.parent for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts}, key=str
)


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_the_scan_catches_a_plain_open_planted_in_each_package(package: Path) -> None:
    module = sorted(package.glob("*.py"))[0]
    for plant in PLANTS:
        source = module.read_text() + "\n\n" + plant
        assert unexplained_opens(source, module.name), (module, plant)


# -- the readers the gate now guards --------------------------------------------------------
def within_seconds(call: Callable[[], object], seconds: float = 10) -> object:
    """`call`'s result, or a failure when it did not return in time (a blocked open)."""
    result: list[object] = []
    thread = threading.Thread(target=lambda: result.append(call()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "blocked: a read outside the gate"
    return result[0] if result else None


def zero_device(path: Path) -> None:
    os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 5))  # /dev/zero's numbers, made here


def venv_with(tmp_path: Path) -> tuple[Path, Path]:
    venv = tmp_path / "venv"
    info = venv / "lib" / "python3.11" / "site-packages" / "pkg-1.0.dist-info"
    info.mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\nversion = 3.11.9\n")
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: pkg\nVersion: 1.0\n")
    (info / "RECORD").write_text("")
    return venv, info


def test_the_survey_reads_no_fifo_no_device_and_no_link_out(tmp_path: Path) -> None:
    from envlock.agent.survey import distribution_origins, pyvenv_cfg

    venv, info = venv_with(tmp_path)
    os.mkfifo(info / "INSTALLER")
    zero_device(info / "direct_url.json")
    origins = within_seconds(lambda: distribution_origins(str(info.parent)))
    assert origins == {"pkg": {"installer": None, "direct_url": None}}
    # A link to a file outside the venv (root's own) is not read into the profile.
    secret = tmp_path / "root-only.json"
    secret.write_text(json.dumps({"url": "https://token@secret.example/x", "dir_info": {}}))
    secret.chmod(0o600)
    (info / "direct_url.json").unlink()
    (info / "direct_url.json").symlink_to(secret)
    origins = distribution_origins(str(info.parent))
    assert origins["pkg"]["direct_url"] is None
    (venv / "pyvenv.cfg").unlink()
    os.mkfifo(venv / "pyvenv.cfg")
    assert within_seconds(lambda: pyvenv_cfg(str(venv / "pyvenv.cfg"), str(venv))) is None


def test_a_dataset_file_swapped_for_a_fifo_is_named_unreadable_at_once(tmp_path: Path) -> None:
    from envlock.agent.dataset import content_digest, sample_digest

    data = tmp_path / "data"
    data.mkdir()
    (data / "a.bin").write_bytes(b"a" * 10)
    os.mkfifo(data / "b.bin")  # the listing saw a file; a FIFO stands there now
    files = [("a.bin", 10, 0, str(data / "a.bin")), ("b.bin", 10, 0, str(data / "b.bin"))]
    unreadable: set[str] = set()
    started = time.monotonic()
    within_seconds(lambda: sample_digest(files, unreadable))
    within_seconds(lambda: content_digest(files, unreadable))
    assert unreadable == {"b.bin"} and time.monotonic() - started < 10


def safetensors(path: Path, name: str) -> None:
    """A one-tensor safetensors file (the format is a length, a JSON header, the data)."""
    header = json.dumps({name: {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
    path.write_bytes(len(header).to_bytes(8, "little") + header + b"\0\0\0\0")


def test_inspect_of_a_directory_never_reads_a_newest_step_that_links_out(tmp_path: Path) -> None:
    from tests.conftest import run_envlock

    run = tmp_path / "run"
    run.mkdir()
    safetensors(run / "step1.safetensors", "ours")
    secret = tmp_path / "root-only"
    secret.mkdir(mode=0o700)
    safetensors(secret / "model.safetensors", "root_only_tensor")
    (run / "step9.safetensors").symlink_to(secret / "model.safetensors")
    done = run_envlock("inspect", run)
    assert done.returncode == 3, (done.returncode, done.stdout, done.stderr)
    assert "is a link out of" in done.stderr and "--follow-links" in done.stderr
    assert "root_only_tensor" not in done.stdout + done.stderr
    followed = run_envlock("inspect", "--follow-links", run)
    assert followed.returncode == 0 and "root_only_tensor" in followed.stdout


def test_check_names_a_generation_file_swapped_for_a_fifo(tmp_path: Path, wheelhouse: Path) -> None:
    import subprocess
    import sys

    from envlock.profile.read import load_profile
    from tests.conftest import run_envlock
    from tests.projects import write_seed_project

    profile = write_seed_project(tmp_path / "proj", wheelhouse)
    for command in (("lock",), ("apply", "-y")):
        assert run_envlock(*command, profile).returncode == 0, command
    gen = (Path(load_profile(profile).target.root) / "current").resolve()
    victim = next(p for p in gen.glob("lib/python3.*/site-packages/*/*.py") if p.is_file())
    victim.unlink()
    os.mkfifo(victim)
    for deep in ((), ("--deep",)):
        done = subprocess.run(
            [sys.executable, "-m", "envlock", "check", *deep, str(profile)],
            capture_output=True,
            text=True,
            timeout=120,  # a blocked open of the FIFO would never return
        )
        assert done.returncode == 1, (deep, done.stdout, done.stderr)
        assert victim.name in done.stdout, (deep, done.stdout)
