"""The container side of a docker target: its [docker] table checked against the engine,
created, recreated (a container's config cannot change in place: a change is a new
container from the same image, its volumes kept), committed before a change and rolled
back to a commit. One provisioner serves one command, over one engine client."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from envlock.base.drift_kinds import Drift
from envlock.docker.config import Difference, device_requests, differences
from envlock.docker.engine import connect, engine_errors
from envlock.docker.settings import DockerSpec
from envlock.errors import UsageError
from envlock.targets.base import (
    ContainerCheck,
    ContainerSnapshot,
    prune_oldest,
    restore_point_name,
    restore_point_record,
)

STOP_TIMEOUT = 10
# How long a create refused for its name waits for the other create's container to show.
MEANWHILE_WAIT = 120


def quiet(_: str) -> None:
    pass


class DockerProvisioner:
    """A profile's [docker] on its engine, through the Docker SDK for Python."""

    keep_key = "keep-commits"

    def __init__(self, host: str | None, subject: str, spec: DockerSpec) -> None:
        self.host = host  # the engine's DOCKER_HOST ([target] host), None: the default one
        self.subject = subject  # "container NAME on HOST"
        self.spec = spec
        self._client: Any = None

    @property
    def client(self) -> Any:
        """One client per command: check, commit and provision share it."""
        if self._client is None:
            self._client = connect(self.host)
        return self._client

    def where(self) -> str:
        return self.host or "the default engine (DOCKER_HOST)"

    def errors(self, image: str | None = None) -> Any:
        return engine_errors(self.where(), image=image or self.spec.image, name=self.spec.name)

    def describe(self) -> str:
        return self.subject

    def find(self) -> Any:
        from docker.errors import NotFound

        with self.errors():
            try:
                return self.client.containers.get(self.spec.name)
            except NotFound:
                return None

    # -- check ------------------------------------------------------------------------------
    def check(self) -> ContainerCheck:
        """The container as the engine has it, against [docker]; every difference is a
        recreate (said so)."""
        subject = self.describe()
        found = self.find()
        if found is None:
            how = f"apply creates it from {self.spec.image}"
            return ContainerCheck(
                False, False, (Drift("container", subject, "exists", "absent", how),)
            )
        drifts = []
        running = found.status == "running"
        if not running:
            drifts.append(Drift("container", subject, "running", found.status, "apply starts it"))
        how = f"apply recreates the container from {self.spec.image}, its volumes kept"
        for diff in differences(self.spec, found.attrs):
            drifts.append(Drift("container-config", diff.key, diff.expected, diff.actual, how))
        replaces = any(d.kind == "container-config" for d in drifts)
        return ContainerCheck(True, running, tuple(drifts), replaces=replaces)

    # -- provision --------------------------------------------------------------------------
    def provision(self, *, restart: bool, on_progress: Callable[[str], None] | None) -> list[str]:
        """Create, recreate or start the container as [docker] declares it."""
        say = on_progress or quiet
        found = self.find()
        if found is None:
            self.create(say)
            return [f"created {self.describe()} from {self.spec.image}"]
        changed = differences(self.spec, found.attrs)
        if changed:
            self.recreate(found, self.spec.image, say)
            return [recreated(self.describe(), self.spec.image, changed)]
        with self.errors():
            say(f"starting {self.describe()}")
            found.start()
        return [f"started {self.describe()}"]

    def create(self, say: Callable[[str], None], image: str | None = None) -> None:
        from docker.types import DeviceRequest, Mount

        spec = self.spec
        image = image or spec.image
        say(f"creating {self.describe()} from {image}")
        options: dict[str, Any] = {
            "name": spec.name,
            "detach": True,
            "mounts": [Mount(v.path, v.source, type=v.kind, read_only=v.ro) for v in spec.volumes],
            "device_requests": [DeviceRequest(**lower(r)) for r in device_requests(spec.gpus)],
            "environment": dict(spec.env),
            "labels": dict(spec.labels),
        }
        for key, value in (
            ("shm_size", spec.shm_size),
            ("ipc_mode", spec.ipc),
            ("network_mode", spec.network),
        ):
            if value is not None:
                options[key] = value
        command = list(spec.command) if spec.command is not None else None
        with self.errors(image):
            container = self.created(image, command, options, say)
            if container.status != "running":
                container.start()

    def created(
        self,
        image: str,
        command: list[str] | None,
        options: dict[str, Any],
        say: Callable[[str], None],
    ) -> Any:
        """The new container; one that another apply created meanwhile under the same name
        (two applies at once) is taken as created, not refused."""
        from docker.errors import APIError

        try:
            return self.client.containers.create(image, command, **options)
        except APIError as exc:
            found = self.made_meanwhile() if exc.status_code == 409 else None
            if found is None:
                raise
            say(f"{self.describe()} was created meanwhile (another apply): using it")
            return found

    def recreate(self, found: Any, image: str, say: Callable[[str], None]) -> None:
        """The old container goes (its anonymous volumes too; named volumes and bind mounts
        stay), a new one comes from `image` with [docker]'s settings."""
        with self.errors():
            say(f"removing {self.describe()} (named volumes and bind mounts are kept)")
            if found.status == "running":
                found.stop(timeout=STOP_TIMEOUT)
            found.remove(v=False)
        self.create(say, image)

    def made_meanwhile(self) -> Any:
        """The container another create holds the name for: the engine reserves the name
        before the container can be asked for (seconds on vfs, which copies the image's
        files first; tens of seconds on a busy host): asked again until MEANWHILE_WAIT."""
        import time  # here: only a race pays for it

        deadline = time.monotonic() + MEANWHILE_WAIT
        while True:
            found = self.find()
            if found is not None or time.monotonic() > deadline:
                return found
            time.sleep(0.2)

    # -- commits: the container's snapshots -------------------------------------------------
    def snapshot(
        self,
        *,
        generation: str | None,
        lock: str,
        applying: str,
        on_progress: Callable[[str], None] | None,
    ) -> str | None:
        """Commit the container to envlock-<name>:<generation>-<time> before an apply changes
        anything, then prune envlock's oldest commits beyond keep-commits."""
        if not self.spec.commit_before_apply:
            return None
        found = self.find()
        if found is None:
            return None  # nothing to go back to
        say = on_progress or quiet
        tag = commit_tag(generation, datetime.now(timezone.utc), self.tags())
        name = f"{self.spec.repository}:{tag}"
        say(f"committing {self.describe()} to {name}")
        with self.errors():
            found.commit(
                repository=self.spec.repository,
                tag=tag,
                message=commit_message(generation, lock, applying),
                pause=True,
            )
        self.prune(say)
        return name

    def images(self) -> list[Any]:
        """envlock's commits of this container, oldest first."""
        with self.errors():
            found = self.client.images.list(name=self.spec.repository)
        return sorted(found, key=lambda image: image.attrs.get("Created", ""))

    def tags(self) -> set[str]:
        return {tag.split(":", 1)[1] for image in self.images() for tag in image.tags}

    def prune(self, say: Callable[[str], None]) -> None:
        prune_oldest(
            self.images(),
            self.spec.keep_commits,
            key=self.keep_key,
            say=say,
            describe=lambda image: f"removing image {', '.join(image.tags)}",
            remove=self.remove_image,
        )

    def remove_image(self, image: Any) -> None:
        with self.errors():
            for tag in image.tags:
                self.client.images.remove(tag, noprune=False)

    def snapshots(self) -> list[ContainerSnapshot]:
        return [listed(tag, image.attrs) for image in self.images() for tag in image.tags]

    def rollback(self, name: str | None, on_progress: Callable[[str], None] | None) -> str:
        """Recreate the container from a commit (default: envlock's newest), volumes kept."""
        say = on_progress or quiet
        if not name:
            ours = [s.name for s in self.snapshots()]
            if not ours:
                raise UsageError(
                    f"{self.describe()} has no envlock commit",
                    hint="apply commits it before a change (commit-before-apply = true in "
                    "[docker]), or name an image: --container --snapshot IMAGE",
                )
            name = ours[-1]
        found = self.find()
        if found is None:
            self.create(say, name)
        else:
            self.recreate(found, name, say)
        return name


