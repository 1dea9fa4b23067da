"""A fleet of Docker containers selected by label across two engines (the session's two
private dockerds, tests/remote/docker_fixtures.py): one report across hosts, the worst
member's exit code, each member's own result, `--on`, and apply converging every member."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.docker.test_docker_target import ROOT, VENV, cli, pollute
from tests.json_shapes import conforms
from tests.remote.docker_fixtures import Engine, MakeDocker
from tests.remote.test_remote import write_profile


def fleet_target(label: str, engines: dict[str, str]) -> list[str]:
    hosts = ", ".join(f'{name} = "{host}"' for name, host in engines.items())
    return [
        'type = "docker"',
        f'select = {{ labels = {{ fleet = "{label}" }} }}',
        f"hosts = {{ {hosts} }}",
        f'root = "{ROOT}"',
        f'venv = "{VENV}"',
    ]


def members(done: subprocess.CompletedProcess[str]) -> dict[str, dict]:
    document = json.loads(done.stdout)
    conforms("fleet", document)
    return {m["member"]: m for m in document["members"]}


def test_a_fleet_by_label_on_two_engines(
    tmp_path: Path,
    wheelhouse: Path,
    docker_engine: Engine,
    other_engine: Engine,
    docker_container: MakeDocker,
) -> None:
    label = tmp_path.name[-40:]
    mounts = [(wheelhouse, str(wheelhouse))]
    a = docker_container(mounts=mounts, labels={"fleet": label, "gpu": "a100"})
    b = docker_container(mounts=mounts, engine=other_engine, labels={"fleet": label})
    engines = {"one": docker_engine.host, "two": other_engine.host}
    profile = write_profile(tmp_path / "p", wheelhouse, fleet_target(label, engines))
    one, two = f"one/{a}", f"two/{b}"

    # Before any apply: both members drift (no uv, no generation), one report, exit 1.
    before = cli("check", "--json", profile)
    assert before.returncode == 1, before.stderr
    listed = members(before)
    assert sorted(listed) == [one, two], listed
    assert listed[one]["vmid"] is None and listed[one]["node"] == "one"
    assert listed[one]["name"] == a and listed[two]["status"] == "running"
    assert all(m["exit"] == 1 and m["result"] == "drift" for m in listed.values()), listed

    # apply converges every member; the fleet's answer is one line across the engines.
    applied = cli("apply", "-y", profile)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert "apply: 2 container(s)" in applied.stderr, applied.stderr
    assert "2 containers: 2 on lock" in applied.stdout, applied.stdout
    assert cli("check", profile).returncode == 0

    # One member polluted: its row says so (first), the other is clean; exit 1, the worst.
    polluted = pollute(docker_engine, a, wheelhouse)
    assert polluted.returncode == 0, polluted.stderr
    drift = cli("check", "--json", profile)
    assert drift.returncode == 1, drift.stderr
    rows = members(drift)
    assert rows[one]["exit"] == 1 and rows[one]["drift_count"] >= 3, rows[one]
    assert rows[two]["exit"] == 0 and rows[two]["result"] == "clean", rows[two]
    assert next(iter(rows)) == one  # members that differ come first
    said = cli("check", profile)
    assert said.returncode == 1, said.stderr
    table = said.stdout.splitlines()
    assert table[0].startswith("2 containers: 2 on lock"), said.stdout
    assert table[2].split()[:2] == [a, "one"] and "drift" in table[2], said.stdout

    # --on: an engine's name, a container's name, a label.
    only_two = cli("check", "--json", "--on", "two", profile)
    assert only_two.returncode == 0 and list(members(only_two)) == [two], only_two.stderr
    by_name = cli("check", "--json", "--on", a, profile)
    assert by_name.returncode == 1 and list(members(by_name)) == [one]
    by_label = cli("check", "--json", "--on", "gpu=a100", profile)
    assert list(members(by_label)) == [one], by_label.stderr
    ran = cli("run", "--on", b, profile, "--", "python", "-c", "import sys; sys.exit(5)")
    assert ran.returncode == 5, ran.stderr
    refused = cli("run", profile, "--", "true")
    assert refused.returncode == 2 and "pick one with --on" in refused.stderr

    # apply converges the polluted one, leaves the other as it is.
    healed = cli("apply", "-y", "--json", profile)
    assert healed.returncode == 0, healed.stderr
    assert cli("check", profile).returncode == 0
    shot = cli("snapshot", profile, tmp_path / "shots")
    assert shot.returncode == 0, shot.stderr
    for engine, name in (("one", a), ("two", b)):
        written = json.loads(
            (tmp_path / "shots" / engine / name / "envlock-snapshot.json").read_text()
        )
        assert written["generation"].startswith("1-")

    # A label no container carries selects none, the labelled ones on both engines aside.
    nobody = (tmp_path / "p" / "remote.toml").read_text().replace(label, "nobody")
    (tmp_path / "p" / "nobody.toml").write_text(nobody)
    unmatched = cli("check", tmp_path / "p" / "nobody.toml")
    assert unmatched.returncode == 2, unmatched.stderr
    assert "the fleet's selection matches no container" in unmatched.stderr

    # An engine that does not answer is its own failed row; the others are still checked.
    engines["gone"] = f"unix://{tmp_path}/gone.sock"
    gone = write_profile(tmp_path / "gone", wheelhouse, fleet_target(label, engines))
    partial = cli("check", "--json", gone)
    assert partial.returncode == 3, partial.stderr
    rows = members(partial)
    assert rows["gone/*"]["result"] == "failed" and rows["gone/*"]["exit"] == 3
    assert "the Docker engine gone" in rows["gone/*"]["cause"], rows["gone/*"]
    assert rows[one]["result"] == rows[two]["result"] == "clean", rows

    # A member stopped is reported, exit 3 (no [docker] here to start it).
    assert other_engine.docker("stop", "-t", "0", b).returncode == 0
    stopped = cli("check", "--json", profile)
    assert stopped.returncode == 3
    assert members(stopped)[two]["result"] == "stopped"
