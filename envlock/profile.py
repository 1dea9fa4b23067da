"""Profiles: the declared environment, parsed from TOML and validated in full.

Every problem is one `ProfileError` that names the file, the table and key, what was
expected and what was found. Nothing here touches a target or writes a file.
"""

from __future__ import annotations

import glob
import hashlib
import os
import platform as host_platform
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, NoReturn

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from envlock.errors import ProfileError
from envlock.profile_cache import Names, cached_names, remember_names
from envlock.schema import PACKAGE_NAME_RE
from envlock.targets.base import Target
from envlock.targets.registry import TARGET_TYPES
from envlock.tomlread import (
    ENV_NAME_RE,
    Table,
    describe,
    load_toml,
    loads_toml,
    shown,
    suggest,
    suggest_value,
)

if TYPE_CHECKING:
    from packaging.requirements import Requirement

    from envlock.proxmox.settings import Container

# Matched with fullmatch: "$" would also accept a value that ends in a newline.
NAME_RE = re.compile(r"[a-z0-9][a-z0-9_-]*")
DATA_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
BACKEND_RE = re.compile(r"cpu|cu\d{2,3}|rocm\d+\.\d+(\.\d+)?|xpu|pypi")
PLATFORM_RE = re.compile(
    r"linux|(x86_64|aarch64)-(manylinux2014|manylinux_2_\d+|unknown-linux-(gnu|musl))"
)
PYTHON_RE = re.compile(r"3\.\d+(\.\d+)?")
PYTORCH_INDEX = "https://download.pytorch.org/whl"
# Packages that PyTorch publishes per backend: they must come from the backend's index.
TORCH_FAMILY = frozenset(
    {
        "torch",
        "torchvision",
        "torchaudio",
        "triton",
        "pytorch-triton",
        "pytorch-triton-rocm",
        "pytorch-triton-xpu",
        "torchtext",
        "torchdata",
    }
)

# Variables that decide which interpreter and standard library `python` is. `envlock run`
# sets them for the generation, so [env] cannot: each with the alternative to offer.
INTERPRETER_ENV = {
    "VIRTUAL_ENV": (
        "envlock sets VIRTUAL_ENV to the active generation, so that the locked interpreter runs",
        "remove it; to run in another environment, give that environment its own profile",
    ),
    "PYTHONHOME": (
        "PYTHONHOME would make the generation's python load another standard library",
        "remove it; to add import directories set PYTHONPATH in [env] "
        "(it is joined after envlock's own)",
    ),
}
# Joined after what envlock puts first, never replacing it (runs/environment.py).
JOINED_ENV = ("PATH", "PYTHONPATH")


def pass_env_refusal(name: str) -> tuple[str, str] | None:
    """(why, what to do) when `[run] pass-env` or `run --env` names a variable envlock
    composes itself: the caller's PATH or PYTHONPATH names this machine's directories."""
    if name in INTERPRETER_ENV:
        return INTERPRETER_ENV[name]
    if name in JOINED_ENV:
        return (
            f"envlock composes {name} for the command, so the caller's cannot be passed",
            f"set {name} in [env]: it is joined after the generation's own entries",
        )
    return None


@dataclass(frozen=True)
class TorchSpec:
    version: str
    backend: str
    index_url: str | None = None
    packages: tuple[str, ...] = ()

    @property
    def local_label(self) -> str | None:
        """The local label the backend's wheels carry (`cu128`, `rocm6.4`), None for PyPI's."""
        return None if self.backend == "pypi" else self.backend

    @property
    def pinned_version(self) -> str:
        label = self.local_label
        return f"{self.version}+{label}" if label and "+" not in self.version else self.version

    @property
    def backend_index(self) -> str | None:
        if self.index_url:
            return self.index_url
        return None if self.backend == "pypi" else f"{PYTORCH_INDEX}/{self.backend}"

    def requirements(self) -> list[str]:
        return [f"torch=={self.pinned_version}", *self.packages]


@dataclass(frozen=True)
class Dependencies:
    packages: tuple[str, ...] = ()
    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    offline: bool = False
    # Packages that may be built from their sdist (normalised names); all else is wheels.
    build: tuple[str, ...] = ()


