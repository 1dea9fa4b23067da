"""`run`'s launch (runs/launch.py) and the one-call run (runs/one_call.py), in seconds.

Driven through the scripted transport (tests/scripted.py): every command a test did not
expect raises; the ones it lets through run for real on this machine (`locally`,
`spawn_here`): the launcher script as sent, the agent's `run` from this checkout's modules
(as the other unit files run the agent in-process; it becomes the command, so in a process
of its own), `sh`, `kill`. So each test pins what argv goes where (the environment's values
on stdin, never in an argv), the env file's modes, the exit status and signals passed
through, the state handed back when it was not the one judged, and a stopped container
told from the command's own status. test_run_contract.py and test_run_one_call.py prove
the same over real sshd and LXC containers, with the agent shipped."""

from __future__ import annotations

import hashlib
import io
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import envlock
from envlock.agent import launch as agent_launch
from envlock.base.pythons import own_python
from envlock.base.usercache import write_entry
from envlock.errors import EXIT_USAGE, OperationError
from envlock.runs import launch
from envlock.runs.launch import (
    FORWARD_BY_PID_FILE,
    FORWARDED,
    KILLED,
    Forwarder,
    ended,
    exec_local,
    refused_exit,
    remote_spec,
    run_remote,
    spec_of,
    write_private,
)
from envlock.runs.one_call import (
    Changed,
    Failed,
    Started,
    Stopped,
    call_run,
    read_answer,
    remember,
    remembered,
    state_digest,
)
from envlock.targets.base import Result
from tests.scripted import Call, ScriptedTransport, Unscripted, locally, spawn_locally

SECRET = "s3cr3t-value-42"


# -- helpers --------------------------------------------------------------------------------
def through(*allowed: str, seen: list[Call] | None = None) -> Callable[[Call], Result]:
    """A handler that runs commands whose argv[0] is allowed for real; anything else raises."""

    def handle(call: Call) -> Result:
        if call.argv[0] not in allowed:
            raise Unscripted(f"unscripted command: {call.argv!r}")
        if seen is not None:
            seen.append(call)
        return locally(call)

    return handle


# The agent's `run` from this checkout's modules (imported, as the unit files run the agent
# in-process), in a process of its own since it becomes the command. Shipped, the agent is
# the same modules (agentcall.py packs them; test_run_one_call.py runs them shipped).
AGENT_MAIN = "import sys; from envlock.agent import core, launch; sys.exit(core.main())"
SOURCE = os.path.dirname(os.path.dirname(os.path.abspath(envlock.__file__)))


def defaults() -> None:
    # As sshd starts a login's command: the signals envlock forwards at their defaults, even
    # where this process ignores them (mutmut's workers do; an ignored signal stays ignored
    # across exec, and a shell cannot trap it).
    for sig in FORWARDED:
        signal.signal(sig, signal.SIG_DFL)


def spawn_here(call: Call, piped: bool) -> subprocess.Popen[bytes]:
    """The launcher as sent; the agent's `run` as this checkout's modules."""
    pipe = subprocess.PIPE if piped else None
    argv, env = list(call.argv), None
    if call.agent is not None:
        assert call.agent == "run" and piped, call.argv[:8]
        argv = [sys.executable, "-c", AGENT_MAIN, "run"]
        env = {**os.environ, "PYTHONPATH": SOURCE}
    proc = subprocess.Popen(
        argv, stdin=pipe, stdout=pipe, stderr=pipe, env=env, cwd="/", preexec_fn=defaults
    )
    watchdog(proc)
    return proc


def watchdog(proc: subprocess.Popen[bytes], seconds: float = 15) -> None:
    """Kill what a test started if it still runs after `seconds`: a broken dialogue (a
    request never flushed, a stdin never fed) then fails its test, it does not hang it."""
    timer = threading.Timer(seconds, lambda: proc.poll() is None and proc.kill())
    timer.daemon = True
    timer.start()


def real(handler: Callable[[Call], Result] | None = None, name: str = "box") -> ScriptedTransport:
    """A transport whose `sh`/`rm` commands, launcher and agent run on this machine."""
    return ScriptedTransport(
        handler or through("sh", "rm"), name=name, python=sys.executable, spawner=spawn_here
    )


def argv_text(transport: ScriptedTransport) -> str:
    return "\n".join(" ".join(call.argv) for call in transport.calls)


