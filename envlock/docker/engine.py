"""The Docker engine through the Docker SDK for Python: one client per command, and the
engine's failures as one clear message each (exit 3).

Loaded only for a profile with a [docker] table: the SDK (and requests under it) costs
every other command nothing."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from envlock.errors import OperationError

if TYPE_CHECKING:
    from envlock.docker.bridge import DialBridge

# The Docker Engine API version envlock asks for: 1.41 is Docker 20.10, the oldest engine
# envlock supports (device requests came with 1.40).
API_VERSION = "1.41"
TIMEOUT = 120


class EngineError(OperationError):
    """The Docker engine refused or could not be reached (exit 3)."""


def connect(host: str | None) -> Any:
    """A client of the engine at `host` (a DOCKER_HOST), or of the one DOCKER_HOST names."""
    import docker  # here: the SDK loads only for a profile with a [docker] table

    where = host or "the default engine (DOCKER_HOST)"
    bridge = ssh_bridge(host)
    with engine_errors(where, said=bridge.said if bridge is not None else None):
        if host is None:
            client = docker.from_env(version=API_VERSION, timeout=TIMEOUT)
        else:
            base_url = bridge.url if bridge is not None else host
            client = docker.DockerClient(base_url=base_url, version=API_VERSION, timeout=TIMEOUT)
        client.ping()
    return client


def ssh_bridge(host: str | None) -> DialBridge | None:
    """For an ssh:// engine, the local socket the SDK talks to (envlock/docker/bridge.py:
    the docker CLI's own ssh, no paramiko); closed when envlock exits."""
    if host is None or not host.startswith("ssh://"):
        return None
    import atexit

    from envlock.docker.bridge import DialBridge

    bridge = DialBridge(host)
    atexit.register(bridge.close)
    return bridge


@contextlib.contextmanager
def engine_errors(
    where: str,
    *,
    image: str | None = None,
    name: str | None = None,
    said: Callable[[], str] | None = None,
) -> Iterator[None]:
    """The SDK's exceptions, as what happened and what to do."""
    from docker import errors  # loaded with the SDK, by connect() first
    from requests import RequestException  # the SDK's transport: its connection errors

    try:
        yield
    except errors.ImageNotFound:
        raise EngineError(
            f"the image {image} is not on the Docker engine at {where}",
            hint=f"pull or import it there first (`docker pull {image}`): envlock never pulls",
        ) from None
    except errors.NotFound as exc:
        raise EngineError(f"the Docker engine at {where}: {explanation(exc)}") from None
    except errors.APIError as exc:
        raise api_error(exc, where, name) from None
    except (errors.DockerException, RequestException, OSError) as exc:
        # Through ssh, what the ssh client said is the cause (the SDK saw the socket end).
        raise unreachable(exc, where, said() if said is not None else "") from None


def explanation(exc: Any) -> str:
    return str(getattr(exc, "explanation", None) or exc)


def api_error(exc: Any, where: str, name: str | None) -> EngineError:
    said = explanation(exc)
    if getattr(exc, "status_code", None) == 409 and "is already in use" in said:
        return EngineError(
            f"a container named {name} already exists on the Docker engine at {where}, "
            "made by someone else meanwhile",
            hint="remove it or pick another [target] container, then apply again",
        )
    if "could not select device driver" in said:
        return EngineError(
            f"the Docker engine at {where} cannot give the container GPUs: {said}",
            hint="install the NVIDIA container toolkit there (nvidia-ctk runtime configure), "
            "or remove [docker] gpus",
        )
    return EngineError(f"the Docker engine at {where} refused: {said}")


def unreachable(exc: Exception, where: str, through: str = "") -> EngineError:
    said = through or str(exc)
    if "Permission denied" in said or "PermissionError" in said:
        return EngineError(
            f"permission denied on the Docker engine's socket ({where})",
            hint="run envlock as root or as a member of the `docker` group, or set [target] "
            "host to an engine this user may use",
        )
    return EngineError(
        f"the Docker engine at {where} does not answer: {said.splitlines()[-1] if said else ''}",
        hint="is dockerd running there? check [target] host",
    )