@dataclass(frozen=True)
class Scripts:
    source: Path
    dest: str
    files: tuple[str, ...]

    def resolve(self) -> list[Path]:
        """Every script file the globs match, sorted, relative paths under `source`."""
        found: set[Path] = set()
        for pattern in self.files:
            matches = [Path(p) for p in glob.glob(str(self.source / pattern), recursive=True)]
            found.update(m.relative_to(self.source) for m in matches if m.is_file())
        return sorted(found)


@dataclass(frozen=True)
class Profile:
    path: Path
    name: str
    description: str
    target: Target
    python_version: str
    python_platform: str
    torch: TorchSpec | None
    dependencies: Dependencies
    cache_dir: str
    env: dict[str, str]
    scripts: Scripts | None
    container: Container | None
    # [python] download: whether uv may download a managed CPython for the environment.
    python_download: bool = False
    # [run] pass-env: variables `envlock run` passes through from the caller's environment.
    pass_env: tuple[str, ...] = ()
    # [gpu] count: how many GPUs the environment expects to see; None when not declared.
    gpu_count: int | None = None
    # [data]: the datasets a run reads (name -> file, directory or glob on the target),
    # fingerprinted by snapshots and `envlock data`.
    data: dict[str, str] = field(default_factory=dict)
    sha256: str = field(repr=False, default="")

    @property
    def lock_path(self) -> Path:
        return self.path.parent / f"pylock.{self.name}.toml"

    def script_hashes(self) -> dict[str, str]:
        """sha256 of every pinned script source, keyed by its path relative to `source`."""
        if self.scripts is None:
            return {}
        return {
            str(rel): hashlib.sha256((self.scripts.source / rel).read_bytes()).hexdigest()
            for rel in self.scripts.resolve()
        }


def load_profile(path: str | os.PathLike[str]) -> Profile:
    """Parse and validate a profile file; raises ProfileError on the first problem."""
    file = Path(path)
    data = load_toml(file)
    return _ProfileReader(file, data).read()


def parse_profile(path: str | os.PathLike[str], text: str) -> Profile:
    """Validate profile `text` as if it were the file at `path` (which need not exist)."""
    return _ProfileReader(
        Path(path), loads_toml(Path(path), text.encode()), raw=text.encode()
    ).read()


