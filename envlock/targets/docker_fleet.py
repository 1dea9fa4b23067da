"""A Docker fleet: the containers of one or more Docker engines that carry the profile's
labels, listed at each command with the docker CLI (`docker ps`), the way the transport
reaches the engines: a container relabelled or added is followed without editing the
profile.

```toml
[target]
type = "docker"
select = { labels = { role = "trainer" }, name = "train-*" }  # every label; name: a glob
hosts = { gpu1 = "ssh://gpu-1", gpu2 = "unix:///run/docker.sock" }  # or one `host`
```
A member is `ENGINE/NAME` (an engine's name from `hosts`; with one `host`, that host; with
none, "default": the docker CLI's own engine).
"""

from __future__ import annotations

import fnmatch
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass

from envlock.base.tomlread import Table, shown
from envlock.targets.members import Member

# An engine's name in [target] hosts: it names the engine's members (ENGINE/NAME) and their
# folders (`snapshot` into DIR/ENGINE/NAME/).
ENGINE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
DEFAULT_ENGINE = "default"
LIST_TIMEOUT = 60  # seconds for an engine to list its containers (ssh:// included)


@dataclass(frozen=True)
class DockerFleet:
    """[target] select (the labels every member carries, a name pattern) and the engines
    it is looked for on: (name, DOCKER_HOST or None for the CLI's default)."""

    labels: tuple[tuple[str, str], ...] = ()
    name: str | None = None
    engines: tuple[tuple[str, str | None], ...] = ((DEFAULT_ENGINE, None),)

    def host_of(self, engine: str) -> str | None:
        return dict(self.engines)[engine]


def read_select(t: Table) -> tuple[tuple[tuple[str, str], ...], str | None] | None:
    """`select = { labels = { K = "V" }, name = "GLOB" }`, or None (one container)."""
    select = t.table("select")
    if select is None:
        return None
    labels = read_labels(select.table("labels"))
    name = select.text("name", None)
    select.finish()
    if not labels and name is None:
        select.fail(
            None,
            "expected the labels (or a name pattern) that select the fleet's containers",
            hint='select = { labels = { role = "trainer" } }',
        )
    return tuple(sorted(labels)), name


def read_labels(table: Table | None) -> list[tuple[str, str]]:
    labels = []
    for key in table.data if table is not None else ():
        assert table is not None
        if not key or "=" in key or "," in key:
            table.fail(key, f"expected a label's name, found {shown(key)}")
        labels.append((key, table.text(key)))
    return labels


def read_engines(
    t: Table, host: str | None, check: Callable[[Table, str, str], None]
) -> tuple[tuple[str, str | None], ...]:
    """[target] hosts (NAME = DOCKER_HOST), else the one `host`, else the default engine."""
    hosts = t.table("hosts")
    if hosts is None:
        return ((host or DEFAULT_ENGINE, host),)
    if host is not None:
        t.fail("hosts", "a fleet's engines are one `host` or several `hosts`, not both")
    engines: list[tuple[str, str | None]] = []
    for name in hosts.data:
        if not ENGINE_RE.fullmatch(name):
            hosts.fail(name, f"expected an engine's name as the key, found {shown(name)}")
        value = hosts.text(name)
        check(hosts, value, name)
        engines.append((name, value))
    if not engines:
        t.fail("hosts", "expected at least one engine: NAME = DOCKER_HOST")
    return tuple(engines)


def list_members(fleet: DockerFleet) -> list[Member]:
    """The fleet's containers on each engine, now; an engine that cannot list its own is
    one member that fails with why (the others still run)."""
    members: list[Member] = []
    for engine, host in fleet.engines:
        members += engine_members(fleet, engine, host)
    return members


def ps_argv(fleet: DockerFleet, host: str | None) -> list[str]:
    argv = ["docker", *(["-H", host] if host else []), "ps", "--all", "--no-trunc"]
    for key, value in fleet.labels:
        argv += ["--filter", f"label={key}={value}"]
    return [*argv, "--format", "{{.Names}}\t{{.State}}\t{{.Labels}}"]


def engine_members(fleet: DockerFleet, engine: str, host: str | None) -> list[Member]:
    where = f"the Docker engine {engine}" + (f" ({host})" if host and host != engine else "")
    try:
        done = subprocess.run(
            ps_argv(fleet, host),
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=LIST_TIMEOUT,
        )
    except FileNotFoundError:
        return [unlisted(engine, f"{where}: the docker CLI is not installed on this machine")]
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [unlisted(engine, f"{where} could not list its containers: {exc}")]
    if done.returncode != 0:
        said = done.stderr.strip().splitlines()
        return [
            unlisted(
                engine,
                f"{where} could not list its containers: {said[-1] if said else done.returncode}",
            )
        ]
    return parse_ps(engine, done.stdout, fleet.name)


def unlisted(engine: str, message: str) -> Member:
    return Member(None, engine, "*", "unknown", error=message)


def parse_ps(engine: str, out: str, pattern: str | None) -> list[Member]:
    """`docker ps --format '{{.Names}}\\t{{.State}}\\t{{.Labels}}'`, as members by name."""
    members = []
    for line in out.splitlines():
        fields = line.split("\t")
        if len(fields) < 2 or not fields[0]:
            continue
        name = fields[0].split(",")[0]
        if pattern is not None and not fnmatch.fnmatchcase(name, pattern):
            continue
        labels = tuple(sorted(p for p in (fields[2] if len(fields) > 2 else "").split(",") if p))
        members.append(Member(None, engine, name, fields[1], tags=labels))
    return sorted(members, key=lambda m: m.name)
