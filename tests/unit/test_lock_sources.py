"""lock_sources.py on lock texts and real files, without uv: which wheel entry a lock keeps
when this machine's file and an index's copy are both known, and the local copy that stands
in for an index's wheel at install. Seconds. test_lock_sources.py runs real uv against a
real index on loopback.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from envlock.base.tomlread import tomllib
from envlock.base.uvbin import uv_path
from envlock.lock.sources import ask_index, record_index_sources, with_local_copies
from tests.index_server import IndexServer
from tests.wheelhouse import build_wheel

INDEX = "https://index.test/files"
NAME = "pkg-1.0-py3-none-any.whl"
SHA = "a" * 64
OTHER_SHA = "b" * 64


def wheel(url: str, sha: str | None = SHA) -> str:
    hashes = f", hashes = {{ sha256 = {sha!r} }}".replace("'", '"') if sha else ""
    return f'{{ url = "{url}"{hashes} }}'


def lock(*wheels: str, name: str = "pkg") -> str:
    return (
        'lock-version = "1.0"\n\n[[packages]]\n'
        f'name = "{name}"\nversion = "1.0"\nwheels = [{", ".join(wheels)}]\n'
    )


def urls(text: str) -> list[tuple[str, str | None]]:
    (package,) = tomllib.loads(text)["packages"]
    return [
        (w.get("url") or w["path"], w.get("hashes", {}).get("sha256")) for w in package["wheels"]
    ]


def test_a_machine_file_is_replaced_by_the_index_s_copy_of_the_same_bytes(tmp_path: Path) -> None:
    text = lock(wheel(f"file:///machine/{NAME}"), wheel(f"{INDEX}/{NAME}"))
    recorded = record_index_sources(text, tmp_path)
    assert urls(recorded) == [(f"{INDEX}/{NAME}", SHA)]
    assert "wheels = [{" in recorded  # one wheel: on one line, as uv writes it
    # Another file of the index listed first: kept, and the machine's file still replaced.
    other = f"{INDEX}/pkg-1.0-cp311-none-any.whl"
    text = lock(wheel(other), wheel(f"file:///machine/{NAME}"), wheel(f"{INDEX}/{NAME}"))
    assert urls(record_index_sources(text, tmp_path)) == [(other, SHA), (f"{INDEX}/{NAME}", SHA)]
    # A package of the index's alone before it changes nothing of the next one.
    first = lock(wheel(f"{INDEX}/zzz-1.0-py3-none-any.whl"), name="zzz")
    both = first + text.split("\n\n", 1)[1]
    packages = tomllib.loads(record_index_sources(both, tmp_path))["packages"]
    assert [[w["url"] for w in p["wheels"]] for p in packages] == [
        [f"{INDEX}/zzz-1.0-py3-none-any.whl"],
        [other, f"{INDEX}/{NAME}"],
    ]


def test_an_index_copy_with_other_bytes_is_dropped_and_the_lock_stays_tied(
    tmp_path: Path,
) -> None:
    text = lock(wheel(f"file:///machine/{NAME}"), wheel(f"{INDEX}/{NAME}", OTHER_SHA))
    assert urls(record_index_sources(text, tmp_path)) == [(f"file:///machine/{NAME}", SHA)]
    # A local file without a hash, or one no index serves, stays as it is.
    text = lock(wheel(f"file:///machine/{NAME}", None), wheel(f"{INDEX}/{NAME}"))
    assert urls(record_index_sources(text, tmp_path)) == [
        (f"file:///machine/{NAME}", None),
        (f"{INDEX}/{NAME}", SHA),
    ]
    alone = lock(wheel(f"file:///machine/{NAME}"))
    assert record_index_sources(alone, tmp_path) == alone


def test_an_index_uv_did_not_consult_is_asked(tmp_path: Path) -> None:
    asked: list[tuple[str, str]] = []

    def ask(name: str, version: str) -> list[dict[str, Any]]:
        asked.append((name, version))
        return [
            {"url": f"file:///other/{NAME}", "hashes": {"sha256": SHA}},  # not an index's
            {"url": f"{INDEX}/{NAME}", "hashes": {"sha256": SHA}},
        ]

    text = lock(wheel(f"file:///machine/{NAME}"), wheel(f"{INDEX}/x-1.0-py3-none-any.whl"))
    recorded = record_index_sources(text, tmp_path, ask)
    assert asked == [("pkg", "1.0")]
    assert urls(recorded) == [(f"{INDEX}/{NAME}", SHA), (f"{INDEX}/x-1.0-py3-none-any.whl", SHA)]
    assert "wheels = [\n" in recorded  # several: one per line
    # uv listed the index's copy already: nothing is asked.
    asked.clear()
    record_index_sources(
        lock(wheel(f"file:///machine/{NAME}"), wheel(f"{INDEX}/{NAME}")), tmp_path, ask
    )
    assert asked == []


def test_what_is_not_this_machine_s_is_left_alone(tmp_path: Path) -> None:
    beside = lock(wheel(f"file://{tmp_path}/wheels/{NAME}"), wheel(f"{INDEX}/{NAME}"))
    assert record_index_sources(beside, tmp_path) == beside  # the profile's own wheels
    served = lock(wheel(f"{INDEX}/{NAME}"))
    assert record_index_sources(served, tmp_path, lambda n, v: []) == served
    no_wheels = (
        'lock-version = "1.0"\n\n[[packages]]\nname = "x"\nversion = "1"\nurl = "file:///x"\n'
    )
    assert record_index_sources(no_wheels, tmp_path) == no_wheels
    # The profile's own wheel beside a machine file in one package stays where it is.
    mine = f"file://{tmp_path}/wheels/pkg-1.0-cp311-none-any.whl"
    mixed = lock(wheel(f"file:///machine/{NAME}"), wheel(f"{INDEX}/{NAME}"), wheel(mine))
    assert urls(record_index_sources(mixed, tmp_path)) == [(f"{INDEX}/{NAME}", SHA), (mine, SHA)]


def test_two_local_copies_of_one_served_file_become_one_entry(tmp_path: Path) -> None:
    text = lock(
        wheel(f"file:///one/{NAME}"), wheel(f"file:///two/{NAME}"), wheel(f"{INDEX}/{NAME}")
    )
    assert urls(record_index_sources(text, tmp_path)) == [(f"{INDEX}/{NAME}", SHA)]


def test_a_local_copy_of_the_same_bytes_stands_in_at_install(tmp_path: Path) -> None:
    links = tmp_path / "links"
    links.mkdir()
    data = b"the wheel"
    sha = hashlib.sha256(data).hexdigest()
    (links / NAME).write_bytes(data)
    (links / "pkg-2.0-py3-none-any.whl").write_bytes(b"another")
    text = lock(wheel(f"{INDEX}/{NAME}", sha))
    local = with_local_copies(text, ["https://index.test/simple", f"file://{links}"])
    assert urls(local) == [(str(links / NAME), sha)]
    assert with_local_copies(text, [str(tmp_path / "gone")]) == text
    other = lock(wheel(f"{INDEX}/{NAME}", OTHER_SHA))
    assert with_local_copies(other, [str(links)]) == other  # same name, other bytes
    unhashed = lock(wheel(f"{INDEX}/{NAME}", None))
    assert with_local_copies(unhashed, [str(links)]) == unhashed
    machine = lock(wheel(f"file:///m/{NAME}", sha))
    assert with_local_copies(machine, [str(links)]) == machine  # already a file
    unrelated = lock(wheel(f"{INDEX}/zzz-1.0-py3-none-any.whl", sha), name="zzz")
    assert with_local_copies(unrelated, [str(links)]) == unrelated
    # A directory of that one wheel; a file entry before the index's; another package
    # with no local copy and one with an sdist alone: each left as it is.
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / NAME).write_bytes(data)
    mixed = (
        lock(wheel("file:///m/pkg-1.0-cp311-none-any.whl", sha), wheel(f"{INDEX}/{NAME}", sha))
        + unrelated.split("\n\n", 1)[1]
        + '\n[[packages]]\nname = "src"\nversion = "1"\n'
        + 'sdist = { url = "https://x.test/s.tar.gz" }\n'
    )
    packages = tomllib.loads(with_local_copies(mixed, [str(alone)]))["packages"]
    assert [[w.get("url") or w["path"] for w in p.get("wheels", [])] for p in packages] == [
        ["file:///m/pkg-1.0-cp311-none-any.whl", str(alone / NAME)],
        [f"{INDEX}/zzz-1.0-py3-none-any.whl"],
        [],
    ]
    # Of two directories, the one holding the very bytes is taken.
    second = tmp_path / "second"
    second.mkdir()
    (second / NAME).write_bytes(data)
    (links / NAME).write_bytes(b"changed")
    assert urls(with_local_copies(text, [str(links), str(second)])) == [(str(second / NAME), sha)]


def test_an_index_is_asked_through_uv_for_one_release(tmp_path: Path) -> None:
    """Real uv against a real index on loopback: the index's entries for that release, []
    when uv cannot say (the release is not there, the index is gone)."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    wheel = build_wheel(wheels, "askpkg", "1.0")
    server = IndexServer(tmp_path / "served").start()
    try:
        url = server.add("idx", [wheel])
        project = (
            '[project]\nname = "envlock-index"\nversion = "0"\n'
            'dependencies = ["askpkg==1.0"]\n\n[tool.uv.sources]\n'
            'askpkg = { index = "idx" }\n\n[[tool.uv.index]]\nname = "idx"\n'
            f'url = "{url}"\nexplicit = true\n'
        )

        def argv(given: Path, output: Path) -> list[str]:
            return [
                uv_path(),
                "pip",
                "compile",
                str(given),
                "--quiet",
                "--format",
                "pylock.toml",
                "--generate-hashes",
                "--python-version",
                "3.11",
                "--no-python-downloads",
                "--output-file",
                str(output),
                "--no-deps",
            ]

        (entry,) = ask_index(project, "AskPkg", argv, {"UV_FIND_LINKS": str(wheels)})
        assert entry["url"].startswith(f"{server.url}/idx/files/askpkg-1.0-py3-none-any.whl")
        assert entry["hashes"]["sha256"] == hashlib.sha256(wheel.read_bytes()).hexdigest()
        assert ask_index(project, "other", argv) == []  # not the release asked about
        missing = project.replace("askpkg==1.0", "askpkg==2.0")
        assert ask_index(missing, "askpkg", argv) == []  # uv failed: it cannot say
    finally:
        server.stop()