def lower(request: dict[str, Any]) -> dict[str, Any]:
    """DeviceRequest's keyword names for the engine's field names."""
    names = {"Driver": "driver", "Count": "count", "DeviceIDs": "device_ids"}
    names.update({"Capabilities": "capabilities", "Options": "options"})
    return {names[key]: value for key, value in request.items()}


def recreated(subject: str, image: str, changed: list[Difference]) -> str:
    keys = ", ".join(f"{d.key} {d.actual} → {d.expected}" for d in changed)
    return f"recreated {subject} from {image} ({keys}); its volumes kept"


def commit_tag(generation: str | None, now: datetime, taken: set[str]) -> str:
    """`<generation number>-<UTC yyyymmddHHMMSS>`, unique among `taken`."""
    return restore_point_name("", generation, now, taken)


def commit_message(generation: str | None, lock: str, applying: str) -> str:
    return restore_point_record("committed", generation, lock, applying)


def listed(tag: str, attrs: dict[str, Any]) -> ContainerSnapshot:
    fields = dict(re.findall(r"^(generation|lock): (.*)$", attrs.get("Comment") or "", re.M))
    created = str(attrs.get("Created") or "")
    return ContainerSnapshot(
        name=tag,
        taken=created[:19].replace("T", " "),
        generation=fields.get("generation", ""),
        lock=fields.get("lock", ""),
        ours=True,
    )
