"""Progress for every step over a second (issue #47): a terminal sees the step at once and
the seconds or the count as it goes, in place on stderr (ui.live, the install's mechanism);
a pipe and --json see none of it. The steps are slow for real: uv resolving from an index
that answers slowly, a dataset and checkpoints of many megabytes."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from envlock.profile.read import load_profile
from tests.index_server import IndexServer
from tests.projects import torch_profile_text
from tests.wheelhouse import build_wheel

ENVLOCK = [sys.executable, "-m", "envlock"]


def on_a_terminal(
    argv: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None
) -> tuple[int, str]:
    """Run argv with a pseudo-terminal as stdin, stdout and stderr; its exit status and
    every byte it wrote there (a live line's carriage returns and erasures included)."""
    leader, follower = pty.openpty()
    # A wide terminal: a live line is cut at its width, and these lines name tmp paths.
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 400, 0, 0))
    env = {k: v for k, v in (env or os.environ).items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.Popen(
        argv, stdin=follower, stdout=follower, stderr=follower, cwd=cwd, env=env
    )
    os.close(follower)
    seen = b""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if select.select([leader], [], [], 0.2)[0]:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the terminal closed: everything was read
                break
            if not chunk:
                break
            seen += chunk
        elif proc.poll() is not None:
            break
    os.close(leader)
    return proc.wait(timeout=60), seen.decode(errors="replace")


def in_a_pipe(argv: list[str], *, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    proc = subprocess.run(argv, capture_output=True, text=True, env=env)
    return proc.returncode, proc.stdout, proc.stderr


LIVE = "\r\x1b[K  "  # how ui.live starts a line it shows in place


def live_lines(shown: str) -> list[str]:
    """The progress lines a terminal was shown in place, in order."""
    return [part.split("\r")[0] for part in shown.split(LIVE)[1:] if part.split("\r")[0]]


# -- uv's resolve ---------------------------------------------------------------------------
@pytest.fixture
def slow_index(tmp_path: Path) -> Iterator[IndexServer]:
    """A real index on loopback whose every answer takes 0.8 s."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    build_wheel(wheels, "slowdep", "1.0", files={"slowdep/__init__.py": "X = 1\n"})
    index = IndexServer(tmp_path / "served", delay=0.8).start()
    index.add("main", sorted(wheels.glob("*.whl")))
    yield index
    index.stop()


def slow_profile(base: Path, index: IndexServer) -> Path:
    base.mkdir(parents=True)
    profile = base / "slow.toml"
    text = torch_profile_text("slow", torch=None)
    url = index.simple("main")
    profile.write_text(f'{text}\n[dependencies]\npackages = ["slowdep"]\nindex-url = "{url}"\n')
    return profile


def fresh_cache(tmp_path: Path, name: str) -> dict[str, str]:
    """envlock's environment with a uv cache of its own: uv asks the index again."""
    return {**os.environ, "UV_CACHE_DIR": str(tmp_path / name), "UV_FIND_LINKS": ""}


def test_a_slow_resolve_shows_its_seconds_on_a_terminal_only(
    tmp_path: Path, slow_index: IndexServer
) -> None:
    profile = slow_profile(tmp_path / "proj", slow_index)
    argv = [*ENVLOCK, "lock", str(profile)]
    code, shown = on_a_terminal(argv, env=fresh_cache(tmp_path, "c1"))
    assert code == 0, shown
    lines = live_lines(shown)
    assert lines[0] == "resolving slow.toml with uv", shown  # at once, however fast
    assert "resolving slow.toml with uv (1 s)" in lines, shown  # and the seconds it takes
    assert "wrote pylock.slow.toml" in shown

    (profile.parent / "pylock.slow.toml").unlink()
    code, out, err = in_a_pipe(argv, env=fresh_cache(tmp_path, "c2"))
    assert code == 0 and "resolving" not in out + err and "\x1b" not in out + err
    (profile.parent / "pylock.slow.toml").unlink()
    as_json = [*ENVLOCK, "lock", "--json", str(profile)]
    code, shown = on_a_terminal(as_json, env=fresh_cache(tmp_path, "c3"))
    assert code == 0 and "resolving" not in shown and LIVE not in shown, shown
    assert "schema" in json.loads(shown)  # one document, nothing else


# -- data --deep -----------------------------------------------------------------------------
def test_data_deep_shows_the_bytes_it_digests_on_a_terminal_only(tmp_path: Path) -> None:
    profile = tmp_path / "d.toml"
    assert subprocess.run([*ENVLOCK, "init", str(profile)], capture_output=True).returncode == 0
    (tmp_path / "train").mkdir()
    for n in range(3):
        with open(tmp_path / "train" / f"shard{n}.bin", "wb") as handle:
            handle.truncate(40 << 20)  # 40 MB each, sparse: read, never written
    with profile.open("a") as handle:
        handle.write('\n[data]\ntrain = "train"\n')
    code, shown = on_a_terminal([*ENVLOCK, "data", "--deep", str(profile)])
    assert code == 0, shown
    lines = live_lines(shown)
    assert lines[0] == "fingerprinting the datasets", shown
    assert any(
        x.startswith("fingerprinting the datasets: digesting: 0 of 120 MB read") for x in lines
    ), shown
    assert "train: 3 files" in shown

    code, out, err = in_a_pipe([*ENVLOCK, "data", "--deep", str(profile)])
    assert code == 0 and "train: 3 files" in out
    assert "digesting" not in out + err and "fingerprinting" not in out + err
    code, shown = on_a_terminal([*ENVLOCK, "data", "--deep", "--json", str(profile)])
    assert code == 0 and LIVE not in shown and "digesting" not in shown, shown
    assert json.loads(shown)["datasets"]["train"]["files"] == 3


# -- diff --weights --------------------------------------------------------------------------
def weights_file(path: Path, mib: int, last: bytes) -> Path:
    """A safetensors file of one float32 tensor of `mib` MiB, ending with `last`: written
    out, not a sparse file (whose holes envlock refuses to read)."""
    size = mib << 20
    header = json.dumps({"w": {"dtype": "F32", "shape": [size // 4], "data_offsets": [0, size]}})
    text = header.encode() + b" " * (-len(header) % 8)
    block = b"\0" * (1 << 20)
    with open(path, "wb") as handle:
        handle.write(len(text).to_bytes(8, "little") + text)
        for _ in range(mib - 1):
            handle.write(block)
        handle.write(block[: (1 << 20) - len(last)] + last)
    return path


def test_diff_weights_shows_the_megabytes_read_on_a_terminal_only(tmp_path: Path) -> None:
    a = weights_file(tmp_path / "a.safetensors", 96, b"\0\0\0\0")
    b = weights_file(tmp_path / "b.safetensors", 96, b"\0\0\x80\x3f")
    argv = [*ENVLOCK, "diff", "--weights", str(a), str(b)]
    code, shown = on_a_terminal(argv)
    assert code == 1, shown  # they differ
    lines = live_lines(shown)
    for side in (a, b):
        assert f"reading the weights of {side}" in lines, shown
        assert f"reading the weights of {side}: 0 of 96 MB read" in lines, shown

    code, out, err = in_a_pipe(argv)
    assert code == 1 and "reading the weights" not in out + err and "\x1b" not in out + err
    code, shown = on_a_terminal([*ENVLOCK, "diff", "--json", "--weights", str(a), str(b)])
    assert code == 1 and LIVE not in shown and "reading the weights" not in shown, shown
    assert "schema" in json.loads(shown)


# -- adoption's manifest ---------------------------------------------------------------------
def test_adoption_shows_its_manifest_count_on_a_terminal_only(
    tmp_path: Path, wheelhouse: Path
) -> None:
    """The venv adopted is read whole for its manifest (an 800 MB one takes seconds)."""
    shown_runs = []
    for how in ("terminal", "pipe"):
        profile = tmp_path / how / "s.toml"
        profile.parent.mkdir()
        init = [*ENVLOCK, "init", str(profile), "--find-links", str(wheelhouse), "--offline"]
        assert subprocess.run(init, capture_output=True).returncode == 0
        assert subprocess.run([*ENVLOCK, "lock", str(profile)], capture_output=True).returncode == 0
        venv = Path(load_profile(profile).target.venv)
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
        (venv / "mine.bin").write_bytes(b"\1" * (3 << 20))  # no RECORD covers it: read
        argv = [*ENVLOCK, "apply", "--adopt", "-y", str(profile)]
        if how == "terminal":
            code, shown = on_a_terminal(argv)
        else:
            code, out, err = in_a_pipe(argv)
            shown = out + err
        assert code == 0, shown
        shown_runs.append(shown)
    terminal, pipe = shown_runs
    lines = live_lines(terminal)
    assert any(re.fullmatch(r"writing the manifest: 0 of \d+ files, 0 MB read", x) for x in lines)
    assert terminal.index("writing the manifest: 0 of") < terminal.index("moving ")
    assert "writing the manifest:" not in pipe and "\x1b" not in pipe
    assert "writing the manifest of" in pipe  # the step itself is a line of the log
