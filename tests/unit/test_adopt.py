"""The agent's adoption (agent/adopt.py) in-process, in milliseconds: what generation 0
records, where the names end up, each refusal that is not about owners (those are
tests/trust/test_adopt_refusals.py's), and what pyvenv.cfg is read for. The kill at every
step is tests/crash/test_adopt_steps.py's; the CLI's is tests/cli/test_adopt.py's."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from envlock.agent import adopt, core
from envlock.agent.core import AgentError
from tests import mountns

BASE = os.path.realpath(sys.executable)


def make_venv(place: Path, cfg: str | None = None, name: str = "venv") -> Path:
    """A venv as `python -m venv` lays it out, a module of the user's in it."""
    venv = place / name
    (venv / "bin").mkdir(parents=True)
    site = venv / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    if cfg is None:
        cfg = f"home = {os.path.dirname(BASE)}\nversion = 3.11.9\n"
    (venv / "pyvenv.cfg").write_text(cfg)
    for name in ("python", "python3"):
        (venv / "bin" / name).symlink_to(BASE)
    (site / "mod.py").write_text("X = 1\n")
    return venv


def rooted(place: Path) -> Path:
    root = place / "root"
    (root / "generations").mkdir(parents=True)
    return root


def adopted(venv: Path, root: Path, number: int = 0) -> Path:
    adopt.do_adopt({"root": str(root), "venv": str(venv) + "/"}, {"number": number})
    (gen,) = (root / "generations").iterdir()
    return gen


