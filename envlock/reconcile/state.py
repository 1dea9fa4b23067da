"""State: what a target actually has, parsed once from the agent's probe into small types.

Nothing past `parse_state` reads the probe's raw JSON (`raw` is kept for debugging output).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Generation:
    number: int
    name: str
    lock_hash: str
    complete: bool
    meta: dict[str, Any] = field(default_factory=dict)
    has_lock: bool = True  # its lock file is still beside it (an old agent does not say)

    @property
    def irreplaceable(self) -> str | None:
        """Why no lock can rebuild this generation (adopted, or its lock file gone), in the
        words every listing and prompt uses; None when its lock can."""
        if self.adopted_from:
            return f"adopted from {self.adopted_from}, no lock can rebuild it"
        if self.complete and not self.has_lock:
            return "its lock file is gone, no lock can rebuild it"
        return None

    @property
    def adopted_from(self) -> str | None:
        """The venv path this generation was adopted from (`apply --adopt`); None when a
        lock built it."""
        value = self.meta.get("adopted_from")
        return value if isinstance(value, str) and value else None


@dataclass(frozen=True)
class Switch:
    """One line of the root's switch history: `current` moved from one generation to another."""

    to: str
    from_: str | None
    action: str  # apply, rollback
    time: str  # UTC, ISO 8601

    def to_json(self) -> dict[str, Any]:
        return {"action": self.action, "from": self.from_, "time": self.time, "to": self.to}


@dataclass(frozen=True)
class Hold:
    """A rollback's hold: the root stays on `generation` until the next apply."""

    generation: str
    from_: str | None
    time: str
    why: str = "rollback"  # or "snapshot": apply --from-snapshot built or chose it

    def to_json(self) -> dict[str, Any]:
        return {"generation": self.generation, "from": self.from_, "time": self.time}


@dataclass(frozen=True)
class FileChange:
    """A file of the generation that differs from its manifest or RECORD."""

    path: str
    dist: str = ""  # the distribution that installed it ("" when no wheel did)
    links: int = 1  # hardlink count: > 1 means uv's cache shares the inode
    why: str = ""
    pth: bool = False


@dataclass(frozen=True)
class FilesReport:
    checked: int = 0
    modified: tuple[FileChange, ...] = ()
    missing: tuple[FileChange, ...] = ()
    added: tuple[FileChange, ...] = ()


@dataclass(frozen=True)
class TorchBuild:
    """torch as installed: from dist-info metadata and torch/version.py, never imported.

    PyPI's CUDA wheels carry no local label: their metadata says `2.11.0` while version.py
    says `2.11.0+cu130`. `version` is the metadata's, `reported` version.py's, and `local`
    the build's label from whichever has one."""

    version: str
    local: str | None = None
    cuda: str | None = None
    hip: str | None = None
    git_version: str | None = None
    cuda_requires: tuple[str, ...] = ()  # the CUDA majors torch's own requirements name
    reported: str | None = None  # torch.__version__, as version.py has it

    @property
    def pypi_build(self) -> bool:
        """A labelled build whose metadata has no label: how PyPI ships CUDA torch."""
        return self.local is not None and "+" not in self.version

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "local": self.local,
            "reported": self.reported,
            "cuda": self.cuda,
            "hip": self.hip,
            "git_version": self.git_version,
            "cuda_requires": list(self.cuda_requires),
        }


@dataclass(frozen=True)
class CacheState:
    """The compile-cache directory of the active build."""

    dir: str
    exists: bool
    files: int = 0
    bytes: int | None = None  # counted only when warmth was asked for
    last_used: float | None = None
    fingerprint: dict[str, Any] = field(default_factory=dict)
    was_warm: bool = False  # it held files at an earlier check: empty now means it went cold

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"dir": self.dir, "fingerprint": self.fingerprint}
        data["exists"] = self.exists
        if self.exists:
            data["files"] = self.files
            if self.bytes is not None:
                data.update(bytes=self.bytes, last_used=self.last_used)
        return data


@dataclass(frozen=True)
class VenvLink:
    """What the profile's stable venv path is: a symlink (and where to), a dir, a file, absent."""

    kind: str
    target: str | None = None
    venv: bool = False  # a directory holding pyvenv.cfg: what `apply --adopt` keeps


