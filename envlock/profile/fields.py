"""The rules a profile's fields are checked by, shared by the profile's readers (profile.py,
profile_packages.py) and by what validates the same kinds of values elsewhere (the lock's
schema, `init --from`'s importer, `run --env`): names, versions, platforms, backends, the
environment variables envlock composes itself, and requirement lists."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, NoReturn

from packaging.version import Version

from envlock.base.tomlread import Table, shown, suggest_value
from envlock.errors import ProfileError
from envlock.profile.verdict import Names, cached_names, remember_names

if TYPE_CHECKING:
    from packaging.requirements import Requirement

# Matched with fullmatch: "$" would also accept a value that ends in a newline.
NAME_RE = re.compile(r"[a-z0-9][a-z0-9_-]*")
BACKEND_RE = re.compile(r"cpu|cu\d{2,3}|rocm\d+\.\d+(\.\d+)?|xpu|pypi")
PLATFORM_RE = re.compile(
    r"linux|(x86_64|aarch64)-(manylinux2014|manylinux_2_\d+|unknown-linux-(gnu|musl))"
)
PYTHON_RE = re.compile(r"3\.\d+(\.\d+)?")
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


def raise_profile(path: str, message: str, hint: str | None = None) -> NoReturn:
    raise ProfileError(path, message, hint=hint)


class RequirementNames:
    """The names of a list of requirements (`packages`), each text validated by the parser
    (`requirement_of`) as it is reached, or all at once from profile_cache when this very list
    was accepted before."""

    def __init__(self, t: Table, texts: list[str]) -> None:
        self.t, self.texts = t, texts
        self.cached = cached_names(texts)
        self.parsed: Names = []

    def at(self, index: int) -> tuple[str, str]:
        if self.cached is not None:
            return self.cached[index]
        from packaging.utils import canonicalize_name  # (its tags module): on a miss only

        req = requirement_of(self.t, f"packages[{index}]", self.texts[index])
        self.parsed.append((req.name, canonicalize_name(req.name)))
        return self.parsed[-1]

    def all(self) -> Names:
        return [self.at(index) for index in range(len(self.texts))]

    def remember(self) -> None:
        """Once every text passed (and the list's own rules): keep the verdict."""
        if self.cached is None and len(self.parsed) == len(self.texts):
            remember_names(self.texts, self.parsed)


def requirement_of(t: Table, key: str, text: str) -> Requirement:
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


def check_url(t: Table, key: str, url: str) -> None:
    t.plain(key, url)
    if not re.fullmatch(r"(https?|file)://\S+", url):
        t.fail(key, f"expected an http(s):// or file:// URL, found {shown(url)}")


def padded_release(text: str, parsed: Version) -> str:
    """ "2.13" → "2.13.0" ("2.13+cpu" → "2.13.0+cpu"): the release padded to three parts."""
    release = ".".join(str(n) for n in (*parsed.release, 0, 0, 0)[:3])
    written = re.match(r"\s*v?[\d.]*\d", text)  # the release as written, then the rest
    return release + (text[written.end() :].strip() if written else "")


def backend_hint(backend: str) -> str | None:
    match = re.match(r"^cuda[-_]?(\d+)\.?(\d*)$", backend.lower())
    if match:
        return f'did you mean "cu{match.group(1)}{match.group(2)}"?'
    return suggest_value(backend, ["cpu", "cu126", "cu128", "cu130", "xpu", "pypi"])


def toml_scalar(value: object) -> str:
    """A scalar as TOML spells it (`true`, not `True`), for hints."""
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9_-]+", "-", name.lower()).strip("-") or "my-env"


def is_within(path: str, parent: str) -> bool:
    return (path.rstrip("/") + "/").startswith(parent.rstrip("/") + "/")
