"""Snapshots are data from strangers: malformed and hostile ones through the real CLI.

Every case is a valid snapshot (written by `envlock snapshot`) with one thing changed. `diff`
and `apply --from-snapshot` must refuse it with exit 2 and a message naming the field, never
a traceback, and never run anything it names: the interpreter a hostile lock points
`python-version` at is a script that would leave a canary file behind.
"""

from __future__ import annotations

import copy
import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envlock.errors import UsageError
from envlock.runs.snapshot_file import load_snapshot, snapshot_lock
from tests.conftest import run_envlock
from tests.projects import write_seed_project
from tests.wheelhouse import build_wheelhouse

Doc = dict[str, Any]
Mutation = Callable[[Doc], Any]


class Base:
    """One applied seed project and a valid snapshot of it, shared by the module."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.wheelhouse = build_wheelhouse(work / "wheelhouse")
        self.profile = write_seed_project(work / "p", self.wheelhouse)
        for args in (("lock", self.profile), ("apply", "-y", self.profile)):
            result = run_envlock(*args)
            assert result.returncode == 0, result.stderr
        made = run_envlock("snapshot", self.profile, work / "valid")
        assert made.returncode == 0, made.stderr
        self.doc: Doc = json.loads((work / "valid" / "envlock-snapshot.json").read_text())
        # A stand-in for a hostile interpreter: running it leaves a canary behind.
        self.canary = work / "canary"
        self.evil = work / "evil"
        self.evil.write_text(f"#!/bin/sh\ntouch {self.canary}\n")
        self.evil.chmod(self.evil.stat().st_mode | stat.S_IXUSR)

    def write(self, name: str, mutate: Mutation) -> Path:
        """A checkpoint dir holding the valid snapshot changed by `mutate`."""
        doc = copy.deepcopy(self.doc)
        replaced = mutate(doc)
        directory = self.work / "cases" / name
        directory.mkdir(parents=True, exist_ok=True)
        text = (
            replaced
            if isinstance(replaced, str)
            else json.dumps(doc if replaced is None else replaced)
        )
        (directory / "envlock-snapshot.json").write_text(text)
        return directory


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Base:
    return Base(tmp_path_factory.mktemp("trust"))


def lock_edit(old: str, new: str) -> Mutation:
    def mutate(doc: Doc) -> None:
        assert old in doc["lock"]["text"], old
        doc["lock"]["text"] = doc["lock"]["text"].replace(old, new, 1)

    return mutate


def setting(path: str, value: Any) -> Mutation:
    """Set a field of the document: `a.b.0` (list indexes as numbers), or `a/b/c.py`."""

    def mutate(doc: Doc) -> None:
        *parents, last = path.split("/" if "/" in path else ".")
        node: Any = doc
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        node[int(last) if isinstance(node, list) else last] = value

    return mutate


def deleting(key: str) -> Mutation:
    def mutate(doc: Doc) -> None:
        del doc[key]

    return mutate


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"deeper": value}
    return value


def with_gpu(doc: Doc) -> None:
    doc["hardware"]["gpus"] = [{"name": "H100", "capability": "9.0"}, 7]


WHEEL = 'wheels = [{ url = "file://'
# (case, mutation, what stderr must name)
MALFORMED: list[tuple[str, Mutation, str]] = [
    ("not-json", lambda doc: "{", "not a valid snapshot"),
    ("a-list", lambda doc: [doc], "expected an object, found a list"),
    ("too-deep-json", lambda doc: "[" * 100_000 + "]" * 100_000, "not a valid snapshot"),
    ("schema-string", setting("schema", "1"), 'schema: expected an integer, found "1"'),
    ("schema-2", setting("schema", 2), "unsupported snapshot schema 2"),
    ("no-lock", deleting("lock"), "lock: expected a value, found nothing"),
    ("lock-text-int", setting("lock.text", 3), "lock.text: expected a string, found 3"),
    ("lock-a-string", setting("lock", "pylock"), 'lock: expected an object, found "pylock"'),
    ("no-profile-name", setting("profile", {}), "profile.name: expected a value"),
    ("packages-list", setting("packages", ["torch"]), "packages: expected an object, found a list"),
    ("package-version-int", setting("packages.tinydep", 1), "packages.tinydep: expected a string"),
    ("package-bad-name", setting("packages", {"a b;rm": "1"}), "expected a package name"),
    ("torch-string", setting("torch", "2.11"), 'torch: expected an object, found "2.11"'),
    ("torch-version-null", setting("torch.version", None), "torch.version: expected a string"),
    ("gpus-object", setting("hardware.gpus", {"0": "H100"}), "hardware.gpus: expected a list"),
    ("gpu-number", with_gpu, "hardware.gpus[1]: expected an object, found 7"),
    ("scripts-hashes-string", setting("scripts.sha256", "abc"), "scripts.sha256: expected an"),
    ("script-hash-short", setting("scripts/sha256/train.py", "abc"), "expected a sha256"),
    ("env-int", setting("env", {"NCCL_DEBUG": 1}), "env.NCCL_DEBUG: expected a string, found 1"),
    ("cache-bytes-string", setting("cache.bytes", "big"), "cache.bytes: expected an integer"),
    ("cache-fingerprint-list", setting("cache.fingerprint", []), "cache.fingerprint: expected"),
    ("cache-exists-int", setting("cache.exists", 1), "cache.exists: expected true or false"),
    ("platform-string", setting("platform", "x86_64"), "platform: expected an object"),
    ("host-number", setting("host", 7), "host: expected an object, found 7"),
    ("generation-number", setting("generation", 5), "generation: expected a string, found 5"),
    ("command-string", setting("command", "python train.py"), "command: expected a list"),
    ("git-dirty-string", setting("git", {"commit": "ab", "dirty": "yes"}), "git.dirty"),
    ("config-too-deep", setting("config", nested(200)), "nested at most 64 deep"),
    ("metric-nan", setting("metrics", {"tok_per_s": float("nan")}), "expected a finite number"),
    ("metric-huge", setting("metrics", {"tok": 10**3000}), "metrics.tok: expected a number below"),
    (
        "dataset-bytes-huge",
        setting("datasets", {"train": {"path": "/d", "missing": False, "bytes": -(10**3000)}}),
        "datasets.train.bytes: expected an integer below 2**63, found a number of about 3,001",
    ),
    ("dataset-no-missing", setting("datasets", {"train": {"path": "/d"}}), "datasets.train"),
    ("lock-not-toml", setting("lock.text", "[[packages"), "lock.text: not a valid TOML lock"),
    ("lock-no-envlock-table", lock_edit("[tool.envlock]", "[tool.other]"), "[tool.envlock]"),
    (
        "lock-package-no-name",
        lock_edit('name = "tinydep"\n', ""),
        "lock.text: packages[3].name: expected a value",
    ),
    (
        "lock-package-bad-name",
        lock_edit('name = "tinydep"', 'name = "tinydep; touch /tmp/x"'),
        "packages[3].name: expected a package name",
    ),
    (
        "lock-hash-not-hex",
        lock_edit('sha256 = "', 'sha256 = "zz'),
        "packages[0].wheels[0].hashes.sha256: expected a sha256",
    ),
    (
        "lock-no-hashes",
        lock_edit(", hashes = { sha256 = ", ", size = 1, ignored = { sha256 = "),
        "packages[0].wheels[0].hashes: expected a sha256",
    ),
    ("lock-http-url", lock_edit(WHEEL, 'wheels = [{ url = "http://'), "an https:// or file:// URL"),
    (
        "lock-directory-source",
        lock_edit(
            '"tinydep"\nversion = "1.0"\n',
            '"tinydep"\nversion = "1.0"\ndirectory = { path = "/tmp" }\n',
        ),
        "packages[3].directory: expected wheels or an sdist, found a directory source",
    ),
    (
        "lock-script-escapes",
        lock_edit('"train.py" = ', '"../../../etc/passwd" = '),
        "expected a relative path inside the scripts directory",
    ),
    (
        "lock-python-platform",
        lock_edit('python-platform = "x86_64-manylinux_2_28"', 'python-platform = "$(reboot)"'),
        "[tool.envlock] python-platform: expected a Linux platform",
    ),
]


def assert_refused(result: Any, names: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert names in result.stderr, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert "0" * 100 not in result.stderr + result.stdout  # a value is never echoed whole


@pytest.mark.parametrize(("case", "mutate", "names"), MALFORMED, ids=[c[0] for c in MALFORMED])
def test_malformed_snapshot_is_refused_naming_the_field(
    base: Base, case: str, mutate: Mutation, names: str
) -> None:
    bad = base.write(case, mutate)
    assert_refused(run_envlock("diff", bad, base.work / "valid"), names)
    assert_refused(run_envlock("diff", "--json", base.work / "valid", bad), names)
    assert_refused(run_envlock("apply", "-y", "--from-snapshot", bad, base.profile), names)


@pytest.mark.parametrize(
    "version",
    ["{evil}", "3.11; {evil}", "$({evil})", "3.11 --python {evil}", "--python={evil}"],
)
def test_hostile_interpreter_is_never_run(base: Base, version: str) -> None:
    """`python-version` reaches `uv venv --python`: only a version may get there."""
    hostile = version.format(evil=base.evil)
    bad = base.write(
        "evil-python",
        lock_edit('python-version = "3.11"', f"python-version = {json.dumps(hostile)}"),
    )
    for force in ((), ("--force",)):
        result = run_envlock("apply", "-y", *force, "--from-snapshot", bad, base.profile)
        assert_refused(result, "[tool.envlock] python-version: expected a Python version")
    assert_refused(run_envlock("diff", bad, base.work / "valid"), "python-version")
    assert not base.canary.exists(), "the snapshot's interpreter was run"
    # The stand-in works: run directly, it does leave the canary.
    os.system(str(base.evil))
    assert base.canary.exists()
    base.canary.unlink()


def test_wheels_outside_the_find_links_are_refused(base: Base) -> None:
    """A wheel from elsewhere on this machine is not installed, even with --force."""
    outside = lock_edit(f"{WHEEL}{base.wheelhouse}/", f"{WHEEL}{base.work}/elsewhere/")
    escaping = lock_edit(f"{WHEEL}{base.wheelhouse}/", f"{WHEEL}{base.wheelhouse}/../elsewhere/")
    remote_host = lock_edit(f"{WHEEL}{base.wheelhouse}/", 'wheels = [{ url = "file://evil.example/')
    for name, mutate in (("outside", outside), ("escaping", escaping), ("host", remote_host)):
        bad = base.write(name, mutate)
        for force in ((), ("--force",)):
            result = run_envlock("apply", "-y", *force, "--from-snapshot", bad, base.profile)
            assert_refused(result, "is neither https:// nor inside the profile's find-links")
        # Only where an environment would be built from it does it matter: diff shows it.
        assert run_envlock("diff", bad, base.work / "valid").returncode in (0, 1)


def test_another_profiles_snapshot_needs_force(base: Base) -> None:
    other = base.write("other-profile", setting("profile.name", "someone-else"))
    refused = run_envlock("apply", "-y", "--from-snapshot", other, base.profile)
    assert_refused(refused, "the snapshot was made for profile 'someone-else', not 'seed'")
    assert "--force" in refused.stderr
    forced = run_envlock("apply", "-y", "--force", "--from-snapshot", other, base.profile)
    assert forced.returncode == 0, forced.stderr
    alone = run_envlock("apply", "-y", "--force", base.profile)
    assert_refused(alone, "--force goes with --from-snapshot")


def test_the_valid_snapshot_passes(base: Base) -> None:
    """The corpus's base is accepted: every refusal above is the one change's doing."""
    valid = base.work / "valid"
    assert run_envlock("diff", valid, valid).returncode == 0
    applied = run_envlock("apply", "-y", "--from-snapshot", valid, base.profile)
    assert applied.returncode == 0, applied.stderr


# -- fuzzing load_snapshot -----------------------------------------------------------------
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=30),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)
# Lines a lock could hold instead of one of its own: its keys with any value, or anything.
LOCK_KEYS = [
    "name",
    "version",
    "url",
    "sha256",
    "python-version",
    "python-platform",
    "wheels",
    "sdist",
    "directory",
    "[[packages]]",
    "[tool.envlock]",
    "[tool.envlock.scripts]",
]


def nodes(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The path of every value in a JSON document (the root's is ())."""
    found = [path]
    if isinstance(value, dict):
        for key, item in value.items():
            found += nodes(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += nodes(item, (*path, index))
    return found


def mutate_at(doc: Any, path: tuple[Any, ...], action: str, value: Any) -> Any:
    if not path:
        return value
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    if action == "delete":
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return doc


@st.composite
def lock_line(draw: st.DrawFn) -> str:
    key = draw(st.sampled_from(LOCK_KEYS))
    if key.startswith("["):
        return key
    value = draw(JSON_VALUES)
    return f"{key} = {json.dumps(value)}" if draw(st.booleans()) else draw(st.text(max_size=40))


@st.composite
def mutated_snapshots(draw: st.DrawFn, valid: Doc) -> str:
    """A valid snapshot with a few things changed: values replaced by any JSON, keys deleted,
    lines of its lock replaced."""
    doc: Any = copy.deepcopy(valid)
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        if isinstance(doc, dict) and isinstance(doc.get("lock"), dict) and draw(st.booleans()):
            text = doc["lock"].get("text")
            if isinstance(text, str):
                lines = text.splitlines()
                index = draw(st.integers(min_value=0, max_value=max(len(lines) - 1, 0)))
                lines[index : index + 1] = [draw(lock_line())]
                doc["lock"]["text"] = "\n".join(lines)
                continue
        path = draw(st.sampled_from(nodes(doc)))
        action = draw(st.sampled_from(["replace", "delete"])) if path else "replace"
        doc = mutate_at(doc, path, action, draw(JSON_VALUES))
    return json.dumps(doc)


def test_load_snapshot_fuzz(base: Base) -> None:
    """Whatever a mutated snapshot holds, loading it gives a document or a UsageError."""
    target = base.work / "fuzz" / "envlock-snapshot.json"
    target.parent.mkdir(exist_ok=True)

    @settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
    @given(text=mutated_snapshots(base.doc))
    def load(text: str) -> None:
        target.write_text(text)
        try:
            loaded = load_snapshot(target.parent)
        except UsageError as exc:
            assert str(exc).startswith(str(target)), str(exc)
            return
        assert isinstance(loaded, dict)
        snapshot_lock(loaded, target)  # what diff and apply read next

    load()


def test_a_huge_metric_on_the_command_line_is_refused_without_its_digits() -> None:
    from envlock.commands.snapshot import parse_metrics
    from envlock.errors import UsageError

    for value in ("tok=" + "9" * 4000, "tok=" + "9" * 5000, "tok=1e" + "9" * 4000):
        with pytest.raises(UsageError) as refused:
            parse_metrics((value,))
        message = str(refused.value)
        assert "--metric" in message and "9" * 100 not in message, message[:200]
