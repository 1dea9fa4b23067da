"""An engine at an `ssh://` DOCKER_HOST, for the Docker SDK, through the docker CLI's own ssh.

The SDK reaches an ssh:// engine only with paramiko installed (its ssh transport imports it,
even to shell out to the ssh client). envlock needs no paramiko: it gives the SDK a unix
socket of this process's own (in a private temporary folder, mode 0700), and carries each
connection made to it through `docker -H ssh://HOST system dial-stdio`, the command the
docker CLI itself uses for `docker -H ssh://…`. So the SDK reaches the engine exactly as
`docker exec` does: the user's ssh client, its config, keys and agent.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import threading
from pathlib import Path


class DialBridge:
    """A local socket whose every connection is one `docker system dial-stdio` to `host`."""

    def __init__(self, host: str) -> None:
        self.host = host
        self.folder = Path(tempfile.mkdtemp(prefix="envlock-docker-"))
        self.path = self.folder / "engine.sock"
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(self.path))
        self.listener.listen(16)
        self.dials: list[subprocess.Popen[bytes]] = []
        self.failed = ""  # what starting the docker CLI said, when it could not start
        self.lock = threading.Lock()
        threading.Thread(target=self.serve, name="envlock-docker-dial", daemon=True).start()

    @property
    def url(self) -> str:
        return f"unix://{self.path}"

    def argv(self) -> list[str]:
        return ["docker", "-H", self.host, "system", "dial-stdio"]

    def serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:  # closed
                return
            with conn, self.lock:
                try:
                    fd = conn.fileno()  # the dial's stdin and stdout; ours closes after
                    proc = subprocess.Popen(
                        self.argv(), stdin=fd, stdout=fd, stderr=subprocess.PIPE
                    )
                except OSError as exc:  # no docker CLI: the SDK sees the connection end
                    self.failed = f"{self.argv()[0]}: {exc}"
                    continue
                self.dials.append(proc)

    def said(self) -> str:
        """The last line the docker CLI (or its ssh) wrote of a dial that ended, or ""."""
        with self.lock:
            for proc in self.dials:  # a dial that failed ends as the SDK sees its socket end
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=2)
            ended = [proc for proc in self.dials if proc.poll() is not None]
            for proc in reversed(ended):
                assert proc.stderr is not None
                lines = proc.stderr.read().decode(errors="replace").strip().splitlines()
                if lines:
                    return lines[-1]
            return self.failed

    def close(self) -> None:
        """The listener and every dial still running end; the folder goes."""
        with contextlib.suppress(OSError):
            self.listener.close()
        with self.lock:
            for proc in self.dials:
                if proc.poll() is None:
                    proc.terminate()
            for proc in self.dials:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=5)
                if proc.stderr is not None:
                    proc.stderr.close()
        shutil.rmtree(self.folder, ignore_errors=True)