@pytest.fixture
def streams(capfd: pytest.CaptureFixture[str]) -> Callable[[], tuple[str, str]]:
    """What reached our stdout and stderr descriptors since the last look (a relay's)."""

    def read() -> tuple[str, str]:
        out, err = capfd.readouterr()
        return out, err

    return read


@contextmanager
def stdin_of(data: bytes) -> Iterator[None]:
    """Our descriptor 0 reads `data`, then its end (what a command's stdin gets)."""
    read, write = os.pipe()
    os.write(write, data)
    os.close(write)
    saved = os.dup(0)
    os.dup2(read, 0)
    os.close(read)
    try:
        yield
    finally:
        os.dup2(saved, 0)
        os.close(saved)


@contextmanager
def open_stdin() -> Iterator[None]:
    """Our descriptor 0 a pipe that stays open (a scheduler's stdin) until the block ends."""
    read, write = os.pipe()
    saved = os.dup(0)
    os.dup2(read, 0)
    os.close(read)
    try:
        yield
    finally:
        os.close(write)  # its end: a reader still waiting on it returns
        os.dup2(saved, 0)
        os.close(saved)


def in_child(work: Callable[[], None]) -> tuple[int, str, str]:
    """Run `work` in a forked child with its stdout/stderr on pipes: (status, out, err)."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 70
        try:
            os.dup2(out_w, 1)
            os.dup2(err_w, 2)
            sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
            sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
            work()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 71
        except BaseException:
            code = 72
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    os.close(out_w)
    os.close(err_w)
    with os.fdopen(out_r, "rb") as out, os.fdopen(err_r, "rb") as err:
        stdout, stderr = out.read(), err.read()
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), stdout.decode(), stderr.decode()


def signal_when(marker: Path, signum: int) -> threading.Thread:
    """Send `signum` to this process once the command created `marker` (it is running)
    and envlock forwards the signal."""

    def send() -> None:
        # Once envlock forwards it too: before that, a signal is envlock's own (its default).
        # Never unforwarded: the default would end pytest itself (the command then ends
        # on its own, with a status no signal gives).
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if marker.exists() and isinstance(signal.getsignal(signum), Forwarder):
                os.kill(os.getpid(), signum)
                return
            time.sleep(0.01)

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


# A command that says it started (its marker), then exits by the forwarded signal it gets
# (INT 42, HUP 41, TERM 55), or 99 after five seconds or more without one.
TRAPPING = (
    "trap 'exit 42' INT; trap 'exit 41' HUP; trap 'exit 55' TERM; "
    ': > "$1"; i=0; while [ $i -lt 250 ]; do sleep 0.02; i=$((i+1)); done; exit 99'
)
TRAPPED: dict[int, int] = {signal.SIGINT: 42, signal.SIGHUP: 41, signal.SIGTERM: 55}


# -- the env file's content -------------------------------------------------------------------
def test_the_spec_sets_everything_but_path_which_the_target_composes() -> None:
    env = {"PATH": "/gen/bin:/usr/bin", "VIRTUAL_ENV": "/gen", "TOKEN": SECRET}
    spec = spec_of(env, "/gen/bin", ("PYTHONHOME", "PYTHONPATH"), "/opt/bin")
    assert spec == {
        "set": {"VIRTUAL_ENV": "/gen", "TOKEN": SECRET},
        "unset": ["PYTHONHOME", "PYTHONPATH"],
        "path": "/gen/bin",
        "tail": "/opt/bin",
    }
    assert spec_of(env, "/gen/bin", ())["tail"] is None  # the target's own PATH follows
    assert json.loads(remote_spec(env, "/gen/bin", ("X",), "/opt/bin")) == {
        **spec,
        "unset": ["X"],
    }
    assert json.loads(remote_spec(env, "/gen/bin", ()))["tail"] is None


# -- the refusal's status ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "code"),
    [
        (None, 1),
        ("1", 1),
        ("3", 3),
        ("255", 255),
        ("0", EXIT_USAGE),
        ("256", EXIT_USAGE),
        ("-4", EXIT_USAGE),
        ("x", EXIT_USAGE),
    ],
)
def test_the_refused_run_s_status_is_the_variable_s_when_it_is_a_status(
    monkeypatch: pytest.MonkeyPatch, value: str | None, code: int
) -> None:
    if value is None:
        monkeypatch.delenv("ENVLOCK_RUN_REFUSED_EXIT", raising=False)
    else:
        monkeypatch.setenv("ENVLOCK_RUN_REFUSED_EXIT", value)
    assert refused_exit() == code


# -- a stopped container, told from the command's status -----------------------------------------
class Box(ScriptedTransport):
    """A container's transport: `stopped_while` words the error when it stopped."""

    def __init__(self, stopped: bool, handler: Callable[[Call], Result] | None = None) -> None:
        super().__init__(handler or through("sh", "rm"), name="ct 101", python=sys.executable)
        self.spawner = spawn_here
        self.stopped = stopped
        self.asked: list[str] = []

    def stopped_while(self, what: str) -> OperationError | None:
        self.asked.append(what)
        return OperationError(f"ct 101 stopped while {what}") if self.stopped else None


