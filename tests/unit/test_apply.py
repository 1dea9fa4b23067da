"""The agent's apply in-process, on real roots in a temp dir: the root's lock, the plan's
fingerprint compared under it, the handshake, builds renumbered when overtaken, and each
action that needs no uv (switch, hold, link, scripts, cache dir, cleanup, uv's install), with
their refusals. Seconds. Building and re-syncing run uv: test_converge.py and the remote
suites prove them on real environments.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import stat
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from envlock.agent import apply as agent_apply
from envlock.agent import probe as agent_probe
from envlock.agent.apply import (
    ACTIONS,
    LOCKED,
    RootLock,
    apply,
    do_cache_dir,
    do_install_uv,
    do_link_venv,
    do_scripts,
    do_switch,
    number_builds,
    refuse_pth,
    run_step,
    sh_quote,
    sync_argv,
    unshared_bytes,
    uv_env,
    write_pip_shims,
)
from envlock.agent.core import GENERATION, HOLD, AgentError, root_fingerprint

A, B = "1-" + "a" * 12, "2-" + "b" * 12
SITE = "lib/python3.11/site-packages"


def make_root(tmp_path: Path, *names: str, incomplete: tuple[str, ...] = ()) -> Path:
    root = tmp_path / "root"
    for name in (*names, *incomplete):
        gen = root / "generations" / name
        (gen / ".envlock").mkdir(parents=True)
        (gen / "bin").mkdir()
        if name not in incomplete:
            (gen / GENERATION).write_text(json.dumps({"number": int(name.split("-")[0])}))
    (root / "generations").mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o755)
    return root


def history(root: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (root / "history.jsonl").read_text().splitlines()]


def request(root: Path, *actions: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"root": str(root), "wait": False, "actions": list(actions), **more}


def switch(name: str, why: str = "apply") -> dict[str, Any]:
    return {"kind": "switch", "description": f"switch to {name}", "name": name, "why": why}


# -- the whole apply ------------------------------------------------------------------------
def test_apply_carries_out_the_actions_and_says_what_it_did(tmp_path: Path) -> None:
    root = make_root(tmp_path, A, B)
    venv = tmp_path / "env" / "venv"
    agent_apply.FREED.clear()
    answer = apply(
        request(
            root,
            switch(A),
            {"kind": "link-venv", "description": "link"},
            {"kind": "cleanup", "description": "clean", "names": [B]},
            venv=str(venv),
        )
    )
    assert answer["done"] == ["switch", "link-venv", "cleanup"]
    # Each action's own time, in seconds to the microsecond (ms here, under a loaded machine).
    assert len(answer["seconds"]) == 3
    assert all(isinstance(s, float) and 0 <= s < 5 for s in answer["seconds"])
    # What removing B gave back: its one file (generation.json), linked nowhere else.
    assert answer["current"] == A and answer["freed"] == len(json.dumps({"number": 2}))
    assert os.readlink(root / "current") == f"generations/{A}"
    assert os.readlink(venv) == f"{root}/current"
    assert not (root / "generations" / B).exists()
    assert history(root)[0]["to"] == A and history(root)[0]["from"] is None
    # The lock file says who holds it (for whoever waits).
    assert (root / ".envlock.lock").read_text().startswith(f"pid {os.getpid()} on ")


def test_a_plan_overtaken_before_the_lock_is_planned_again(tmp_path: Path) -> None:
    root = make_root(tmp_path, A, B)
    assumed = {"current": None, "fingerprint": root_fingerprint(str(root))}
    (root / "current").symlink_to(f"generations/{B}")  # another apply switched meanwhile
    answer = apply(request(root, switch(A), assumed=assumed))
    assert answer == {"replan": True, "done": [], "current": B}
    assert os.readlink(root / "current") == f"generations/{B}"
    assumed = {"current": B, "fingerprint": root_fingerprint(str(root))}
    assert apply(request(root, switch(A), assumed=assumed))["current"] == A


def test_the_handshake_waits_for_the_controller_s_word(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = make_root(tmp_path, A, B)
    monkeypatch.setattr(sys, "stdin", io.StringIO("abort\n"))
    answer = apply(request(root, switch(A), handshake=True))
    assert answer == {"aborted": True, "done": [], "current": None}
    assert capsys.readouterr().err.splitlines()[-1] == LOCKED + "ready"
    assert not (root / "current").exists()
    monkeypatch.setattr(sys, "stdin", io.StringIO("no go\n"))
    assert apply(request(root, switch(A), handshake=True))["aborted"] is True
    monkeypatch.setattr(sys, "stdin", io.StringIO(" go \n"))
    assert apply(request(root, switch(A), handshake=True))["current"] == A


def test_a_probe_that_saw_the_lock_held_says_busy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An apply that switches and lets go of the lock while a probe reads the root: the
    probe read `current` after or before the switch, it cannot tell, so it says busy and its
    caller asks again (an interrupted remote apply's note said "untouched" of a root its
    agent then had switched)."""
    root = make_root(tmp_path, A)
    holder = RootLock(str(root), wait=False).__enter__()
    read_current = agent_probe.current_generation

    def finished_meanwhile(where: str) -> str | None:
        if holder.fd >= 0:  # the apply lets go while the probe reads
            holder.__exit__(None, None, None)
            holder.fd = -1
        return read_current(where)

    monkeypatch.setattr(agent_probe, "current_generation", finished_meanwhile)
    assert agent_probe.probe({"root": str(root)})["busy"] is not None
    assert agent_probe.probe({"root": str(root)})["busy"] is None  # asked again: settled