def test_generation_0_is_the_venv_as_it_was_and_its_path_a_link_to_current(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TZ", "Asia/Tokyo")  # nine hours off: `built` is UTC all the same
    time.tzset()
    venv = make_venv(tmp_path, name="venvX")  # a name whose end is no separator to strip
    root = rooted(tmp_path)
    before = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    gen = adopted(venv, root)
    after = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    monkeypatch.delenv("TZ")
    time.tzset()
    manifest = (gen / ".envlock" / "manifest.json").read_bytes()
    assert gen.name == "0-" + hashlib.sha256(manifest).hexdigest()[:12]
    text = (gen / ".envlock" / "generation.json").read_text()
    meta = json.loads(text)
    assert list(meta) == sorted(meta)  # written with sorted keys
    built = meta.pop("built")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", built)
    assert before <= built <= after
    files = json.loads(manifest)
    assert meta == {
        "number": 0,
        "adopted_from": str(venv),
        "lock_sha256": None,
        "files": meta["files"],
        "bytes": meta["bytes"],
        "own_bytes": meta["own_bytes"],
        "python_version": "3.11.9",
    }
    assert meta["files"] >= 2 and meta["bytes"] >= len("X = 1\n") and files
    assert (gen / "lib" / "python3.11" / "site-packages" / "mod.py").read_text() == "X = 1\n"
    assert os.readlink(root / "current") == f"generations/{gen.name}"
    assert os.readlink(venv) == str(root / "current")
    (entry,) = [json.loads(x) for x in (root / "history.jsonl").read_text().splitlines()]
    entry.pop("time")
    assert entry == {"action": "adopt", "from": None, "to": gen.name, "adopted_from": str(venv)}
    said = capsys.readouterr().err
    assert f"envlock-progress: writing the manifest of {venv} as it is" in said
    assert f"moving {venv} to {gen} (one rename" in said


def test_an_adopted_generation_takes_the_number_it_is_given(tmp_path: Path) -> None:
    root = rooted(tmp_path)
    gen = adopted(make_venv(tmp_path), root, number=4)
    assert gen.name.startswith("4-")
    assert json.loads((gen / ".envlock" / "generation.json").read_text())["number"] == 4
    again = make_venv(tmp_path / "again")
    with pytest.raises(AgentError, match="already has a generation 4"):
        adopt.do_adopt({"root": str(root), "venv": str(again)}, {"number": 4})
    assert again.is_dir() and not again.is_symlink()


def test_a_venv_or_an_interpreter_others_may_write_is_untrusted(tmp_path: Path) -> None:
    root = rooted(tmp_path)
    venv = make_venv(tmp_path)
    venv.chmod(0o777)
    said = refusal(venv, root)
    assert said.startswith(f"untrusted: refusing to adopt {venv}: ")
    assert said.endswith(
        "envlock runs the interpreter of what it manages: adopt only a venv that is yours"
    )
    venv.chmod(0o755)
    home = tmp_path / "shared-python"
    home.mkdir()
    home.chmod(0o777)  # not sticky: anyone may replace what is in it
    (venv / "pyvenv.cfg").write_text(f"home = {home}\nversion = 3.11.9\n")
    said = refusal(venv, root)
    assert said.startswith(
        f"untrusted: refusing to adopt {venv}: its interpreter {home} is not yours ("
    )
    assert said.endswith(
        "envlock runs the interpreter of what it manages: rebuild the venv from a "
        "Python you or root own"
    )
    (venv / "pyvenv.cfg").write_text("version = 3.11.9\n")  # no home: the links decide
    (venv / "bin" / "python3").unlink()
    (venv / "bin" / "python3").symlink_to(home / "python3")
    assert f"its interpreter {home / 'python3'} is not yours" in refusal(venv, root)


def refusal(venv: Path, root: Path, number: int = 0) -> str:
    with pytest.raises(AgentError) as raised:
        adopt.refuse_unadoptable(str(venv), str(root), str(root / "generations"), number)
    return f"{raised.value.kind}: {raised.value}"


def test_what_is_no_venv_is_refused_by_name(tmp_path: Path) -> None:
    root = rooted(tmp_path)
    venv = make_venv(tmp_path)
    link = tmp_path / "link"
    link.symlink_to(venv)
    assert refusal(link, root) == (
        f"refused: {link} is already a link (to {venv}): it is managed by envlock, "
        "nothing to adopt; apply without --adopt"
    )
    plain = tmp_path / "file"
    plain.write_text("")
    assert refusal(plain, root) == f"refused: {plain} is not a directory: nothing to adopt"
    assert refusal(tmp_path / "none", root).endswith("is not a directory: nothing to adopt")
    (venv / "pyvenv.cfg").unlink()
    assert refusal(venv, root) == (
        f"refused: {venv} is not a venv (no pyvenv.cfg): envlock adopts only a venv"
    )


def test_a_root_inside_the_venv_or_the_venv_itself_is_refused(tmp_path: Path) -> None:
    venv = make_venv(tmp_path)
    inside = venv / "envroot"
    (inside / "generations").mkdir(parents=True)
    for root in (inside, venv):
        (root / "generations").mkdir(exist_ok=True)
        said = refusal(venv, root)
        assert said == (
            f"refused: the root {root} lies inside {venv}: set [target] root to another path"
        )
    beside = tmp_path / "venv-root"  # a name that starts like the venv's is not inside it
    (beside / "generations").mkdir(parents=True)
    adopt.refuse_unadoptable(str(venv), str(beside), str(beside / "generations"), 0)


def test_a_number_the_root_already_has_is_refused(tmp_path: Path) -> None:
    root = rooted(tmp_path)
    adopted(make_venv(tmp_path / "first"), root)
    venv = make_venv(tmp_path)
    assert refusal(venv, root, 0) == (
        f"refused: the root {root} already has a generation 0: nothing adopted"
    )
    adopt.refuse_unadoptable(str(venv), str(root), str(root / "generations"), 1)


def test_a_sparse_giant_is_refused_and_a_file_at_the_bound_is_not(tmp_path: Path) -> None:
    root = rooted(tmp_path)
    venv = make_venv(tmp_path)
    big = venv / "lib" / "blob"
    with open(big, "wb") as handle:
        handle.truncate(core.SPARSE_FROM)  # at the bound: not "larger than"
    adopt.refuse_unadoptable(str(venv), str(root), str(root / "generations"), 0)
    with open(big, "wb") as handle:
        handle.truncate(core.SPARSE_FROM + 1)
    said = refusal(venv, root)
    assert said == (
        f"refused: refusing to adopt {venv}: {big} is a sparse file "
        f"({core.SPARSE_FROM + 1:,} bytes, 0 on disk), not what a venv holds; "
        "remove it, then adopt again"
    )
    assert core.SPARSE_FROM == 64 << 20
    with open(big, "wb") as handle:  # a MiB written, the rest a hole: what is on disk is said
        handle.write(b"\1" * (1 << 20))
        handle.truncate(core.SPARSE_FROM + 1)
    on_disk = os.stat(big).st_blocks * 512
    assert f"{core.SPARSE_FROM + 1:,} bytes, {on_disk:,} on disk" in refusal(venv, root)
    with open(big, "wb") as handle:  # more than half of it on disk: no sparse file
        handle.write(b"\1" * (core.SPARSE_FROM // 2 + (1 << 20)))
        handle.truncate(core.SPARSE_FROM + 1)
    adopt.refuse_unadoptable(str(venv), str(root), str(root / "generations"), 0)


def test_a_fifo_anywhere_in_the_venv_is_refused_by_its_path(tmp_path: Path) -> None:
    root = rooted(tmp_path)
    venv = make_venv(tmp_path)
    fifo = venv / "lib" / "python3.11" / "site-packages" / "pipe"
    os.mkfifo(fifo)
    said = refusal(venv, root)
    assert said.startswith(f"refused: refusing to adopt {venv}: {fifo} is a FIFO")
    fifo.unlink()
    (venv / "lib" / "sub").mkdir()
    (venv / "lib" / "sub" / "link").symlink_to("/nowhere")  # links and directories pass
    adopt.refuse_unadoptable(str(venv), str(root), str(root / "generations"), 0)


@pytest.mark.parametrize(
    ("cfg", "home", "version"),
    [
        ("home = /usr/bin\nversion = 3.11.9\n", "/usr/bin", "3.11.9"),
        ("HOME=/opt/py/bin\nversion_info = 3.12.1.final.0\n", "/opt/py/bin", "3.12.1.final.0"),
        ("  Home  =  /x  \n  Version = 3.10.4  \n", "/x", "3.10.4"),
        ("home /usr/bin\nversion 3\n", None, None),
        ("home = /opt/a=b\nversion = 3.11=x\n", "/opt/a=b", "3.11=x"),
        ("version = " + "9" * 50 + "\n", None, "9" * 40),
        ("", None, None),
    ],
)
def test_pyvenv_cfg_is_read_for_home_and_version(
    tmp_path: Path, cfg: str, home: str | None, version: str | None
) -> None:
    venv = make_venv(tmp_path, cfg)
    assert adopt.pyvenv_home(str(venv)) == home
    assert adopt.venv_python(str(venv)) == version


def test_an_unreadable_pyvenv_cfg_reads_as_nothing(tmp_path: Path) -> None:
    venv = make_venv(tmp_path)
    (venv / "pyvenv.cfg").unlink()
    os.mkfifo(venv / "pyvenv.cfg")  # a FIFO there never hangs the read
    assert adopt.read_pyvenv(str(venv)) == []
    (venv / "pyvenv.cfg").unlink()
    assert adopt.read_pyvenv(str(venv)) == []
    (venv / "pyvenv.cfg").write_bytes(b"home = /a\xff\nversion = 3.11\n")
    assert adopt.read_pyvenv(str(venv)) == ["home = /a\ufffd", "version = 3.11"]
    line = b"# " + b"x" * 1000 + b"\n"
    body = b"version = 3.11\n" + line * 70
    (venv / "pyvenv.cfg").write_bytes(body[: 64 * 1024])  # at the 64 KiB bound: read
    assert adopt.venv_python(str(venv)) == "3.11"
    (venv / "pyvenv.cfg").write_bytes(body[: 64 * 1024] + b"\n")  # past it: refused
    assert adopt.read_pyvenv(str(venv)) == []


def test_a_root_on_another_file_system_is_refused(tmp_path: Path) -> None:
    venv = make_venv(tmp_path)
    other = tmp_path / "other-fs"
    other.mkdir()
    with mountns.private_mounts(tmp_path / "staging") as private:
        assert private, "the kernel refused a mount namespace (the suite runs as root)"
        subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(other)], check=True)
        root = rooted(other)
        assert refusal(venv, root) == (
            f"refused: {venv} and the root {root} are on different file systems: adoption "
            "moves the venv with one rename (a copy would change it); set [target] root to a "
            "directory on the venv's file system"
        )


def half_written(path: Path, size: int, data: int) -> int:
    """A file of `size` bytes whose first `data` bytes are written, the rest a hole; what
    is on disk (st_blocks * 512)."""
    with open(path, "wb") as handle:
        handle.write(b"\1" * data)
        handle.truncate(size)
    return os.stat(path).st_blocks * 512


def test_sparse_is_less_than_half_on_disk_to_the_byte(tmp_path: Path) -> None:
    root = rooted(tmp_path)
    venv = make_venv(tmp_path)
    half = core.SPARSE_FROM // 2 + 4096  # block-aligned
    size = 2 * half + 1  # odd: exactly half on disk is size // 2, less than size / 2
    blob = venv / "lib" / "blob"
    assert half_written(blob, size, half) == half, "the file system rounds what it allocates"
    adopt.refuse_unadoptable(str(venv), str(root), str(root / "generations"), 0)  # not sparse
    assert half_written(blob, size, half - 4096) == half - 4096
    assert "is a sparse file" in refusal(venv, root)  # a block less than half: sparse