def test_a_status_below_128_is_the_command_s_own_and_no_one_is_asked() -> None:
    box = Box(stopped=True)
    assert [ended(box, code) for code in (0, 1, 127)] == [0, 1, 127]
    assert box.asked == [] and KILLED == 128


def test_a_killed_command_s_status_asks_whether_its_container_stopped() -> None:
    box = Box(stopped=True)
    with pytest.raises(OperationError, match=r"^ct 101 stopped while the command ran$"):
        ended(box, KILLED)
    with pytest.raises(OperationError, match=r"while the command ran \(its status: 255\)$"):
        ended(box, 255)
    assert box.asked == ["the command ran", "the command ran (its status: 255)"]
    running = Box(stopped=False)
    assert ended(running, 137) == 137 and running.asked == ["the command ran (its status: 137)"]
    assert ended(real(), 137) == 137  # a transport without a container: the status as it is


# -- the 0600 env file --------------------------------------------------------------------------
def test_the_env_file_is_private_and_its_bytes_travel_on_stdin(tmp_path: Path) -> None:
    seen: list[Call] = []
    transport = real(through("sh", seen=seen))
    run_dir = tmp_path / "root" / "run"
    path = run_dir / "t.env"
    write_private(transport, str(run_dir), str(path), SECRET.encode())
    assert path.read_bytes() == SECRET.encode()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700
    (call,) = seen
    assert call.stdin == SECRET.encode() and SECRET not in " ".join(call.argv)
    assert call.argv[-2:] == (str(run_dir), str(path))  # data, never in the script