class _ProfileReader:
    TABLES = (
        "profile",
        "target",
        "container",
        "python",
        "torch",
        "dependencies",
        "cache",
        "env",
        "scripts",
        "run",
        "gpu",
        "data",
    )

    def __init__(self, path: Path, data: dict[str, Any], raw: bytes | None = None) -> None:
        self.path = path
        self.raw = raw  # the file's bytes, when they are not (yet) in the file
        self.label = str(path)
        self.root = Table(self.label, "", data)

    def table(self, name: str) -> Table | None:
        value = self.root.raw(name, None)
        if value is None:
            return None
        if not isinstance(value, dict):
            raise_profile(self.label, f"[{name}] must be a table, found {describe(value)}")
        return Table(self.label, name, value)

    def read(self) -> Profile:
        for key in self.root.data:
            if key in self.TABLES:
                continue
            if not isinstance(self.root.data[key], dict):
                raise_profile(
                    self.label,
                    f"unknown top-level key `{key}`: every setting belongs in a table",
                    f"put `{key} = ...` under the table it belongs to ([profile], [target], ...)",
                )
            hint = suggest(key, list(self.TABLES), what="tables")
            raise_profile(self.label, f"unknown table [{key}]", hint)
        profile_t = self.required_table("profile")
        name = profile_t.string("name")
        if not NAME_RE.fullmatch(name):
            profile_t.fail(
                "name",
                'expected lowercase letters, digits, "-" and "_" (starting with a letter or digit),'
                f" found {shown(name)}",
                hint=f"it becomes pylock.<name>.toml; try `{_slug(name)}`",
            )
        description = profile_t.string("description", "")
        profile_t.finish()

        target = self.read_target(name)
        python_version, python_platform, python_download = self.read_python(target)
        torch = self.read_torch()
        deps = self.read_dependencies(torch)
        container = self.read_container(target)
        cache_dir = self.read_cache(target)
        env = self.read_env()
        scripts = self.read_scripts(target)
        pass_env = self.read_run(env)
        gpu_count = self.read_gpu()
        data = self.read_data(target)
        return Profile(
            path=self.path.resolve(),
            name=name,
            description=description,
            target=target,
            python_version=python_version,
            python_platform=python_platform,
            torch=torch,
            dependencies=deps,
            cache_dir=cache_dir,
            env=env,
            scripts=scripts,
            container=container,
            python_download=python_download,
            pass_env=pass_env,
            gpu_count=gpu_count,
            data=data,
            sha256=hashlib.sha256(
                self.path.read_bytes() if self.raw is None else self.raw
            ).hexdigest(),
        )

    def required_table(self, name: str) -> Table:
        table = self.table(name)
        if table is None:
            raise_profile(
                self.label,
                f"missing required table [{name}]",
                f"add a [{name}] table (see the profile reference in the README)",
            )
        return table

    # -- [target] ---------------------------------------------------------------------------
    def read_target(self, name: str) -> Target:
        t = self.required_table("target")
        kind = t.string("type")
        target_type = TARGET_TYPES.get(kind)
        if target_type is None:
            t.fail(
                "type",
                f"expected one of {', '.join(TARGET_TYPES)}, found {shown(kind)}",
                hint=suggest_value(kind, list(TARGET_TYPES)),
            )
        remote = target_type.remote
        default_root = None if remote else f"~/.local/share/envlock/{name}"
        root = self.path_value(t, "root", default_root, absolute=remote)
        venv = self.path_value(t, "venv", str(PurePosixPath(root) / "venv"), absolute=remote)
        settings = target_type.read_settings(t, lambda value: str(self.local_path(value)))
        t.finish()
        if _is_within(venv, root + "/generations") or venv.rstrip("/") == root.rstrip("/"):
            t.fail(
                "venv",
                f'"{venv}" must not be the root or inside its generations',
                hint="use a path such as <root>/venv or /opt/venv",
            )
        return Target(target_type, root, venv, settings)

    def path_value(self, t: Table, key: str, default: Any, *, absolute: bool) -> Any:
        value = t.text(key, default) if default is not None else t.text(key)
        if absolute and not value.startswith("/"):
            t.fail(
                key,
                f"expected an absolute path on the target, found {shown(value)}",
                hint=f'write it from the filesystem root, e.g. "/{value.lstrip("./~")}"',
            )
        if not absolute:
            value = str(self.local_path(value))
        return value

    def local_path(self, value: str) -> Path:
        """A controller-side path: `~` expanded, relative paths taken from the profile's dir."""
        expanded = Path(os.path.expanduser(value))
        full = expanded if expanded.is_absolute() else self.path.parent.resolve() / expanded
        return Path(os.path.normpath(full))

    # -- [python] ---------------------------------------------------------------------------
    def read_python(self, target: Target) -> tuple[str, str, bool]:
        t = self.required_table("python")
        version = t.string("version")
        if not PYTHON_RE.fullmatch(version):
            t.fail("version", f'expected a Python version such as "3.11", found {shown(version)}')
        default_platform = "x86_64-manylinux_2_28"
        if not target.remote:
            default_platform = f"{host_platform.machine()}-manylinux_2_28"
        plat = t.string("platform", default_platform)
        if not PLATFORM_RE.fullmatch(plat):
            t.fail(
                "platform",
                f'expected a Linux platform such as "x86_64-manylinux_2_28", found {shown(plat)}',
            )
        download = t.boolean("download", False)
        t.finish()
        return version, plat, download

    # -- [torch] ----------------------------------------------------------------------------
    def read_torch(self) -> TorchSpec | None:
        t = self.table("torch")
        if t is None:
            return None
        version = t.string("version")
        try:
            parsed = Version(version)
        except InvalidVersion:
            t.fail("version", f'expected a torch version such as "2.11.0", found {shown(version)}')
        if len(parsed.release) < 3:
            # torch releases always have three parts; uv would look for "2.13" on the network.
            t.fail(
                "version",
                f'expected a torch version such as "2.11.0", found {shown(version)}',
                hint=f'did you mean "{padded_release(version, parsed)}"?',
            )
        backend = t.raw(
            "backend",
            required_because="a torch version needs a backend: "
            "cpu, cu126, cu128, cu130, rocm6.4, xpu or pypi",
        )
        if not isinstance(backend, str):
            t.fail("backend", f"expected a string, found {describe(backend)}")
        if not BACKEND_RE.fullmatch(backend):
            t.fail(
                "backend",
                f"expected cpu, cuXYZ (e.g. cu128), rocmX.Y, xpu or pypi, found {shown(backend)}",
                hint=_backend_hint(backend),
            )
        if parsed.local and parsed.local != backend:
            t.fail(
                "version",
                f'local label "+{parsed.local}" contradicts backend "{backend}"',
                hint=f'write version = "{parsed.public}" and let the backend set the label',
            )
        index_url = t.string("index-url", None)
        if index_url is not None:
            _check_url(t, "index-url", index_url)
        packages = t.texts("packages", [])
        seen: dict[str, str] = {"torch": "[torch] version"}
        names = _Names(t, packages)
        for index, text in enumerate(packages):
            written, name = names.at(index)
            if name == "torch":
                t.fail(
                    f"packages[{index}]",
                    "torch itself is pinned by [torch] version",
                    hint="remove it from [torch] packages",
                )
            if name in seen:
                t.fail(f"packages[{index}]", f'duplicate package "{written}"')
            seen[name] = text
        names.remember()
        t.finish()
        return TorchSpec(
            version=version, backend=backend, index_url=index_url, packages=tuple(packages)
        )

    # -- [dependencies] ---------------------------------------------------------------------
    def read_dependencies(self, torch: TorchSpec | None) -> Dependencies:
        t = self.table("dependencies")
        if t is None:
            return Dependencies()
        packages = t.texts("packages", [])
        torch_names = (
            {name for _, name in _Names(t, list(torch.packages)).all()} if torch else set()
        )
        seen: set[str] = set()
        names = _Names(t, packages)
        for index, text in enumerate(packages):
            key = f"packages[{index}]"
            written, name = names.at(index)
            if name in seen:
                t.fail(key, f'duplicate package "{written}"', hint="list each package once")
            seen.add(name)
            if torch is not None and name == "torch":
                self.torch_conflict(t, key, _requirement(t, key, text), torch)
            if name in torch_names:
                t.fail(
                    key,
                    f'"{written}" is already in [torch] packages',
                    hint="keep torch-family packages in [torch] packages only",
                )
        names.remember()
        index_url = t.string("index-url", None)
        if index_url is not None:
            _check_url(t, "index-url", index_url)
        extras = t.strings("extra-index-urls", [])
        for index, url in enumerate(extras):
            _check_url(t, f"extra-index-urls[{index}]", url)
        links = [
            self.find_link(t, index, link) for index, link in enumerate(t.texts("find-links", []))
        ]
        build = self.read_build(t)
        offline = t.boolean("offline", False)
        if offline and not links:
            t.fail(
                "offline",
                "offline = true needs at least one entry in find-links",
                hint='add `find-links = ["wheelhouse"]`',
            )
        t.finish()
        return Dependencies(
            packages=tuple(packages),
            index_url=index_url,
            extra_index_urls=tuple(extras),
            find_links=tuple(links),
            offline=offline,
            build=build,
        )

    def read_build(self, t: Table) -> tuple[str, ...]:
        """`build = ["name", ...]`: bare package names, each once (building runs its code)."""
        names = t.strings("build", [])
        found: list[str] = []
        for index, name in enumerate(names):
            key = f"build[{index}]"
            if not PACKAGE_NAME_RE.fullmatch(name):
                t.fail(
                    key,
                    f"expected a package name, found {shown(name)}",
                    hint='a bare name such as "flash-attn": versions belong in packages',
                )
            if canonicalize_name(name) in found:
                t.fail(key, f'duplicate package "{name}"', hint="list each package once")
            found.append(canonicalize_name(name))
        return tuple(found)

    def torch_conflict(self, t: Table, key: str, req: Requirement, torch: TorchSpec) -> None:
        pin = Version(torch.pinned_version)
        if req.specifier and not req.specifier.contains(pin, prereleases=True):
            t.fail(
                key,
                f'"{req}" conflicts with the torch pin {pin} from [torch]',
                hint="remove it; [torch] version decides torch",
            )
        t.fail(key, "torch is pinned by [torch] version", hint="remove it from [dependencies]")

    def find_link(self, t: Table, index: int, link: str) -> str:
        if re.match(r"^[a-z]+://", link):
            return link
        return str(self.local_path(link))

    # -- [container] ------------------------------------------------------------------------
    def read_container(self, target: Target) -> Container | None:
        t = self.table("container")
        if t is None:
            return None
        if target.kind.read_container is None:
            with_container = [k.name for k in TARGET_TYPES.values() if k.read_container]
            t.fail(
                None,
                f"a container only applies to {', '.join(with_container)} targets, "
                f'target type is "{target.type}"',
                hint="remove [container] or set [target] type",
            )
        container: Container = target.kind.read_container(t, target.settings)
        return container

    # -- [cache], [env], [scripts] ----------------------------------------------------------
    def read_cache(self, target: Target) -> str:
        t = self.table("cache")
        default = str(PurePosixPath(target.root) / "cache")
        if t is None:
            return default
        value = self.path_value(t, "dir", default, absolute=target.remote)
        t.finish()
        return value

    def read_env(self) -> dict[str, str]:
        t = self.table("env")
        if t is None:
            return {}
        env: dict[str, str] = {}
        for key, value in t.data.items():
            t.seen.add(key)
            if not ENV_NAME_RE.match(key):
                t.fail(key, "expected an environment variable name (letters, digits, _)")
            if not isinstance(value, str):
                t.fail(
                    key,
                    f"expected a string, found {describe(value)}",
                    hint=None if isinstance(value, dict) else f'quote it: {key} = "{_toml(value)}"',
                )
            if "\0" in value:
                t.fail(key, "environment values cannot contain NUL characters")
            if key in INTERPRETER_ENV:
                t.fail(key, *INTERPRETER_ENV[key])
            env[key] = value
        return env

    def read_data(self, target: Target) -> dict[str, str]:
        """[data] name = "path": a file, a directory or a glob (`*`, `?`, `[…]`, `**`)."""
        t = self.table("data")
        if t is None:
            return {}
        data: dict[str, str] = {}
        for key in list(t.data):
            if not DATA_NAME_RE.fullmatch(key):
                t.fail(key, 'expected a dataset name (letters, digits, "-" and "_")')
            data[key] = self.path_value(t, key, None, absolute=target.remote)
        t.finish()
        return data

    def read_scripts(self, target: Target) -> Scripts | None:
        t = self.table("scripts")
        if t is None:
            return None
        source = self.local_path(t.text("source", "."))
        dest = self.path_value(t, "dest", None, absolute=target.remote)
        files = t.texts("files")
        if not files:
            t.fail("files", "expected at least one file or glob")
        t.finish()
        if not source.is_dir():
            t.fail(
                "source",
                f'"{source}" is not a directory',
                hint="source is relative to the profile's directory",
            )
        scripts = Scripts(source=source, dest=dest, files=tuple(files))
        for pattern in files:
            if not glob.glob(str(source / pattern), recursive=True):
                t.fail("files", f'"{pattern}" matches no file under {source}')
        return scripts

    # -- [run], [gpu] -----------------------------------------------------------------------
    def read_run(self, env: dict[str, str]) -> tuple[str, ...]:
        t = self.table("run")
        if t is None:
            return ()
        names = t.strings("pass-env", [])
        for index, name in enumerate(names):
            key = f"pass-env[{index}]"
            if not ENV_NAME_RE.match(name):
                t.fail(
                    key,
                    f"expected an environment variable name, found {shown(name)}",
                    hint="letters, digits and _, not starting with a digit",
                )
            if name in names[:index]:
                t.fail(key, f'duplicate variable "{name}"', hint="list each variable once")
            refusal = pass_env_refusal(name)
            if refusal:
                t.fail(key, *refusal)
            if name in env:
                # Which value would win is a guess nobody should have to make.
                t.fail(
                    key,
                    f"expected a variable that [env] does not set, found {name} (set in [env])",
                    hint=f"either set {name} in [env] or pass it from the caller, not both",
                )
        t.finish()
        return tuple(names)

    def read_gpu(self) -> int | None:
        t = self.table("gpu")
        if t is None:
            return None
        count: int = t.integer("count", minimum=1)
        t.finish()
        return count