def test_one_operation_per_root_at_a_time(tmp_path: Path) -> None:
    root = make_root(tmp_path, A)
    with RootLock(str(root), wait=False):
        with pytest.raises(AgentError, match=r"another envlock operation holds .*\(pid ") as info:
            apply(request(root, switch(A)))
        assert info.value.kind == "busy"
        # Whatever the holder left there is said, undecodable bytes included.
        (root / ".envlock.lock").write_bytes(b"pid 1 on \xff")
        with pytest.raises(AgentError) as info:
            apply(request(root, switch(A)))
        assert str(info.value) == (
            f"another envlock operation holds {root}/.envlock.lock (pid 1 on \ufffd)"
        )
        (root / ".envlock.lock").write_bytes(b"")  # a holder that wrote nothing yet
        with pytest.raises(AgentError, match=r"\.envlock\.lock \(unknown\)$"):
            apply(request(root, switch(A)))
    (root / ".envlock.lock").unlink()
    (root / ".envlock.lock").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OSError):  # never through a link: it would be truncated
        RootLock(str(root), wait=False).__enter__()
    assert not (tmp_path / "elsewhere").exists()


def test_a_root_another_user_may_write_is_refused_before_anything_is_made(
    tmp_path: Path,
) -> None:
    root = tmp_path / "shared"
    root.mkdir(mode=0o777)
    os.chmod(root, 0o777)
    with pytest.raises(AgentError, match=f"^refusing the root {root}: "):
        apply(request(root, switch(A)))
    assert not (root / "generations").exists()
    # Made by this apply under a umask that lets others write it: refused all the same.
    fresh = tmp_path / "fresh"
    old = os.umask(0)
    try:
        with pytest.raises(AgentError, match=f"^refusing the root {fresh}: "):
            apply(request(fresh, switch(A)))
    finally:
        os.umask(old)


