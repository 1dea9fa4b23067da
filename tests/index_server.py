"""A real package index on loopback: PEP 503 simple pages built from wheel files, served over
HTTP by the standard library, every request path recorded (so a test can tell whether the
index was asked at all, and which files were downloaded)."""

from __future__ import annotations

import hashlib
import html
import shutil
import threading
import time
from dataclasses import dataclass, field
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name, parse_wheel_filename


def write_simple_index(root: Path, wheels: list[Path]) -> None:
    """`root/simple/<project>/index.html` linking `root/files/<wheel>#sha256=…`."""
    files = root / "files"
    files.mkdir(parents=True, exist_ok=True)
    projects: dict[str, list[Path]] = {}
    for wheel in wheels:
        copy = files / wheel.name
        shutil.copyfile(wheel, copy)
        projects.setdefault(canonicalize_name(parse_wheel_filename(wheel.name)[0]), []).append(copy)
    for project, copies in projects.items():
        page = root / "simple" / project / "index.html"
        page.parent.mkdir(parents=True, exist_ok=True)
        links = [
            f'<a href="../../files/{html.escape(c.name)}#sha256='
            f'{hashlib.sha256(c.read_bytes()).hexdigest()}">{html.escape(c.name)}</a><br>'
            for c in sorted(copies)
        ]
        page.write_text("<!DOCTYPE html>\n<html><body>\n" + "\n".join(links) + "\n</body></html>\n")


@dataclass
class IndexServer:
    """Serves a directory of simple indexes (`<dir>/<name>/simple/…`) on 127.0.0.1."""

    directory: Path
    requests: list[str] = field(default_factory=list)
    delay: float = 0.0  # seconds each answer waits: a slow index, as over a slow link
    _server: ThreadingHTTPServer | None = None

    def start(self) -> IndexServer:
        requests = self.requests
        server = self

        class Handler(SimpleHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                requests.append(self.path)

            def do_GET(self) -> None:
                time.sleep(server.delay)
                super().do_GET()

        handler = partial(Handler, directory=str(self.directory))
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def simple(self, name: str) -> str:
        """The simple index URL of `<directory>/<name>`."""
        return f"{self.url}/{name}/simple"

    def add(self, name: str, wheels: list[Path]) -> str:
        write_simple_index(self.directory / name, wheels)
        return self.simple(name)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