def raise_profile(path: str, message: str, hint: str | None = None) -> NoReturn:
    raise ProfileError(path, message, hint=hint)


class _Names:
    """The names of a list of requirements (`packages`), each text validated by the parser
    (`_requirement`) as it is reached, or all at once from profile_cache when this very list
    was accepted before."""

    def __init__(self, t: Table, texts: list[str]) -> None:
        self.t, self.texts = t, texts
        self.cached = cached_names(texts)
        self.parsed: Names = []

    def at(self, index: int) -> tuple[str, str]:
        if self.cached is not None:
            return self.cached[index]
        req = _requirement(self.t, f"packages[{index}]", self.texts[index])
        self.parsed.append((req.name, canonicalize_name(req.name)))
        return self.parsed[-1]

    def all(self) -> Names:
        return [self.at(index) for index in range(len(self.texts))]

    def remember(self) -> None:
        """Once every text passed (and the list's own rules): keep the verdict."""
        if self.cached is None and len(self.parsed) == len(self.texts):
            remember_names(self.texts, self.parsed)


def _requirement(t: Table, key: str, text: str) -> Requirement:
    """`text` as PEP 508 (the parser loads here: a profile's lists usually come from
    profile_cache), refused with the parser's own words."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        req = Requirement(text)
    except InvalidRequirement as exc:
        t.fail(
            key,
            f'invalid requirement "{text}": {exc}',
            hint='write it as PEP 508, e.g. "transformers==4.57.1" or "datasets>=3"',
        )
    try:
        SpecifierSet(str(req.specifier))
    except InvalidSpecifier:  # pragma: no cover - Requirement already checks this
        t.fail(key, f'invalid version specifier in "{text}"')
    if req.url:
        t.fail(
            key,
            f'direct URL requirements cannot be locked with hashes: "{text}"',
            hint="put the wheel in find-links instead",
        )
    return req


def _check_url(t: Table, key: str, url: str) -> None:
    t.plain(key, url)
    if not re.fullmatch(r"(https?|file)://\S+", url):
        t.fail(key, f"expected an http(s):// or file:// URL, found {shown(url)}")


def padded_release(text: str, parsed: Version) -> str:
    """ "2.13" → "2.13.0" ("2.13+cpu" → "2.13.0+cpu"): the release padded to three parts."""
    release = ".".join(str(n) for n in (*parsed.release, 0, 0, 0)[:3])
    written = re.match(r"\s*v?[\d.]*\d", text)  # the release as written, then the rest
    return release + (text[written.end() :].strip() if written else "")


def _backend_hint(backend: str) -> str | None:
    match = re.match(r"^cuda[-_]?(\d+)\.?(\d*)$", backend.lower())
    if match:
        return f'did you mean "cu{match.group(1)}{match.group(2)}"?'
    return suggest_value(backend, ["cpu", "cu126", "cu128", "cu130", "xpu", "pypi"])


def _toml(value: object) -> str:
    """A scalar as TOML spells it (`true`, not `True`), for hints."""
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9_-]+", "-", name.lower()).strip("-") or "my-env"


def _is_within(path: str, parent: str) -> bool:
    return (path.rstrip("/") + "/").startswith(parent.rstrip("/") + "/")