def test_builds_are_renumbered_when_another_apply_took_their_number(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = make_root(tmp_path, A)
    other = "1-" + "c" * 12
    actions: list[dict[str, Any]] = [
        {"kind": "build", "number": 1, "name": other},
        {"kind": "cache-dir", "generation": other},
        {"kind": "switch", "name": other},
        {"kind": "switch", "name": A},
    ]
    number_builds(str(root), actions)
    new = "2-" + "c" * 12
    said = capsys.readouterr().err
    assert (
        said == f"envlock-progress: generation {other} was taken by another apply: building {new}\n"
    )
    assert actions[0] == {"kind": "build", "number": 2, "name": new}
    assert actions[1]["generation"] == new and actions[2]["name"] == new
    assert actions[3]["name"] == A
    # A number that is free, or the very generation, is kept.
    same = [{"kind": "build", "number": 1, "name": A}, {"kind": "build", "number": 5, "name": B}]
    number_builds(str(root), same)
    assert [(a["number"], a["name"]) for a in same] == [(1, A), (5, B)]
    # A build after another action (a cleanup first) is renumbered too.
    later: list[dict[str, Any]] = [
        {"kind": "cleanup", "names": []},
        {"kind": "build", "number": 1, "name": other},
    ]
    number_builds(str(root), later)
    assert (later[1]["number"], later[1]["name"]) == (2, new)


# -- each action ------------------------------------------------------------------------------
def test_a_switch_refuses_an_incomplete_generation_and_holds_or_releases(tmp_path: Path) -> None:
    root = make_root(tmp_path, A, B, incomplete=("3-" + "d" * 12,))
    req = {"root": str(root)}
    with pytest.raises(AgentError) as info:
        do_switch(req, switch("3-" + "d" * 12))
    assert str(info.value) == f"generation 3-{'d' * 12} is not complete; refusing to switch to it"
    assert info.value.kind == "state"
    do_switch(req, switch(A))
    do_switch(req, switch(B, "rollback"))
    hold = json.loads((root / HOLD).read_text())
    assert (hold["generation"], hold["from"], hold["why"]) == (B, A, "rollback")
    do_switch(req, switch(A, "snapshot"))
    assert json.loads((root / HOLD).read_text())["why"] == "snapshot"
    do_switch(req, switch(A))
    assert not (root / HOLD).exists()
    assert [(h["action"], h["from"], h["to"]) for h in history(root)] == [
        ("apply", None, A),
        ("rollback", A, B),
        ("snapshot", B, A),
        ("apply", A, A),
    ]
    do_switch(req, {"kind": "switch", "name": B})
    assert history(root)[-1]["action"] == "switch"


def test_a_hold_is_written_or_ended(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = make_root(tmp_path, A)
    req = {"root": str(root)}
    ACTIONS["hold"](req, {"name": A, "held": False})  # nothing held: nothing to end
    monkeypatch.setenv("TZ", "UTC-9")  # the target's local time is never written
    time.tzset()
    try:
        ACTIONS["hold"](req, {"name": A, "held": True})
    finally:
        monkeypatch.undo()
        time.tzset()
    hold = json.loads((root / HOLD).read_text())
    assert (hold["generation"], hold["from"], hold["why"]) == (A, None, "snapshot")
    since = datetime.strptime(hold["time"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert abs(datetime.now(UTC) - since) < timedelta(minutes=5)  # since when, in UTC
    assert (root / HOLD).read_text() == json.dumps(hold, sort_keys=True)  # stable bytes
    ACTIONS["hold"](req, {"name": A, "held": False})
    assert not (root / HOLD).exists()


def test_the_venv_link_never_replaces_a_real_directory(tmp_path: Path) -> None:
    root = make_root(tmp_path, A)
    venv = tmp_path / "venv"
    venv.mkdir()
    with pytest.raises(AgentError) as info:
        do_link_venv({"root": str(root), "venv": str(venv) + "/"}, {})
    assert info.value.kind == "state"
    assert str(info.value) == (
        f"{venv}/ exists and is not a symlink; envlock will not replace a real directory or "
        "file (`envlock apply --adopt` keeps a venv there as generation 0)"
    )
    venv.rmdir()
    venv.symlink_to("/old")
    do_link_venv({"root": str(root), "venv": str(venv)}, {})
    assert os.readlink(venv) == f"{root}/current"


def test_scripts_are_written_only_as_pinned(tmp_path: Path) -> None:
    data = b"print('train')\n"
    sha = hashlib.sha256(data).hexdigest()
    item = {"data": base64.b64encode(data).decode(), "sha256": sha, "mode": 0o750}
    do_scripts({}, {"dest": str(tmp_path / "w"), "files": {"sub/t.py": item}})
    path = tmp_path / "w" / "sub" / "t.py"
    assert path.read_bytes() == data and stat.S_IMODE(path.stat().st_mode) == 0o750
    del item["mode"]
    do_scripts({}, {"dest": str(tmp_path / "w"), "files": {"u.py": item}})
    assert stat.S_IMODE((tmp_path / "w" / "u.py").stat().st_mode) == 0o644
    bad = {**item, "sha256": "0" * 64}
    with pytest.raises(AgentError, match=r"script v\.py arrived corrupted") as info:
        do_scripts({}, {"dest": str(tmp_path / "w"), "files": {"v.py": bad}})
    assert info.value.kind == "integrity" and not (tmp_path / "w" / "v.py").exists()


def test_the_cache_dir_of_a_torch_build_is_made_in_a_trusted_place(tmp_path: Path) -> None:
    root = make_root(tmp_path, A)
    site = root / "generations" / A / SITE
    info = site / "torch-2.11.0+cpu.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Name: torch\nVersion: 2.11.0+cpu\n")
    cache = tmp_path / "cache"
    do_cache_dir({"root": str(root), "cache_dir": str(cache)}, {"generation": A})
    (made,) = cache.iterdir()
    assert made.name.startswith("torch-2.11.0+cpu-")
    assert sorted(p.name for p in made.iterdir()) == ["inductor", "triton"]
    (made / "inductor" / "kept").write_text("warm")  # made again: what is there stays
    do_cache_dir({"root": str(root), "cache_dir": str(cache)}, {"generation": A})
    assert (made / "inductor" / "kept").read_text() == "warm"
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    with pytest.raises(AgentError, match=f"^refusing the compile-cache dir {shared}: "):
        do_cache_dir({"root": str(root), "cache_dir": str(shared)}, {"generation": A})
    (info / "METADATA").write_text("Name: numpy\nVersion: 2\n")  # no torch: no cache dir
    do_cache_dir({"root": str(root), "cache_dir": str(shared)}, {"generation": A})


def test_cleanup_removes_only_inactive_generations_and_counts_what_it_frees(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    c = "3-" + "c" * 12
    root = make_root(tmp_path, A, B, c)
    (root / "current").symlink_to(f"generations/{A}")
    (root / "generations" / B / "own").write_bytes(b"x" * 100)
    (root / "generations" / B / "shared").write_bytes(b"y" * 1000)
    os.link(root / "generations" / B / "shared", tmp_path / "cache-copy")
    (root / "generations" / "not-a-generation").mkdir()
    agent_apply.FREED.clear()
    names = [A, B, c, "not-a-generation", "9-" + "e" * 12]
    ACTIONS["cleanup"]({"root": str(root)}, {"names": names})
    assert sorted(p.name for p in (root / "generations").iterdir()) == [A, "not-a-generation"]
    said = capsys.readouterr().err
    assert f"removing generation {B}" in said and f"removing generation {c}" in said
    # Their own files and generation.json; the hardlinked file stays with its other link.
    freed = agent_apply.FREED
    assert freed == [100 + len(json.dumps({"number": 2})) + len(json.dumps({"number": 3}))]
    assert unshared_bytes(str(tmp_path / "none")) == 0


def test_uv_is_installed_only_with_its_hash(tmp_path: Path) -> None:
    data = b"#!/bin/sh\necho uv\n"
    sha = hashlib.sha256(data).hexdigest()
    tmp, final = tmp_path / "uv.upload", tmp_path / "uv"
    tmp.write_bytes(data)
    action = {"tmp": str(tmp), "path": str(final), "sha256": "0" * 64, "version": "0.13.0"}
    with pytest.raises(AgentError) as info:
        do_install_uv({}, action)
    assert str(info.value) == "the uploaded uv binary does not match its sha256"
    assert info.value.kind == "integrity" and not tmp.exists() and not final.exists()
    # An upload swapped for a link is never followed: the file it names is not installed.
    planted = tmp_path / "planted"
    planted.write_bytes(data)
    tmp.symlink_to(planted)
    with pytest.raises(OSError):
        do_install_uv({}, {**action, "sha256": sha})
    assert not final.exists() and tmp.is_symlink()
    tmp.unlink()
    tmp.write_bytes(data)
    os.chmod(tmp, 0o600)
    do_install_uv({}, {**action, "sha256": sha})
    assert final.read_bytes() == data and stat.S_IMODE(final.stat().st_mode) == 0o755
    text = (tmp_path / "uv.json").read_text()
    record = json.loads(text)
    assert text == json.dumps(record, sort_keys=True)  # stable bytes: keys in order
    st = final.stat()
    assert record == {
        "version": "0.13.0",
        "sha256": sha,
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
    }


# -- the install's command line and the pip shim ----------------------------------------------
def test_uv_s_environment_and_sync_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VIRTUAL_ENV", "/somewhere")
    env = uv_env({"uv_env": {"UV_INDEX_X_PASSWORD": "p"}, "python_downloads": True})
    assert env["UV_INDEX_X_PASSWORD"] == "p" and "VIRTUAL_ENV" not in env
    assert "UV_OFFLINE" not in env and "UV_PYTHON_DOWNLOADS" not in env
    env = uv_env({"offline": True, "python_downloads": True})
    assert env["UV_OFFLINE"] == "1" and env["UV_PYTHON_DOWNLOADS"] == "never"
    assert uv_env({})["UV_PYTHON_DOWNLOADS"] == "never"
    argv = sync_argv({"uv": "/u"}, "/g", ["--x"])
    assert argv == [
        "/u",
        "pip",
        "sync",
        "/g/.envlock/pylock.toml",
        "--python",
        "/g/bin/python",
        "--quiet",
        "--no-build",
        "--x",
    ]
    argv = sync_argv({"uv": "/u", "build": ["a"], "binary_only": ["b", "c"]}, "/g")
    assert argv[-5:] == ["--quiet", "--only-binary", "b", "--only-binary", "c"]


def test_a_failed_step_says_what_failed_with_its_words() -> None:
    with pytest.raises(AgentError, match=r"uv sync failed \(exit 3\): sh -c") as info:
        run_step(["sh", "-c", "echo oops >&2; exit 3"], None, "uv sync")
    assert info.value.kind == "command" and str(info.value).endswith("\noops")
    with pytest.raises(AgentError, match=r"^false failed \(exit 1\)"):
        run_step(["false"])
    assert run_step(["true"]).returncode == 0


def test_the_pip_shim_is_written_unless_a_real_pip_is_there(tmp_path: Path) -> None:
    gen = tmp_path / "gen"
    (gen / "bin").mkdir(parents=True)
    (gen / "bin" / "pip3").write_text("a real pip")
    uv, root = tmp_path / "uv", tmp_path / "r o"  # the shim runs the root's own uv
    uv.write_text("#!/bin/sh\n")
    uv.chmod(0o755)
    req = {"uv": str(uv), "root": str(root)}
    write_pip_shims({**req, "profile": "it's.toml"}, str(gen), 7)
    shim = (gen / "bin" / "pip").read_text()
    assert stat.S_IMODE((gen / "bin" / "pip").stat().st_mode) == 0o755
    assert (gen / "bin" / "pip3").read_text() == "a real pip"
    assert (root / "bin" / "uv").read_text() == "#!/bin/sh\n"
    assert f"uv='{root}/bin/uv'\n" in shim and f"python='{gen}/bin/python'\n" in shim
    assert "(profile it'\\''s.toml, generation 7)" in shim
    assert "`envlock add it'\\''s.toml REQ…`" in shim
    assert sh_quote("a'b") == "'a'\\''b'"
    write_pip_shims(req, str(gen), 1)
    assert "profile PROFILE" not in (gen / "bin" / "pip").read_text()  # never rewritten
    (gen / "bin" / "pip").unlink()
    (gen / "bin" / "pip3").unlink()
    write_pip_shims(req, str(gen), 1)
    assert "(profile PROFILE, generation 1)" in (gen / "bin" / "pip").read_text()
    assert (gen / "bin" / "pip3").read_text() == (gen / "bin" / "pip").read_text()
    # What `pip install` says, whole, from the shim itself.
    said = subprocess.run([gen / "bin" / "pip", "install", "x"], capture_output=True, text=True)
    assert said.returncode == 1 and said.stderr == (
        "this environment is managed by envlock (profile PROFILE, generation 1). To add "
        "packages: `envlock add PROFILE REQ…` — it shows what would change and keeps the "
        "current generation for rollback. To install anyway (check will report drift): "
        "`ENVLOCK_ALLOW_PIP=1 pip install …`\n"
    )


def test_startup_code_from_a_stranger_s_lock_is_refused(tmp_path: Path) -> None:
    gen = tmp_path / "gen"
    (gen / "bin").mkdir(parents=True)
    (gen / "pyvenv.cfg").write_text("home = /usr/bin\n")
    site = gen / SITE
    for dist, files in (("Evil_Pkg", ["evil.pth", "sitecustomize.py"]), ("good", ["good.pth"])):
        info = site / f"{dist}-1.0.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Name: {dist}\nVersion: 1.0\n")
        rows = [f"{f},," for f in files] + [f"{info.name}/METADATA,,"]
        (info / "RECORD").write_text("\n".join(rows) + "\n")
        for f in files:
            (site / f).write_text("import os\n")
    (site / "uv-own.pth").write_text("")  # no RECORD lists it: the venv's own
    refuse_pth({"pth_allowed": None}, str(gen))
    refuse_pth({"pth_allowed": ["evil-pkg", "good"]}, str(gen))
    with pytest.raises(AgentError) as info:
        refuse_pth({"pth_allowed": ["good"]}, str(gen))
    assert info.value.kind == "refused"
    assert "runs: evil-pkg (evil.pth, sitecustomize.py);" in str(info.value)
    assert str(info.value).endswith("apply again with --allow-pth evil-pkg")
    assert "good" not in str(info.value).split("runs: ")[1].split(";")[0]
    # Several at once: each named, each with its flag.
    with pytest.raises(AgentError) as info:
        refuse_pth({"pth_allowed": []}, str(gen))
    assert str(info.value) == (
        "the snapshot's lock installs startup code (.pth, sitecustomize.py), which every "
        "Python of the environment runs: evil-pkg (evil.pth, sitecustomize.py), good "
        "(good.pth); the generation was removed, nothing ran. If you trust them, apply again "
        "with --allow-pth evil-pkg --allow-pth good"
    )


def test_apply_waits_for_the_root_s_lock_by_default_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = make_root(tmp_path, A)
    held = RootLock(str(root), wait=False).__enter__()
    release = threading.Timer(0.3, held.__exit__)
    release.start()
    req = request(root, switch(A))
    del req["wait"]
    assert apply(req)["current"] == A
    release.join()
    err = capsys.readouterr().err
    assert f"waiting for another envlock operation on this root (pid {os.getpid()} on " in err
    assert "envlock-progress: switch to " + A in err
    assert stat.S_IMODE((root / ".envlock.lock").stat().st_mode) == 0o644


def test_a_replan_is_said_and_a_fresh_root_gets_its_generations_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "fresh"
    assumed = {"current": None, "fingerprint": "stale"}
    assert apply(request(root, assumed=assumed))["replan"] is True
    assert (root / "generations").is_dir()
    assert capsys.readouterr().err == (
        "envlock-progress: the root changed since this plan was made: planning again\n"
    )


def test_two_uploads_of_uv_at_once_never_share_a_file(tmp_path: Path) -> None:
    """Two applies that both find no uv (two at once in a new container) each upload to a
    file of their own beside the final one: neither removes nor overwrites the other's
    before its agent checks the hash and moves it into place."""
    from envlock.reconcile.execute import upload_uv
    from envlock.targets.local import LocalTransport

    final = tmp_path / "bin" / "uv"
    actions = [{"path": str(final), "version": "0.13.9"} for _ in range(2)]
    for action in actions:
        upload_uv(LocalTransport(), action, None)
    first, second = (Path(a["tmp"]) for a in actions)
    assert first != second and first.parent == second.parent == final.parent
    assert first.read_bytes() == second.read_bytes() != b""
    for action in actions:
        do_install_uv({}, action)
    assert final.exists() and sorted(p.name for p in final.parent.iterdir()) == ["uv", "uv.json"]
