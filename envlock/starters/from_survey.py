"""`init --from VENV`: an existing environment, surveyed by the agent from its files alone,
becomes a starter profile; its lock is then compared with what is installed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlparse

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from envlock.profile.read import BACKEND_RE, TORCH_FAMILY

# Seeded into every `python -m venv` and not part of what the environment is for; a
# generation gets envlock's pip shim over uv instead.
VENV_SEED = frozenset({"pip", "setuptools", "wheel"})


@dataclass(frozen=True)
class Installed:
    name: str
    version: str
    requires: tuple[str, ...]
    installer: str | None
    direct_url: dict[str, Any] | None

    @property
    def unreproducible(self) -> str | None:
        """Why an index cannot give this distribution back, or None when one can."""
        url = self.direct_url
        if url is None or local_wheel_dir(url) is not None:
            return None
        if url["editable"]:
            return f"an editable install of {url['url']}"
        return {"vcs": "a VCS checkout", "dir": "a local directory"}.get(
            url["kind"], "a direct URL"
        ) + f" ({url['url']})"


@dataclass(frozen=True)
class Survey:
    """What the agent found in the venv."""

    venv: str
    python_version: str
    torch: dict[str, Any] | None
    installed: dict[str, Installed]
    managed: bool
    # The venv's base interpreter (pyvenv.cfg's home + pythonX.Y) when the target lacks it.
    missing_interpreter: str | None = None

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Survey:
        installed: dict[str, Installed] = {
            canonicalize_name(name): Installed(
                name=canonicalize_name(name),
                version=str(info.get("version", "")),
                requires=tuple(str(r) for r in info.get("requires", [])),
                installer=info.get("installer"),
                direct_url=info.get("direct_url"),
            )
            for name, info in raw.get("distributions", {}).items()
        }
        return cls(
            venv=str(raw["venv"]),
            python_version=str(raw.get("python", {}).get("version", "")),
            torch=raw.get("torch"),
            installed=installed,
            managed=bool(raw.get("managed")),
            missing_interpreter=missing_interpreter(raw.get("python", {})),
        )


@dataclass(frozen=True)
class Import:
    """The profile's declarations drawn from a survey, and what could not be carried."""

    python: str
    torch: str | None
    backend: str | None
    torch_packages: tuple[str, ...]
    packages: tuple[str, ...]
    find_links: tuple[str, ...]
    left_out: dict[str, str] = field(default_factory=dict)  # name -> why no index has it
    seeded: tuple[str, ...] = ()  # pip, setuptools: the venv's tooling, not carried over


def minor_version(version: str) -> str:
    parts = version.split(".")
    return ".".join(parts[:2]) if len(parts) >= 2 and all(p.isdigit() for p in parts[:2]) else ""


def torch_backend(build: dict[str, Any]) -> str:
    """The profile's backend for a torch build: its local label (cpu, cu128, …), or `pypi`
    for PyPI's own wheels, which carry no label in their metadata."""
    label = str(build.get("version", "")).partition("+")[2]
    return label if label and BACKEND_RE.fullmatch(label) else "pypi"


def required_names(installed: dict[str, Installed]) -> set[str]:
    """Every distribution some other installed one requires (extras' requirements aside)."""
    needed: set[str] = set()
    for dist in installed.values():
        for text in dist.requires:
            try:
                req = Requirement(text)
            except InvalidRequirement:
                continue
            if req.marker is None or _evaluates(req, {"extra": ""}):
                needed.add(canonicalize_name(req.name))
    return needed


def _evaluates(req: Requirement, environment: dict[str, str]) -> bool:
    try:
        return req.marker is None or req.marker.evaluate(environment)
    except Exception:  # a marker this packaging cannot judge: count it as required
        return True


def import_survey(survey: Survey) -> Import:
    """Top-level distributions (those nothing else requires), pinned `==`; the torch family
    under [torch]; wheels installed from a local directory bring that directory as
    find-links; what no index can give back is left out, with why."""
    needed = required_names(survey.installed)
    torch_packages: list[str] = []
    packages: list[str] = []
    find_links: list[str] = []
    left_out: dict[str, str] = {}
    seeded: list[str] = []
    for name, dist in sorted(survey.installed.items()):
        if name == "torch" or name in needed:
            continue
        if name in VENV_SEED:
            seeded.append(name)
            continue
        why = dist.unreproducible
        if why is not None:
            left_out[name] = f"{why}: no index serves it; build a wheel and add its directory "
            left_out[name] += "to [dependencies] find-links"
            continue
        pin = f"{name}=={public(dist.version)}"
        (torch_packages if name in TORCH_FAMILY else packages).append(pin)
    for dist in survey.installed.values():  # a dependency may come from a local wheel too
        directory = local_wheel_dir(dist.direct_url)
        if directory is not None and directory not in find_links:
            find_links.append(directory)
    torch = survey.torch
    return Import(
        python=minor_version(survey.python_version),
        torch=public(str(torch["version"])) if torch else None,
        backend=torch_backend(torch) if torch else None,
        torch_packages=tuple(torch_packages),
        packages=tuple(packages),
        find_links=tuple(find_links),
        left_out=left_out,
        seeded=tuple(seeded),
    )


def public(version: str) -> str:
    try:
        return Version(version).public
    except InvalidVersion:
        return version


def local_wheel_dir(url: dict[str, Any] | None) -> str | None:
    """The directory of a wheel installed from a local file, else None."""
    if not url or url.get("kind") != "archive":
        return None
    parsed = urlparse(str(url.get("url", "")))
    path = unquote(parsed.path)
    if parsed.scheme != "file" or not path.endswith(".whl"):
        return None
    return path.rsplit("/", 1)[0] or "/"


@dataclass(frozen=True)
class Comparison:
    """The lock against the installed environment, by distribution name."""

    same: tuple[str, ...]
    moved: dict[str, tuple[str, str]]  # name -> (installed, locked)
    not_locked: dict[str, str]  # name -> installed version
    added: dict[str, str]  # name -> locked version

    @property
    def exact(self) -> bool:
        return not (self.moved or self.not_locked or self.added)

    def to_json(self) -> dict[str, Any]:
        return {
            "exact": self.exact,
            "same": len(self.same),
            "moved": {k: {"installed": a, "locked": b} for k, (a, b) in self.moved.items()},
            "not_locked": self.not_locked,
            "added": self.added,
        }


def compare(installed: dict[str, Installed], locked: dict[str, str]) -> Comparison:
    """Versions are compared as the lock writes them (local labels included)."""
    same, moved, not_locked = [], {}, {}
    for name, dist in sorted(installed.items()):
        if name not in locked:
            not_locked[name] = dist.version
        elif _same_version(dist.version, locked[name]):
            same.append(name)
        else:
            moved[name] = (dist.version, locked[name])
    added = {name: v for name, v in sorted(locked.items()) if name not in installed}
    return Comparison(tuple(same), moved, not_locked, added)


def _same_version(a: str, b: str) -> bool:
    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b


def missing_interpreter(python: dict[str, Any]) -> str | None:
    """The base interpreter pyvenv.cfg names when the survey found it absent, else None."""
    path = python.get("interpreter")
    return str(path) if path and python.get("interpreter_exists") is False else None