def test_the_env_file_is_never_written_over_nor_through_a_link(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    planted = run_dir / "t.env"
    planted.write_text("planted")
    aim = tmp_path / "aim"
    (run_dir / "l.env").symlink_to(aim)
    transport = real(through("sh"), name="box")
    for path in (planted, run_dir / "l.env"):
        with pytest.raises(OperationError) as info:
            write_private(transport, str(run_dir), str(path), b"x")
        assert str(info.value).startswith(
            f"box: could not write the command's environment to {path}: "
        )
        assert f"{path}: sh: " in str(info.value)  # the shell's own words, named as sh
    assert planted.read_text() == "planted" and not aim.exists()


def test_a_failed_write_without_words_says_its_status(tmp_path: Path) -> None:
    def silent(call: Call) -> Result:
        return Result(call.argv, 3, b"", b"")

    with pytest.raises(OperationError, match=r"^x: could not write .* to /r/run/t\.env: exit 3$"):
        write_private(ScriptedTransport(silent, name="x"), "/r/run", "/r/run/t.env", b"")


# -- run_remote: the launcher on the target ----------------------------------------------------
def launch_on(
    tmp_path: Path, transport: ScriptedTransport, script: str, *args: str, tail: str | None = None
) -> int:
    env = {"PATH": "ignored", "TOKEN": SECRET, "VIRTUAL_ENV": "/gen"}
    spec = remote_spec(env, "/gen/bin", ("ENVLOCK_UNIT_LEAK",), tail)
    return run_remote(
        transport, str(tmp_path / "root"), ["/bin/sh", "-c", script, "sh", *args], spec
    )


def test_a_remote_command_gets_its_environment_and_its_status_comes_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ENVLOCK_UNIT_LEAK", "leaked")
    monkeypatch.setenv("HOME", str(tmp_path))
    transport = real()
    run_dir = tmp_path / "root" / "run"
    script = (
        'printf "%s|%s|%s|%s|" "$TOKEN" "$PATH" "${ENVLOCK_UNIT_LEAK-unset}" "$PWD"; '
        '/bin/ls -A "$1"; exit 5'
    )
    code = launch_on(tmp_path, transport, script, str(run_dir), tail="/opt/bin")
    out = capfd.readouterr().out
    token, path, leak, cwd, listing = out.split("|")
    assert code == 5
    assert (token, path, leak, cwd) == (SECRET, "/gen/bin:/opt/bin", "unset", str(tmp_path))
    # The env file was read and deleted before the command started; its .pid is there.
    (pid_file,) = listing.split()
    assert pid_file.endswith(".pid") and len(pid_file) == len("0123456789abcdef.pid")
    assert list(run_dir.iterdir()) == []  # both removed after it ended
    write, spawned, remove = transport.calls
    assert write.argv[:2] == ("sh", "-c") and write.stdin.startswith(b'{"set": ')
    env_file = write.argv[-1]
    assert env_file == f"{run_dir}/{pid_file[:-4]}.env"
    # The launcher: the environment's own interpreter when the root may be trusted.
    assert spawned.root == str(tmp_path / "root") and spawned.argv[7:9] == (
        env_file,
        f"{run_dir}/{pid_file}",
    )
    assert spawned.argv[9:12] == ("/bin/sh", "-c", script)
    assert remove.argv == ("rm", "-f", env_file, f"{run_dir}/{pid_file}")
    assert SECRET not in argv_text(transport)


def test_without_a_declared_path_the_target_s_own_follows_the_generation(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    assert launch_on(tmp_path, real(), 'printf "%s" "$PATH"') == 0
    assert capfd.readouterr().out == "/gen/bin:" + os.environ["PATH"]


def test_the_launcher_says_not_found_and_not_executable_as_a_shell_does(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    spec = remote_spec({}, "/gen/bin", ())
    root = str(tmp_path / "root")
    assert run_remote(real(), root, ["envlock-no-such-command"], spec) == 127
    assert run_remote(real(), root, [str(script)], spec) == 126
    err = capfd.readouterr().err
    assert "envlock: command not found: envlock-no-such-command\n" in err
    assert f"envlock: not executable: {script} (try `python {script}`)\n" in err


@pytest.mark.parametrize("signum", FORWARDED)
def test_a_signal_to_envlock_reaches_the_remote_command_and_its_status_returns(
    tmp_path: Path, signum: int
) -> None:
    seen: list[Call] = []
    transport = real(through("sh", "rm", seen=seen))
    before = {sig: signal.getsignal(sig) for sig in FORWARDED}
    marker = tmp_path / "started"
    sender = signal_when(marker, signum)
    assert launch_on(tmp_path, transport, TRAPPING, str(marker)) == TRAPPED[signum]
    sender.join()
    kill = [c for c in seen if "kill" in c.argv[2]]
    name = signal.Signals(signum).name.removeprefix("SIG")
    assert len(kill) == 1 and kill[0].argv[3:5] == ("sh", name)
    assert kill[0].argv[5].endswith(".pid")  # the group the launcher wrote down
    assert {sig: signal.getsignal(sig) for sig in FORWARDED} == before  # handlers put back


def test_a_container_stopped_under_the_command_is_the_error_and_its_pid_is_swept_later(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    box = Box(stopped=True)
    with pytest.raises(OperationError, match=r"stopped while the command ran \(its status: 137"):
        launch_on(tmp_path, box, "exit 137")
    assert [c.argv[0] for c in box.calls] == ["sh", "sh"]  # nothing removed: it stopped
    run_dir = tmp_path / "root" / "run"
    (left,) = run_dir.iterdir()
    assert left.suffix == ".pid"
    capfd.readouterr()
    # The next run's launcher sweeps the .pid nobody holds, and says so.
    assert launch_on(tmp_path, real(), "exit 0") == 0
    assert list(run_dir.iterdir()) == []
    assert f"envlock: removed 1 stale .pid file(s) in {run_dir}, left by" in capfd.readouterr().err


def test_an_environment_file_a_stopped_run_left_is_swept_by_the_next_one(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """A run stopped between writing its 0600 env file and starting the launcher (which
    deletes it at once) leaves a run's variables behind: the next launcher removes env files
    an hour old, says so, and leaves a fresh one (another run's launcher about to start)."""
    run_dir = tmp_path / "root" / "run"
    run_dir.mkdir(parents=True)
    left, fresh = run_dir / "left.env", run_dir / "fresh.env"
    for path in (left, fresh):
        path.write_text('{"set": {"TOKEN": "s3cret"}}')
    hour_ago = time.time() - 3700
    os.utime(left, (hour_ago, hour_ago))
    capfd.readouterr()
    assert launch_on(tmp_path, real(), "exit 0") == 0
    assert [p.name for p in run_dir.iterdir()] == ["fresh.env"]
    said = f"envlock: removed 1 environment file(s) in {run_dir}, left by a run stopped before"
    assert said in capfd.readouterr().err


def test_a_live_run_s_pid_is_never_swept(tmp_path: Path) -> None:
    transport = real()
    run_dir = tmp_path / "root" / "run"
    env_file, pid_file = run_dir / "live.env", run_dir / "live.pid"
    write_private(transport, str(run_dir), str(env_file), remote_spec({}, "/gen/bin", ()))
    marker = tmp_path / "started"
    argv = ["sh", "-c", TRAPPING, "sh", str(marker)]
    program = own_python(transport, launch.LAUNCHER, str(env_file), str(pid_file), *argv)
    live = subprocess.Popen(program, stdin=subprocess.DEVNULL, preexec_fn=defaults)
    watchdog(live)
    try:
        deadline = time.monotonic() + 20
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert launch_on(tmp_path, real(), "exit 0") == 0
        assert [p.name for p in run_dir.iterdir()] == ["live.pid"]  # locked by its command
        assert pid_file.read_text() == f"-{live.pid}"  # its own group (stdin no terminal)
        os.killpg(live.pid, signal.SIGTERM)
        assert live.wait() == 55
    finally:
        live.kill()
        live.wait()


def test_a_container_stopped_just_after_the_command_ended_is_the_error(tmp_path: Path) -> None:
    def lost_at_rm(stopped: bool) -> Box:
        def handle(call: Call) -> Result:
            if call.argv[0] == "rm":
                raise OperationError("ct 101: the connection was lost")
            return through("sh")(call)

        return Box(stopped, handle)

    with pytest.raises(OperationError, match=r"^ct 101 stopped while the command ran$"):
        launch_on(tmp_path, lost_at_rm(True), "exit 0")
    with pytest.raises(OperationError, match=r"^ct 101: the connection was lost$"):
        launch_on(tmp_path, lost_at_rm(False), "exit 0")


# -- Forwarder -----------------------------------------------------------------------------------
def test_the_forwarder_kills_the_named_group_or_the_one_in_the_pid_file() -> None:
    seen: list[Call] = []

    def handle(call: Call) -> Result:
        seen.append(call)
        raise OperationError("the command ended meanwhile")  # never raised out of a handler

    transport = ScriptedTransport(handle)
    Forwarder(transport, target="-4242")(signal.SIGTERM, None)
    Forwarder(transport, "/r/run/t.pid")(signal.SIGINT, None)
    assert seen[0].argv == ("sh", "-c", 'kill -s "$1" -- "$2"', "sh", "TERM", "-4242")
    assert seen[1].argv == ("sh", "-c", FORWARD_BY_PID_FILE, "sh", "INT", "/r/run/t.pid")


def test_a_signal_waits_for_the_pid_file_the_launcher_is_about_to_write(
    tmp_path: Path,
) -> None:
    """The forwarding script, run for real: the launcher writes the group a moment after
    the signal came (it was still starting); the signal reaches the group all the same."""
    pid_file = tmp_path / "t.pid"
    group = subprocess.Popen(["sleep", "30"], start_new_session=True)
    later = threading.Timer(0.3, lambda: pid_file.write_text(f"-{group.pid}"))
    later.start()
    try:
        subprocess.run(
            ["sh", "-c", FORWARD_BY_PID_FILE, "sh", "TERM", str(pid_file)], check=True, timeout=10
        )
        assert group.wait(timeout=10) == -signal.SIGTERM
    finally:
        later.cancel()
        group.kill()


# -- exec_local ---------------------------------------------------------------------------------
def test_a_local_command_replaces_envlock_with_exactly_the_environment_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "tool").write_text("")
    # An exec that fails returns, here in this process: mutmut maps a function to the tests
    # it sees call it, and a forked child's calls go unseen.
    with pytest.raises(SystemExit):
        exec_local([str(tmp_path / "tool")], {})
    capsys.readouterr()

    def work() -> None:
        sys.stdout.write("said before: ")  # buffered: both flushed before the exec
        sys.stderr.write("warned before")
        env = {"ONLY": "a b", "PATH": os.environ["PATH"]}
        exec_local(["sh", "-c", 'printf "%s|%s" "$ONLY" "${HOME-unset}"; exit 7'], env)

    assert in_child(work) == (7, "said before: a b|unset", "warned before")


def test_a_local_command_not_found_or_not_executable_exits_as_a_shell_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {"PATH": str(tmp_path)}
    # In this process too (an exec that fails returns): what runs in a forked child is not
    # seen by mutmut's map of which test runs which function.
    with pytest.raises(SystemExit) as info:
        exec_local(["envlock-no-such-command"], env)
    assert info.value.code == 127 and "command not found" in capsys.readouterr().err
    code, _, err = in_child(lambda: exec_local(["envlock-no-such-command"], env))
    assert code == launch.NOT_FOUND == 127
    assert err == (
        "envlock: command not found: envlock-no-such-command (is it installed in the "
        "environment? `envlock run` puts the generation's bin first on PATH)\n"
    )
    script, tool = tmp_path / "train.py", tmp_path / "tool"
    for path in (script, tool):
        path.write_text("print('hi')\n")
    code, _, err = in_child(lambda: exec_local([str(script)], env))
    assert code == launch.NOT_EXECUTABLE == 126
    assert err == f"envlock: not executable: {script} — try `python {script}`\n"
    assert in_child(lambda: exec_local([str(tool)], env)) == (
        126,
        "",
        f"envlock: not executable: {tool}\n",
    )


# -- one_call: the remembered state ------------------------------------------------------------
def test_the_digest_is_the_agent_s_of_the_state_as_it_travels() -> None:
    raw = {"b": (1, 2), "a": {"z": None, "y": 1.5}}
    canonical = '{"a": {"y": 1.5, "z": null}, "b": [1, 2]}'
    assert state_digest(raw) == hashlib.sha256(canonical.encode()).hexdigest()
    assert state_digest is agent_launch.state_digest  # one function: the agent's (core.py)


def test_a_state_is_remembered_per_target_root_and_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    box, other = ScriptedTransport(through(), name="a"), ScriptedTransport(through(), name="b")
    request = {"root": "/r", "deep": False}
    assert remembered(box, "/r", request) is None
    remember(box, "/r", request, {"current": "1-abc"})
    assert remembered(box, "/r", request) == {"current": "1-abc"}
    assert remembered(other, "/r", request) is None
    assert remembered(box, "/s", request) is None
    assert remembered(box, "/r", {**request, "deep": True}) is None
    key = [1, "a", "/r", request]
    for entry in ({"schema": 2, "state": {"x": 1}}, {"schema": 1, "state": [1]}, [1]):
        write_entry("run-states", key, entry)
        assert remembered(box, "/r", request) is None


# -- one_call: call_run with the real agent ----------------------------------------------------
def probe_request(tmp_path: Path) -> dict[str, Any]:
    return {
        "root": str(tmp_path / "root"),
        "venv": str(tmp_path / "venv"),
        "cache_dir": None,
        "scripts": None,
        "deep": False,
        "verify": True,
        "warmth": False,
        "devices": [],
        "active_lock": False,
        "uv": None,
    }


def launch_request(tmp_path: Path, expect: str, script: str, *args: str) -> dict[str, Any]:
    env = {"TOKEN": SECRET, "VIRTUAL_ENV": "/gen"}
    return {
        "probe": probe_request(tmp_path),
        "expect": expect,
        "spec": spec_of(env, "/gen/bin", (), None),
        "argv": ["sh", "-c", script, "sh", *args],
        "startup": None,
    }


def the_state(tmp_path: Path, transport: ScriptedTransport) -> dict[str, Any]:
    """The target's state, as the agent's `run` hands it back when it is not the one judged."""
    (tmp_path / "root").mkdir(exist_ok=True)
    outcome = call_run(transport, str(tmp_path / "root"), launch_request(tmp_path, "0", "exit 9"))
    assert isinstance(outcome, Changed)
    return outcome.raw


def test_a_state_not_the_one_judged_comes_back_and_nothing_starts(
    tmp_path: Path, streams: Callable[[], tuple[str, str]]
) -> None:
    transport = real(through())
    raw = the_state(tmp_path, transport)
    assert raw["root_exists"] is True and raw["current"] is None
    assert streams() == ("", "")  # nothing started, nothing relayed
    (spawned,) = transport.calls
    assert spawned.agent == "run" and spawned.root == str(tmp_path / "root")
    assert SECRET not in argv_text(transport)


def test_the_state_judged_starts_the_command_with_its_stdin_env_and_status(
    tmp_path: Path, streams: Callable[[], tuple[str, str]]
) -> None:
    transport = real(through())
    raw = the_state(tmp_path, transport)
    script = 'printf "%s|%s|" "$TOKEN" "$PATH"; read line; echo "in:$line"; echo oops >&2; exit 3'
    with stdin_of(b"hello\nmore\n"):
        outcome = call_run(
            transport, str(tmp_path / "root"), launch_request(tmp_path, state_digest(raw), script)
        )
    assert outcome == Started(3)
    tail = os.environ["PATH"]
    assert streams() == (f"{SECRET}|/gen/bin:{tail}|in:hello\n", "oops\n")
    assert SECRET not in argv_text(transport)


def test_the_command_s_output_is_relayed_as_it_comes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    transport = real(through())
    raw = the_state(tmp_path, transport)
    out = tmp_path / "out"
    monkeypatch.setattr(sys, "stdout", open(out, "w"))  # noqa: SIM115 - closed below
    marker = tmp_path / "seen"

    def watch() -> None:  # the command waits until its first line has reached our stdout
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and out.read_text() != "first\n":
            time.sleep(0.01)
        marker.touch()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    script = 'echo first; while [ ! -e "$1" ]; do sleep 0.02; done; echo second'
    request = launch_request(tmp_path, state_digest(raw), script, str(marker))
    with stdin_of(b""):
        outcome = call_run(transport, str(tmp_path / "root"), request)
    watcher.join()
    sys.stdout.close()
    # Not killed by the watchdog: the first line came while the command still ran.
    assert outcome == Started(0) and out.read_text() == "first\nsecond\n"


def test_envlock_ends_with_the_command_even_while_its_stdin_stays_open(
    tmp_path: Path, streams: Callable[[], tuple[str, str]]
) -> None:
    transport = real(through())
    raw = the_state(tmp_path, transport)
    before = {t for t in threading.enumerate() if not t.daemon}
    with open_stdin():
        outcome = call_run(
            transport, str(tmp_path / "root"), launch_request(tmp_path, state_digest(raw), "true")
        )
        # What still reads our stdin for the command that ended must not keep envlock alive
        # (the interpreter waits for every thread that is not a daemon before it exits).
        assert {t for t in threading.enumerate() if not t.daemon} == before
    assert outcome == Started(0)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_reaches_the_one_call_command_s_group(
    tmp_path: Path, signum: int, streams: Callable[[], tuple[str, str]]
) -> None:
    seen: list[Call] = []
    transport = real(through("sh", seen=seen))
    raw = the_state(tmp_path, transport)
    before = {sig: signal.getsignal(sig) for sig in FORWARDED}
    marker = tmp_path / "started"
    sender = signal_when(marker, signum)
    request = launch_request(tmp_path, state_digest(raw), TRAPPING, str(marker))
    with stdin_of(b""):
        outcome = call_run(transport, str(tmp_path / "root"), request)
    sender.join()
    assert outcome == Started(TRAPPED[signum])
    (kill,) = seen
    name = signal.Signals(signum).name.removeprefix("SIG")
    assert kill.argv[:5] == ("sh", "-c", 'kill -s "$1" -- "$2"', "sh", name)
    assert kill.argv[5].startswith("-")  # the command's own process group
    assert {sig: signal.getsignal(sig) for sig in FORWARDED} == before


def test_the_container_s_word_decides_whether_the_judged_state_starts(
    tmp_path: Path, streams: Callable[[], tuple[str, str]]
) -> None:
    transport = real(through())
    raw = the_state(tmp_path, transport)
    request = launch_request(tmp_path, state_digest(raw), "echo started")
    root = str(tmp_path / "root")
    asked: list[bool] = []

    def word(says: bool) -> Callable[[], bool]:
        def gate() -> bool:
            asked.append(says)
            return says

        return gate

    assert call_run(transport, root, request, word(False)) == Stopped()
    assert streams() == ("", "")
    with stdin_of(b""):
        assert call_run(transport, root, request, word(True)) == Started(0)
    assert asked == [False, True] and streams()[0] == "started\n"


def test_a_gate_that_fails_stops_the_agent_and_is_raised(tmp_path: Path) -> None:
    procs: list[Any] = []

    def spawner(call: Call, piped: bool) -> Any:
        procs.append(spawn_here(call, piped))
        return procs[-1]

    transport = ScriptedTransport(through(), python=sys.executable, spawner=spawner)
    raw = the_state(tmp_path, transport)

    def gate() -> bool:
        raise RuntimeError("the API is down")

    request = launch_request(tmp_path, state_digest(raw), "echo started")
    with pytest.raises(RuntimeError, match="the API is down"):
        call_run(transport, str(tmp_path / "root"), request, gate)
    assert procs[-1].returncode == -signal.SIGKILL  # it waited for a word: killed, reaped


def scripted_agent(script: str) -> ScriptedTransport:
    """A transport whose agent call is answered by `script` (sh) instead of the agent."""

    def spawner(call: Call, piped: bool) -> Any:
        assert call.agent == "run" and piped
        return spawn_locally(Call(("sh", "-c", script), b"", {}), piped)

    return ScriptedTransport(through(), python=sys.executable, spawner=spawner)


def test_no_answer_is_a_failure_with_what_the_agent_said(tmp_path: Path) -> None:
    quiet = scripted_agent("echo 'python3: not found' >&2; exit 127")
    outcome = call_run(quiet, "/r", launch_request(tmp_path, "0", "true"))
    assert isinstance(outcome, Failed)
    assert outcome.result.exit_code == 127 and outcome.result.stdout == b""
    assert outcome.result.stderr == b"python3: not found\n"
    assert outcome.result.argv == quiet.calls[0].argv
    noise = scripted_agent("echo 'Welcome!'; echo more; exit 0")
    outcome = call_run(noise, "/r", launch_request(tmp_path, "0", "true"))
    # Its first line, at least (what readline buffered past it may be lost to communicate:
    # the caller asks again the usual way, which words the failure).
    assert isinstance(outcome, Failed) and outcome.result.stdout.startswith(b"Welcome!\n")


def test_an_agent_s_error_is_raised_not_taken_for_a_state(tmp_path: Path) -> None:
    failing = scripted_agent('echo \'{"error": {"message": "disk full"}}\'')
    with pytest.raises(OperationError, match=r"^scripted: disk full$"):
        call_run(failing, "/r", launch_request(tmp_path, "0", "true"))


def test_an_agent_that_ends_before_reading_is_heard_all_the_same(tmp_path: Path) -> None:
    early = scripted_agent("exec 0<&-; echo '{\"a\": 1}'; exit 0")
    big = launch_request(tmp_path, "0", "true")
    big["spec"]["set"]["BIG"] = "x" * (1 << 20)  # more than a pipe holds
    assert call_run(early, "/r", big) == Changed({"a": 1})


def test_an_agent_gone_after_ready_is_stopped_or_a_failure_not_an_error(tmp_path: Path) -> None:
    # It stops reading, then says the state is as judged: the word finds no reader.
    gone = "exec 0<&-; echo '{\"ready\": true}'"
    request = launch_request(tmp_path, "0", "true")
    assert call_run(scripted_agent(gone), "/r", request, lambda: False) == Stopped()
    outcome = call_run(scripted_agent(gone), "/r", request, lambda: True)
    assert isinstance(outcome, Failed) and outcome.result.exit_code == 0  # asked again


def test_read_answer_takes_one_line_of_json() -> None:
    assert read_answer(io.BytesIO(b'{"run": {}}\nrest\n')) == ({"run": {}}, b'{"run": {}}\n')
    assert read_answer(io.BytesIO(b"  \n")) == (None, b"  \n")
    assert read_answer(io.BytesIO(b"")) == (None, b"")
    assert read_answer(io.BytesIO(b"Welcome\n")) == (None, b"Welcome\n")


def test_a_lost_connection_stops_the_command_over_a_new_one_or_says_how() -> None:
    from envlock.runs.one_call import connection_lost

    asked: list[tuple[str, ...]] = []

    def answering(code: int) -> Callable[[Call], Result]:
        def handle(call: Call) -> Result:
            asked.append(call.argv)
            return Result(call.argv, code, b"", b"")

        return handle

    stopped = connection_lost(ScriptedTransport(answering(0), name="ssh box"), "-4242")
    assert asked == [("sh", "-c", 'kill -s TERM -- "$1"', "sh", "-4242")]
    assert isinstance(stopped, OperationError) and stopped.hint is None
    assert stopped.message == (
        "the connection to ssh box was lost while the command ran (it was stopped)"
    )
    for handler in (answering(1), failing):
        lost = connection_lost(ScriptedTransport(handler, name="ssh box"), "-4242")
        assert lost.message == "the connection to ssh box was lost while the command ran"
        assert lost.hint == ("it may still run there: stop it with `kill -- -4242` on the target")


def failing(call: Call) -> Result:
    raise OperationError("ssh box: no route to host")
