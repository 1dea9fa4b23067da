"""Fuzzing the profile loader: whatever a TOML file holds, `load_profile` returns a Profile or
raises a UsageError (ProfileError is one) — any other exception is a traceback for a user.

The documents are the shipped profiles and the bad-profile corpus, mutated: tables and keys
deleted, values replaced by random strings (any Unicode, NUL and newlines included), integers,
floats, dates, booleans, arrays and tables, and keys added; a second test also splices
random bytes into the file's text.
"""

from __future__ import annotations

import copy
import datetime
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envlock.errors import UsageError
from envlock.profile.read import Profile, load_profile

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - 3.10 only
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]
SEED_FILES = [
    *sorted((REPO / "profiles").glob("*.toml")),
    *sorted((REPO / "tests" / "bad_profiles").glob("*.toml")),
]


def parsed_seeds(files: list[Path]) -> list[dict[str, Any]]:
    seeds = []
    for path in files:
        if path.name == "expected.toml" or path.name.startswith("pylock."):
            continue
        try:
            seeds.append(tomllib.loads(path.read_text()))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError):
            continue  # the corpus's syntax errors; the byte test covers broken text
    return seeds


SEEDS = parsed_seeds(SEED_FILES)
# The valid examples, drawn half the time: their mutations get past the first checks.
GOOD_SEEDS = parsed_seeds(sorted((REPO / "profiles").glob("*.toml")))
# Every key the schema knows, so that mutations reach deep validation, not just "unknown key".
KNOWN_KEYS = sorted(
    {key for seed in SEEDS for table in seed.values() if isinstance(table, dict) for key in table}
    | {"allow-insecure-ssh", "download", "pass-env", "count", "keep-snapshots", "source", "ro"}
    | {"run", "gpu", "mounts", "ssh-options", "user", "port", "identity-file", "token-id"}
)
TABLES = ["profile", "target", "python", "torch", "dependencies", "cache", "env", "scripts"]
TABLES += ["container", "run", "gpu"]
MOSTLY_KEYS = ["set-key", "set-key", "set-key", "drop-key", "drop-table"]
# Values that sit on the schema's edges: injections, control characters, near-valid strings.
EDGE_STRINGS = [
    "",
    "\0",
    "a\nb",
    "\u2028",
    "-oProxyCommand=id",
    "ProxyCommand=id",
    "StrictHostKeyChecking=no",
    "/",
    "..",
    "/dev/nvidia0,mode=0666",
    "/srv/x,mp=/etc",
    "/dev/nvidia0",
    "local",
    "ssh",
    "proxmox-lxc",
    "cu128",
    "rocm6.4",
    "pypi",
    "3.11",
    "3.12\n",
    "2.11.0",
    "2.11.0+cu126",
    "torch",
    "torch<2",
    "numpy>=1.26",
    "pkg @ https://x.example/p.whl",
    "https://pve1.example:8006",
    "file:///tmp",
    "~",
    "~/x",
    "root@pam",
    "WANDB_API_KEY",
    "local-lvm:64",
    "x86_64-manylinux_2_28",
    "dflash",
    "*.py",
]

scalars = st.one_of(
    st.text(max_size=24),
    st.sampled_from(EDGE_STRINGS),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.sampled_from([0, 1, 22, 100, 65536]),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.dates(),
)
keys = st.one_of(st.sampled_from(KNOWN_KEYS), st.text(max_size=12))
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=4)),
    max_leaves=12,
)


@st.composite
def documents(draw: st.DrawFn) -> dict[str, Any]:
    """A seed profile with one to four mutations."""
    seeds = GOOD_SEEDS if draw(st.booleans()) else SEEDS
    doc: dict[str, Any] = copy.deepcopy(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        mutate(draw, doc)
    return doc


def mutate(draw: st.DrawFn, doc: dict[str, Any]) -> None:
    # Mostly edits inside the tables a profile has or may have: a random table name or a
    # whole table replaced stops the loader at its first check, which teaches little.
    rare = draw(st.integers(min_value=0, max_value=9)) == 0
    name = draw(keys if rare else st.sampled_from(sorted(set(doc) | set(TABLES))))
    action = draw(st.sampled_from(["drop-table", "replace-table"] if rare else MOSTLY_KEYS))
    if action == "drop-table":
        doc.pop(name, None)
    elif action == "replace-table":
        doc[name] = draw(values)
    else:
        table = doc.get(name)
        if not isinstance(table, dict):
            table = doc[name] = {}
        key = draw(st.one_of(st.sampled_from(sorted(table) or KNOWN_KEYS), keys))
        if action == "drop-key":
            table.pop(key, None)
        else:
            table[key] = draw(values)


def to_toml(doc: dict[str, Any]) -> str:
    """TOML text for a document: plain keys first, then one [table] per dict."""
    lines = [f"{quoted(k)} = {inline(v)}" for k, v in doc.items() if not isinstance(v, dict)]
    for name, table in doc.items():
        if isinstance(table, dict):
            lines.append(f"[{quoted(name)}]")
            lines += [f"{quoted(k)} = {inline(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


def inline(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, datetime.date)):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return quoted(value)
    if isinstance(value, list):
        return "[" + ", ".join(inline(item) for item in value) + "]"
    assert isinstance(value, dict), value
    return "{" + ", ".join(f"{quoted(k)} = {inline(v)}" for k, v in value.items()) + "}"


def quoted(text: str) -> str:
    """A TOML basic string; control characters as \\uXXXX escapes, which TOML accepts."""
    out = []
    for char in text:
        if char in '"\\':
            out.append("\\" + char)
        elif ord(char) < 32 or ord(char) == 127:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where mutated profiles are written, with the example profile's script directory
    beside them so that [scripts] is validated in full rather than failing on `source`."""
    path = tmp_path_factory.mktemp("fuzz")
    (path / "dflash").symlink_to(REPO / "profiles" / "dflash")
    return path


def load_or_refuse(path: Path) -> None:
    """The property: a Profile, or a UsageError with a message; anything else escapes."""
    try:
        profile = load_profile(path)
    except UsageError as exc:
        assert str(exc).strip(), "an error without a message"
        return
    assert isinstance(profile, Profile)


FUZZ = settings(
    max_examples=300,
    deadline=None,
    database=None,  # the working tree is shared: no .hypothesis/ directory in it
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def test_seeds_are_there() -> None:
    assert len(SEEDS) >= 30
    assert GOOD_SEEDS
    assert all(isinstance(seed, dict) for seed in SEEDS)


@FUZZ
@given(doc=documents())
def test_mutated_documents_load_or_refuse(workdir: Path, doc: dict[str, Any]) -> None:
    path = workdir / "fuzz.toml"
    path.write_text(to_toml(doc), encoding="utf-8")
    load_or_refuse(path)


@FUZZ
@given(doc=documents(), at=st.integers(min_value=0), junk=st.binary(min_size=1, max_size=8))
def test_corrupted_bytes_load_or_refuse(
    workdir: Path, doc: dict[str, Any], at: int, junk: bytes
) -> None:
    data = to_toml(doc).encode()
    cut = at % (len(data) + 1)
    path = workdir / "fuzz-bytes.toml"
    path.write_bytes(data[:cut] + junk + data[cut:])
    load_or_refuse(path)