@dataclass(frozen=True)
class ScriptsState:
    dest: str
    hashes: dict[str, str | None]  # None: the file is missing


@dataclass(frozen=True)
class UvState:
    """The uv binary envlock pushed to a remote root."""

    present: bool
    ok: bool
    version: str | None = None


@dataclass(frozen=True)
class Host:
    """The machine or container the agent ran on."""

    hostname: str | None = None
    machine: str | None = None  # x86_64, aarch64
    libc: str | None = None
    container: str | None = None  # lxc, docker, … as systemd detects it

    def to_json(self) -> dict[str, Any]:
        return {
            "hostname": self.hostname,
            "machine": self.machine,
            "libc": self.libc,
            "container": self.container,
        }


@dataclass(frozen=True)
class GpuLibrary:
    """A user-space driver library as the loader finds it (libcuda, libnvidia-ml)."""

    name: str
    path: str
    version: str | None  # from the file name (libcuda.so.580.159.04); None when it has none


@dataclass(frozen=True)
class GpuFacts:
    """The NVIDIA driver as the target sees it (the probe's `hardware`), for the GPU rules."""

    driver: str | None = None  # the kernel module's version; None: no NVIDIA driver loaded
    libraries: tuple[GpuLibrary, ...] = ()
    devices: dict[str, str] = field(default_factory=dict)  # path -> char, file, missing, …
    listed: int = 0  # GPUs the driver lists in /proc (in an LXC container: all the host's)
    usable: int = 0  # of those, the ones whose /dev/nvidiaN is a character device here
    smi_error: str | None = None  # nvidia-smi's complaint, e.g. "Failed to initialize NVML: …"


@dataclass(frozen=True)
class Trust:
    """Why the root or the compile-cache dir is not this user's (None: it is), as the
    agent's ownership rule judged it on the target."""

    root: str | None = None
    cache_dir: str | None = None


@dataclass(frozen=True)
class State:
    """A parsed probe answer. `packages` and below are None when no generation is active."""

    raw: dict[str, Any]
    generations: tuple[Generation, ...]
    current: str | None
    in_generation: bool
    venv_link: VenvLink | None
    python_version: str
    packages: dict[str, str] | None
    torch: TorchBuild | None
    files: FilesReport | None
    cache: CacheState | None
    scripts: ScriptsState | None
    hardware: dict[str, Any]
    history: tuple[Switch, ...] = ()
    uv: UvState | None = None
    host: Host = Host()
    gpu: GpuFacts = GpuFacts()
    hold: Hold | None = None
    busy: str | None = None  # another operation holds the root's lock ("pid N on HOST")
    active_lock: str | None = None  # the active generation's own lock text, when asked/held
    # The active generation's python when its real file lies inside the root (planted): the
    # probe then ran in the system python instead (envlock/base/pythons.py).
    refused_python: str | None = None
    # The agent's fingerprint of the root (generations, current, hold, history): a plan
    # carries it, and the agent refuses the plan under the root's lock if it changed.
    root_fingerprint: str = ""
    trust: Trust = Trust()
    # Whether run's startup set is in place on the target (None: not asked).
    startup_ready: bool | None = None
    # Generations a removal renamed away and a crash kept it from deleting (agent/apply.py).
    removing: tuple[str, ...] = ()

    @property
    def current_generation(self) -> Generation | None:
        return next((g for g in self.generations if g.name == self.current), None)

    def complete_with_hash(self, lock_hash: str) -> Generation | None:
        matches = [g for g in self.generations if g.complete and g.lock_hash == lock_hash]
        return matches[-1] if matches else None

    @property
    def next_number(self) -> int:
        return max((g.number for g in self.generations), default=0) + 1


