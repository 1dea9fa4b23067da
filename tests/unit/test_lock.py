"""lock.py without uv: staleness by each resolution input, the [tool.envlock] table a lock
records, the uv command line and resolver input, reading a lock and its identity. Seconds.

test_lock.py resolves real locks with uv from the test wheelhouse; judging staleness needs
only the table `envlock lock` writes, so these use a directory name for the find-links.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import tomllib

from envlock.errors import LockError
from envlock.lock.policy import profile_policy
from envlock.lock.read import (
    LOCK_FORMAT,
    Lock,
    LockedPackage,
    changed_inputs,
    input_digests,
    load_fresh_lock,
    lock_policy,
    parse_lock,
    read_lock,
    resolution_inputs,
    stale_reasons,
)
from envlock.lock.resolve import (
    _clean_uv_error,
    _resolve_hint,
    _toml_value,
    build_options,
    clean_damaged_cache,
    envlock_table,
    install_text_for,
    refuse_undeclared,
    relative_to_profile,
    resolver_input,
    torch_index_asker,
    torch_sourced,
    unbuilt,
    uv_compile_argv,
)
from envlock.profile.read import Profile, load_profile
from tests.cli.test_lock import RESOLUTION_INPUT_EDITS
from tests.index_server import IndexServer
from tests.projects import write_seed_project
from tests.unit.test_core import LOCK_TEXT, with_wheels
from tests.wheelhouse import build_wheel

NUMPY_SHA = hashlib.sha256(b"numpy==2.1.0").hexdigest()  # its wheel's, in with_wheels


def seed(tmp_path: Path, **kwargs: object) -> Path:
    (tmp_path / "wheels").mkdir(parents=True, exist_ok=True)
    return write_seed_project(tmp_path, tmp_path / "wheels", **kwargs)  # type: ignore[arg-type]


def recorded(profile: Profile) -> Lock:
    """The lock `envlock lock` would write for `profile` (its table; no packages needed)."""
    meta = tomllib.loads(envlock_table(profile))["tool"]["envlock"]
    return Lock(path=profile.lock_path, text="", packages={}, meta=meta)


@pytest.mark.parametrize(
    ("named", "edit"), RESOLUTION_INPUT_EDITS, ids=[n for n, _ in RESOLUTION_INPUT_EDITS]
)
def test_each_resolution_input_stales_the_lock_and_is_named(
    tmp_path: Path, named: str, edit: Callable[[str], str]
) -> None:
    path = seed(tmp_path)
    lock = recorded(load_profile(path))
    assert stale_reasons(load_profile(path), lock) == []
    changed = edit(path.read_text())
    assert changed != path.read_text()
    path.write_text(changed)
    assert stale_reasons(load_profile(path), lock) == [
        f"seed.toml: {named} changed since the lock was written"
    ]


def test_scripts_format_and_an_older_lock_s_inputs_are_reasons(tmp_path: Path) -> None:
    path = seed(tmp_path, scripts={"train.py": "a\n", "eval.py": "b\n"})
    profile = load_profile(path)
    lock = recorded(profile)
    old = Lock(lock.path, "", {}, {**lock.meta, "format": 1})
    assert stale_reasons(profile, old) == [f"lock format 1, this envlock writes {LOCK_FORMAT}"]
    # A lock written before inputs were recorded one by one: the general reason.
    legacy = Lock(lock.path, "", {}, {**lock.meta, "inputs-sha256": "x", "inputs": None})
    assert stale_reasons(profile, legacy) == [
        "seed.toml: what the lock is resolved from changed since it was written"
    ]
    # An input the lock recorded that this envlock no longer has is named too.
    digests = {**input_digests(profile), "[gone] input": "0" * 12}
    assert changed_inputs(profile, digests) == [
        "seed.toml: [gone] input changed since the lock was written"
    ]
    # Same digests, another total (the inputs hash is what decides): the general reason.
    assert changed_inputs(profile, input_digests(profile)) == [
        "seed.toml: what the lock is resolved from changed since it was written"
    ]
    (tmp_path / "scripts" / "train.py").write_text("changed\n")
    (tmp_path / "scripts" / "new.py").write_text("c\n")
    path.write_text(path.read_text().replace('"eval.py", "train.py"', '"new.py", "train.py"'))
    assert stale_reasons(load_profile(path), lock) == [
        "script eval.py removed",
        "script new.py added",
        "script train.py changed",
    ]


def test_a_lock_with_only_what_the_validator_requires_gives_every_reason(
    tmp_path: Path,
) -> None:
    profile = load_profile(seed(tmp_path))
    head = with_wheels(LOCK_TEXT).split("[[packages]]")[0]
    bare = parse_lock(profile.lock_path, head + '[tool.envlock]\npython-version = "3.11"\n')
    assert stale_reasons(profile, bare) == [
        f"lock format None, this envlock writes {LOCK_FORMAT}",
        "seed.toml: what the lock is resolved from changed since it was written",
        "script train.py added",
    ]


def test_what_never_stales_a_lock(tmp_path: Path) -> None:
    path = seed(tmp_path, env={"A": "1"})
    lock = recorded(load_profile(path))
    text = path.read_text()
    path.write_text(
        "# a comment\n" + text.replace('"1"', '"2"').replace('venv = "venv"', 'venv = "v2"')
    )
    assert stale_reasons(load_profile(path), lock) == []
    # find-links beside the profile are recorded relative to it: a moved checkout is fresh.
    moved = tmp_path / "moved"
    moved.mkdir()
    (moved / "wheels").mkdir()
    (moved / "scripts").mkdir()
    (moved / "scripts" / "train.py").write_text("print('training')\n")
    (moved / "seed.toml").write_text(text.replace(str(tmp_path), str(moved)))
    assert stale_reasons(load_profile(moved / "seed.toml"), lock) == []
    assert resolution_inputs(load_profile(path))["[dependencies] find-links"] == ["wheels"]


def test_build_is_an_input_only_when_set(tmp_path: Path) -> None:
    path = seed(tmp_path)
    assert "[dependencies] build" not in resolution_inputs(load_profile(path))
    lock = recorded(load_profile(path))
    path.write_text(
        path.read_text().replace("offline = true", 'offline = true\nbuild = ["b", "a"]')
    )
    profile = load_profile(path)
    assert resolution_inputs(profile)["[dependencies] build"] == ["a", "b"]
    assert stale_reasons(profile, lock) == [
        "seed.toml: [dependencies] build changed since the lock was written"
    ]
    assert 'build = ["a", "b"]' in envlock_table(profile)


def test_the_table_a_lock_records(tmp_path: Path) -> None:
    profile = load_profile(seed(tmp_path))
    table = tomllib.loads(envlock_table(profile))["tool"]["envlock"]
    assert table["format"] == LOCK_FORMAT and table["profile"] == "seed"
    assert (table["python-version"], table["torch-backend"], table["torch"]) == (
        "3.11",
        "cu128",
        "2.11.0+cu128",
    )
    assert table["python-platform"] == profile.python_platform
    assert table["inputs"] == input_digests(profile) and len(table["inputs"]) == 11
    assert all(len(d) == 12 for d in table["inputs"].values())
    assert set(table["scripts"]) == {"train.py"} and "build" not in table


def test_a_table_value_is_plain_ascii_toml() -> None:
    # A script's name may hold any character: written as ASCII escapes, DEL included
    # (TOML refuses it raw, where JSON would let it through).
    written = _toml_value("a\x7f\u00e9.py")
    assert written == '"a\\u007f\\u00e9.py"'
    assert tomllib.loads(f"k = {written}")["k"] == "a\x7f\u00e9.py"
    assert _toml_value(2) == "2"


def test_the_uv_command_line(tmp_path: Path) -> None:
    profile = load_profile(seed(tmp_path))
    argv = uv_compile_argv(profile, Path("in.toml"), Path("out.toml"), ["/w1", "/w2"])
    assert argv[1:4] == ["pip", "compile", "in.toml"]
    joined = " ".join(argv)
    assert "--format pylock.toml --generate-hashes --no-header" in joined
    assert f"--python-version 3.11 --python-platform {profile.python_platform}" in joined
    own = f"--python {sys.executable} --python-preference only-system --no-python-downloads"
    assert f"--output-file out.toml {own} --no-index --offline" in joined  # nothing found
    assert argv[-5:] == ["--find-links", "/w1", "--find-links", "/w2", "--no-build"]
    assert "--quiet" in argv
    assert build_options(()) == ["--no-build"]
    assert build_options(("a", "b")) == [
        "--only-binary",
        ":all:",
        "--no-binary",
        "a",
        "--no-binary",
        "b",
    ]


def test_the_resolver_input_takes_torch_from_its_index_unless_offline(tmp_path: Path) -> None:
    path = seed(tmp_path)
    offline = load_profile(path)
    text = resolver_input(offline, [])
    assert text.startswith('[project]\nname = "envlock-resolve"\nversion = "0"\n')
    assert '"torch==2.11.0+cu128"' in text and '"tinydep==1.0"' in text
    assert torch_sourced(offline) == [] and "tool.uv" not in text
    path.write_text(path.read_text().replace("offline = true", "offline = false"))
    online = load_profile(path)
    assert torch_sourced(online) == ["torch"]
    text = resolver_input(online, [])
    assert '[tool.uv.sources]\ntorch = { index = "torch-backend" }' in text
    assert 'name = "torch-backend"\nurl = "https://download.pytorch.org/whl/cu128"' in text
    assert text.endswith("explicit = true\n")
    # The pinned wheel in find-links: the label pin alone picks the build, no index source.
    (tmp_path / "wheels" / "torch-2.11.0+cu128-py3-none-any.whl").write_bytes(b"")
    assert "tool.uv" not in resolver_input(online, [str(tmp_path / "wheels")])


def test_wheels_under_the_profile_are_recorded_relative_to_it(tmp_path: Path) -> None:
    body = 'url = "file:///p/wheels/a.whl"\nurl = "file:///elsewhere/b.whl"\n'
    assert relative_to_profile(body, Path("/p")) == (
        'path = "wheels/a.whl"\nurl = "file:///elsewhere/b.whl"\n'
    )


def test_a_package_only_an_sdist_satisfies_is_named_unless_it_may_build(tmp_path: Path) -> None:
    path = seed(tmp_path)
    words = "  × No solution found: Wheels are required for `Some-Pkg` because"
    assert unbuilt(load_profile(path), words) == "Some-Pkg"
    assert unbuilt(load_profile(path), "no solution") is None
    path.write_text(
        path.read_text().replace("offline = true", 'offline = true\nbuild = ["some-pkg"]')
    )
    assert unbuilt(load_profile(path), words) is None


def test_reading_a_lock_and_its_identity(tmp_path: Path) -> None:
    text = with_wheels(LOCK_TEXT)
    with pytest.raises(LockError, match="no lock") as info:
        read_lock(tmp_path / "pylock.x.toml")
    assert info.value.hint == "run `envlock lock PROFILE` first"
    (tmp_path / "pylock.x.toml").write_bytes(b"\xff\xfe")
    with pytest.raises(LockError, match="cannot read the lock"):
        read_lock(tmp_path / "pylock.x.toml")
    (tmp_path / "pylock.x.toml").write_text(text)
    lock = read_lock(tmp_path / "pylock.x.toml")
    assert lock == parse_lock(tmp_path / "pylock.x.toml", text)
    assert lock.versions() == {
        "torch": "2.11.0+cu128",
        "numpy": "2.1.0",
        "nvidia-cudnn-cu12": "9.1.0",
    }
    # The identity is what installs: the same packages elsewhere share a generation ...
    moved = parse_lock(Path("/elsewhere/pylock.x.toml"), text.replace('created-by = "test"', ""))
    assert moved.short_hash == lock.short_hash and moved.sha256 != lock.sha256
    # ... another version, artifact or Python does not.
    for old, new in [('"2.1.0"', '"2.1.1"'), (NUMPY_SHA, NUMPY_SHA[::-1]), ('"3.11"', '"3.12"')]:
        other = parse_lock(lock.path, text.replace(old, new, 1))
        assert other.short_hash != lock.short_hash, (old, new)
    assert len(lock.short_hash) == 12
    package = LockedPackage(
        "a", "1", ({"hashes": {"sha256": "w"}}, {}), {"hashes": {"sha256": "s"}}
    )
    assert package.sha256s == {"w", "s"}


def test_a_lock_s_machine_paths_and_its_install_text(tmp_path: Path) -> None:
    text = 'x = 1\npath = "wheels/a.whl"\nurl = "file:///abs/b.whl"\npath = "/abs/c.whl"\n'
    lock = Lock(tmp_path / "pylock.x.toml", text, {})
    assert lock.machine_paths() == ["/abs/b.whl", "/abs/c.whl"]
    assert lock.install_text() == text.replace('"wheels/a.whl"', f'"{tmp_path}/wheels/a.whl"')


def test_a_stale_lock_is_refused_with_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = seed(tmp_path)
    profile = load_profile(path)
    body = with_wheels(LOCK_TEXT).split("[tool.envlock]")[0]
    profile.lock_path.write_text(body + envlock_table(profile))
    assert load_fresh_lock(profile).meta["profile"] == "seed"
    path.write_text(path.read_text().replace('backend = "cu128"', 'backend = "cu130"'))
    with pytest.raises(
        LockError, match=r"stale lock: seed.toml: \[torch\] backend changed"
    ) as info:
        load_fresh_lock(load_profile(path))
    assert "to refresh it" in (info.value.hint or "") and "envlock lock" in (info.value.hint or "")
    # Every reason is said, the profile named as the user would type it from here.
    (tmp_path / "scripts" / "train.py").write_text("changed\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(LockError) as info:
        load_fresh_lock(load_profile(path))
    assert info.value.message.endswith(
        "stale lock: seed.toml: [torch] backend changed since the lock was written; "
        "script train.py changed"
    )
    assert info.value.hint == "run `envlock lock seed.toml` to refresh it"


def test_the_profile_s_lock_is_read_under_the_profile_s_policy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = seed(tmp_path)
    profile = load_profile(path)
    body = with_wheels(LOCK_TEXT).split("[tool.envlock]")[0]
    profile.lock_path.write_text(body + envlock_table(profile))
    assert load_fresh_lock(profile).policy == lock_policy(profile)
    assert read_lock(profile.lock_path, lock_policy(profile)).policy == lock_policy(profile)
    # Installed on this machine, an index's wheel whose very file lies in the profile's
    # find-links is taken from there.
    (tmp_path / "wheels" / "numpy-2.1.0-py3-none-any.whl").write_bytes(b"numpy==2.1.0")
    lock = read_lock(profile.lock_path)
    local = tmp_path / "wheels" / "numpy-2.1.0-py3-none-any.whl"
    assert f"path = {json.dumps(str(local))}" in install_text_for(lock, profile)
    fix = "run `envlock lock {}` to write it again (envlock writes locks)"
    assert lock_policy(profile).fix == fix.format(path)  # outside the working directory
    monkeypatch.chdir(tmp_path)
    assert lock_policy(profile).fix == fix.format("seed.toml")


def test_a_refused_lock_names_its_file_and_where_it_came_from(tmp_path: Path) -> None:
    with pytest.raises(LockError) as info:
        parse_lock(Path("pylock.x.toml"), "bad = [", where="snap.json")
    assert "pylock.x.toml" in info.value.message and "snap.json" in info.value.message
    with pytest.raises(LockError) as info:
        parse_lock(Path("pylock.x.toml"), "bad = [")
    assert info.value.message == (
        "pylock.x.toml: not a valid TOML lock: Invalid value (at end of document)"
    )
    # A package the profile builds: its sdist is read, and is part of what installs.
    head, table = with_wheels(LOCK_TEXT).split("[tool.envlock]")
    sdist = '{ url = "https://files.test/slowpkg-1.0.tar.gz", hashes = { sha256 = "' + "c" * 64
    built = head + f'[[packages]]\nname = "slowpkg"\nversion = "1.0"\nsdist = {sdist}" }} }}\n\n'
    lock = parse_lock(
        Path("p.toml"), built + "[tool.envlock]" + table, profile_policy(("slowpkg",), "p")
    )
    assert lock.build == {"slowpkg"} and lock.packages["slowpkg"].sha256s == {"c" * 64}
    head = with_wheels(LOCK_TEXT).split("[[packages]]")[0]
    empty = parse_lock(Path("p.toml"), head + '[tool.envlock]\npython-version = "3.11"\n')
    assert empty.packages == {} and empty.meta == {"python-version": "3.11"}
    lock = parse_lock(Path("p.toml"), with_wheels(LOCK_TEXT))
    assert lock.packages["numpy"].name == "numpy" and lock.packages["numpy"].sdist is None
    assert len(lock.packages["numpy"].wheels) == 1


def test_what_to_do_when_resolution_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    monkeypatch.delenv("UV_FIND_LINKS", raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    path = seed(tmp_path)
    offline = load_profile(path)
    words = "Because only an sdist … Wheels are required for `slowpkg` because"
    assert _resolve_hint(offline, [], words) == (
        "slowpkg has no wheel here and envlock builds nothing from source unless told (a "
        'build runs the package\'s own code): add build = ["slowpkg"] to [dependencies], or '
        "put a wheel of it in find-links"
    )
    torch_hint = (
        "torch 2.11.0+cu128 is taken from https://download.pytorch.org/whl/cu128: is it "
        "reachable? Otherwise set [torch] index-url to a mirror, or put the wheel in "
        "[dependencies] find-links"
    )
    assert _resolve_hint(offline, []) == torch_hint
    wheels = tmp_path / "wheels"
    (wheels / "torch-2.11.0+cu128-py3-none-any.whl").write_bytes(b"")
    generic = "check the package names and versions; is the index reachable?"
    assert _resolve_hint(offline, [str(wheels)]) == generic  # torch is here: not the index
    monkeypatch.setenv("PIP_FIND_LINKS", "/machine/wheels /machine/more")
    assert _resolve_hint(offline, [str(wheels)]) == generic + (
        "; the find-links this machine's pip or uv is configured with (/machine/wheels, "
        "/machine/more) are "
        "not used for a remote target or an offline profile: list a directory the target "
        "also has in [dependencies] find-links"
    )
    path.write_text(path.read_text().replace("offline = true", "offline = false"))
    online = load_profile(path)
    assert _resolve_hint(online, [str(wheels)]) == generic  # this machine's are used: not said
    assert _resolve_hint(online, ["/machine/wheels", "/machine/more"]) == torch_hint
    assert _clean_uv_error("  x /tmp/e/pyproject.toml: envlock-resolve fails\n", "/tmp/e") == (
        "  x pyproject.toml: the profile fails"
    )
    assert _clean_uv_error("error: a\n  b\n", "/tmp/e") == "  error: a\n    b"


def test_a_wheel_from_outside_the_profile_s_sources_is_refused(tmp_path: Path) -> None:
    profile = load_profile(seed(tmp_path))
    inside = f'url = "file://{tmp_path}/wheels/a-1-py3-none-any.whl"\n'
    refuse_undeclared(profile, inside)
    outside = "".join(f'url = "file:///machine/w/p{i}-1-py3-none-any.whl"\n' for i in range(4))
    with pytest.raises(LockError) as info:
        refuse_undeclared(profile, inside + outside)
    assert info.value.message == (
        "seed.toml: uv took 4 wheel(s) from outside the profile's find-links: "
        "/machine/w/p0-1-py3-none-any.whl, /machine/w/p1-1-py3-none-any.whl, "
        "/machine/w/p2-1-py3-none-any.whl …"
    )
    assert info.value.hint == (
        "a remote or offline profile resolves from its own [dependencies] find-links and "
        "indexes: add that directory there if the target has it too, or remove it from this "
        "machine's uv configuration"
    )
    three = "".join(outside.splitlines(keepends=True)[:3])
    with pytest.raises(LockError) as info:
        refuse_undeclared(profile, three)
    assert info.value.message.endswith("/machine/w/p2-1-py3-none-any.whl")  # all: no "…"


def test_a_damaged_uv_cache_is_cleaned_for_what_it_blames(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    profile = load_profile(seed(tmp_path))
    assert clean_damaged_cache(profile, "error: no solution found") is False
    blamed = (
        "error: Failed to read `envlock-test-b==1.0`\n  Failed to read `envlock-test-a==1.0`\n"
        "  Failed to deserialize cache entry"
    )
    assert clean_damaged_cache(profile, blamed) is True
    out, err = capfd.readouterr()  # uv's own words are not passed on
    assert out == "" and " ".join(err.split()) == (
        "uv's cache holds damaged entries (envlock-test-a, envlock-test-b; after a crash?): "
        "cleaning 2 package(s) and resolving again"
    )
    # With the old lock's packages (uv blames one at a time); blaming none, those alone.
    profile.lock_path.write_text(with_wheels(LOCK_TEXT))
    assert clean_damaged_cache(profile, blamed) is True
    assert "cleaning 5 package(s)" in capfd.readouterr().err
    assert clean_damaged_cache(profile, "Failed to deserialize cache entry") is True
    assert "entries (unnamed; after a crash?): cleaning 3 package(s)" in capfd.readouterr().err


def test_the_torch_index_is_asked_only_for_the_torch_family(tmp_path: Path) -> None:
    wheels = tmp_path / "idx-wheels"
    wheels.mkdir()
    torch = build_wheel(wheels, "torch", "2.11.0+cu128")
    server = IndexServer(tmp_path / "served").start()
    try:
        url = server.add("cu128", [torch])
        path = seed(tmp_path)
        text = path.read_text().replace("offline = true", "offline = false")
        path.write_text(text.replace("[torch]", f'[torch]\nindex-url = "{url}"', 1))
        profile = load_profile(path)
        assert torch_index_asker(load_profile(seed(tmp_path / "off"))) is None  # offline
        ask = torch_index_asker(profile)
        assert ask is not None and ask("numpy", "2.1.0") == []  # not torch's family
        (entry,) = ask("Torch", "2.11.0+cu128")
        assert entry["url"].startswith(f"{server.url}/cu128/files/torch-2.11.0+cu128")
        assert ask("torch", "9.9.9") == []
        assert any(r.startswith("/cu128/simple/torch") for r in server.requests)
    finally:
        server.stop()
