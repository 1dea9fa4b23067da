"""The local target: commands run as subprocesses of envlock itself."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from typing import IO

from envlock.base import started
from envlock.base.inherited import own_environment
from envlock.base.tomlread import Table
from envlock.targets.base import LocalPath, Result, StarterRow, TargetType, TransportFailed


class LocalFailed(TransportFailed):
    """A local command could not be started (its program is not there)."""


class LocalTransport:
    name = "local"

    def __init__(self) -> None:
        # The agent needs any Python 3.8+; the one running envlock is always there.
        self.system_python = sys.executable

    def run(
        self,
        argv: list[str],
        *,
        stdin: bytes | IO[bytes] | None = None,
        env: Mapping[str, str] | None = None,
        on_stderr_line: Callable[[str], None] | None = None,
    ) -> Result:
        # The same command with the same request, begun ahead (envlock/base/started.py).
        ahead = started.take(argv, stdin) if env is None and isinstance(stdin, bytes) else None
        if ahead is not None:
            waiting = ahead.stdin is not None and not ahead.stdin.closed
            return communicate(ahead, argv, stdin if waiting else None, on_stderr_line)
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                # envlock's own work (agent, probe): the environment it decides
                env=dict(env) if env is not None else own_environment(),
            )
        except FileNotFoundError:
            raise LocalFailed(f"command not found: {argv[0]}") from None
        return communicate(proc, argv, stdin, on_stderr_line)

    def command_line(self, argv: list[str]) -> list[str] | None:
        """The local command line `run(argv)` starts: argv itself (commands/ahead.py)."""
        return argv

    def spawn(self, argv: list[str], *, piped: bool = False) -> subprocess.Popen[bytes]:
        return spawn_ignoring_signals(argv, piped=piped)


def spawn_ignoring_signals(argv: list[str], *, piped: bool = False) -> subprocess.Popen[bytes]:
    """Start a command (a transport's client, e.g. ssh) with stdio passed through, ignoring
    the signals envlock forwards itself: a Ctrl-C must reach the remote command, not cut the
    connection (OpenSSH keeps a signal ignored when it starts with it ignored)."""
    if piped:
        pipe = subprocess.PIPE
        return subprocess.Popen(
            argv, stdin=pipe, stdout=pipe, stderr=pipe, preexec_fn=ignore_forwarded_signals
        )
    return subprocess.Popen(argv, preexec_fn=ignore_forwarded_signals)


def ignore_forwarded_signals() -> None:
    """In the child, before exec: the signals envlock forwards itself are ignored there."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)


def feed(pipe: IO[bytes], stdin: bytes | IO[bytes] | None, failed: list[BaseException]) -> None:
    """Write stdin to the command (then close it: the command sees its end)."""
    try:
        if isinstance(stdin, bytes):
            pipe.write(stdin)
        elif stdin is not None:
            for chunk in iter(lambda: stdin.read(1 << 20), b""):  # streamed: no copy in memory
                pipe.write(chunk)
                pipe.flush()
    except (BrokenPipeError, ValueError):
        pass  # the command exited without reading all of it
    except BaseException as exc:  # reading the stream failed: raised in the caller's thread
        failed.append(exc)
    finally:
        with contextlib.suppress(BrokenPipeError, ValueError):
            pipe.close()


def communicate(
    proc: subprocess.Popen[bytes],
    argv: list[str],
    stdin: bytes | IO[bytes] | None,
    on_stderr_line: Callable[[str], None] | None,
) -> Result:
    """Like Popen.communicate, but stderr lines are handed over as they arrive (progress)."""
    err_chunks: list[bytes] = []

    def pump(stream: IO[bytes]) -> None:
        for line in iter(stream.readline, b""):
            err_chunks.append(line)
            if on_stderr_line is not None:
                on_stderr_line(line.decode(errors="replace").rstrip("\n"))

    assert proc.stderr is not None and proc.stdout is not None and proc.stdin is not None
    reader = threading.Thread(target=pump, args=(proc.stderr,), daemon=True)
    reader.start()
    # stdin is fed beside the reading: a stream may be a dialogue with the command (an
    # answer given once it asks on stderr), so each chunk goes out as soon as it is read.
    failed: list[BaseException] = []
    writer = threading.Thread(target=feed, args=(proc.stdin, stdin, failed), daemon=True)
    writer.start()
    stdout = proc.stdout.read()
    code = proc.wait()
    ended = getattr(stdin, "ended", None)
    if callable(ended):
        ended()  # a dialogue still waiting for its next word: the command is gone
    writer.join()
    reader.join()
    if failed:
        raise failed[0]
    return Result(tuple(argv), code, stdout, b"".join(err_chunks))


# -- the target type ----------------------------------------------------------------------
def read_local_settings(t: Table, local_path: LocalPath) -> None:
    """A local target has no settings of its own; connection keys are refused by the table."""
    return None


LOCAL = TargetType(
    name="local",
    remote=False,
    read_settings=read_local_settings,
    transport=lambda settings: LocalTransport(),
    starter=StarterRow(
        "# Where: this machine. Relative paths are taken from this file's directory.",
        root=".envlock/{name}",
        venv=".envlock/{name}/venv",
    ),
    failures=(LocalFailed,),
)