def parse_state(raw: dict[str, Any]) -> State:
    """The probe's JSON answer as typed state (the one place that reads it)."""
    return State(
        raw=raw,
        generations=tuple(
            Generation(
                g["number"],
                g["name"],
                g["lock_hash"],
                g["complete"],
                g.get("meta") or {},
                has_lock=g.get("has_lock", True) is not False,
            )
            for g in raw.get("generations", [])
        ),
        current=raw.get("current"),
        removing=tuple(raw.get("removing") or ()),
        in_generation=bool(raw.get("in_generation")),
        venv_link=_venv_link(raw.get("venv_link")),
        python_version=raw.get("python", {}).get("version", ""),
        refused_python=raw.get("python", {}).get("refused"),
        packages=raw.get("packages"),
        torch=_torch(raw.get("torch")),
        files=_files(raw.get("files")),
        cache=_cache(raw.get("cache")),
        scripts=_scripts(raw.get("scripts")),
        hardware=raw.get("hardware") or {},
        history=tuple(_switch(entry) for entry in raw.get("history", [])),
        uv=_uv(raw.get("uv")),
        host=Host(raw.get("hostname"), raw.get("machine"), raw.get("libc"), raw.get("container")),
        gpu=_gpu(raw.get("hardware")),
        hold=_hold(raw.get("hold")),
        busy=raw["busy"] if isinstance(raw.get("busy"), str) else None,
        active_lock=raw.get("active_lock"),
        root_fingerprint=str(raw.get("root_fingerprint") or ""),
        trust=_trust(raw.get("trust")),
        startup_ready=raw.get("startup_ready"),
    )


def _venv_link(raw: dict[str, Any] | None) -> VenvLink | None:
    if raw is None:
        return None
    return VenvLink(raw.get("kind", "absent"), raw.get("target"), raw.get("venv") is True)


def _torch(raw: dict[str, Any] | None) -> TorchBuild | None:
    if raw is None:
        return None
    return TorchBuild(
        version=raw["version"],
        local=raw.get("local"),
        cuda=raw.get("cuda"),
        hip=raw.get("hip"),
        git_version=raw.get("git_version"),
        cuda_requires=tuple(raw.get("cuda_requires", ())),
        reported=raw.get("reported"),
    )


def _change(item: dict[str, Any]) -> FileChange:
    return FileChange(
        path=item["path"],
        dist=item.get("dist") or "",
        links=item.get("links", 1),
        why=item.get("why", ""),
        pth=bool(item.get("pth")),
    )


def _files(raw: dict[str, Any] | None) -> FilesReport | None:
    if raw is None:
        return None
    return FilesReport(
        checked=raw.get("checked", 0),
        modified=tuple(_change(i) for i in raw.get("modified", [])),
        missing=tuple(_change(i) for i in raw.get("missing", [])),
        added=tuple(_change(i) for i in raw.get("added", [])),
    )


def _trust(raw: dict[str, Any] | None) -> Trust:
    raw = raw or {}
    return Trust(root=raw.get("root"), cache_dir=raw.get("cache_dir"))


def _cache(raw: dict[str, Any] | None) -> CacheState | None:
    if raw is None:
        return None
    return CacheState(
        dir=raw["dir"],
        exists=bool(raw.get("exists")),
        files=raw.get("files", 0),
        bytes=raw.get("bytes"),
        last_used=raw.get("last_used"),
        fingerprint=raw.get("fingerprint") or {},
        was_warm=bool(raw.get("was_warm")),
    )


def _scripts(raw: dict[str, Any] | None) -> ScriptsState | None:
    return None if raw is None else ScriptsState(raw.get("dest", ""), dict(raw.get("hashes", {})))


def _switch(entry: dict[str, Any]) -> Switch:
    return Switch(
        to=entry.get("to", ""),
        from_=entry.get("from"),
        action=entry.get("action", "switch"),
        time=entry.get("time", ""),
    )


def _hold(raw: dict[str, Any] | None) -> Hold | None:
    if not raw:
        return None
    return Hold(
        raw.get("generation", ""), raw.get("from"), raw.get("time", ""), raw.get("why", "rollback")
    )


def _uv(raw: dict[str, Any] | None) -> UvState | None:
    if raw is None:
        return None
    return UvState(bool(raw.get("present")), bool(raw.get("ok")), raw.get("version"))


def _gpu(raw: dict[str, Any] | None) -> GpuFacts:
    raw = raw or {}
    libraries = raw.get("libraries") or {}
    return GpuFacts(
        driver=raw.get("driver"),
        libraries=tuple(
            GpuLibrary(name, lib.get("path", ""), lib.get("version"))
            for name, lib in sorted(libraries.items())
        ),
        devices=dict(raw.get("devices") or {}),
        listed=len(raw.get("boards") or ()),
        usable=int(raw.get("gpu_count") or 0),
        smi_error=raw.get("smi_error"),
    )
