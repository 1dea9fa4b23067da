"""The docker target for real: a private Docker engine (tests/remote/docker_fixtures.py), the
suite's Debian image, containers without a network; the same agent and the same isolation
as LXC's, each command one `docker exec`."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.cli.test_hot_path import forbidden, loaded
from tests.remote.docker_fixtures import Engine, MakeDocker
from tests.remote.test_remote import envlock_env, write_profile

ROOT = "/opt/envroot"
VENV = "/opt/venv"


def cli(*args: str | Path, cache: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI as a batch job runs it (stdin no terminal)."""
    env = envlock_env(**({"XDG_CACHE_HOME": str(cache)} if cache else {}))
    return subprocess.run(
        [sys.executable, "-m", "envlock", *map(str, args)],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env=env,
    )


def docker_target(engine: Engine, container: str) -> list[str]:
    return [
        'type = "docker"',
        f'container = "{container}"',
        f'host = "{engine.host}"',
        f'root = "{ROOT}"',
        f'venv = "{VENV}"',
    ]


def pollute(engine: Engine, box: str, wheelhouse: Path) -> subprocess.CompletedProcess[str]:
    """A user's `uv pip install` of a package that swaps torch's extras, inside the box."""
    return engine.exec(
        box,
        f"{ROOT}/bin/uv",
        "pip",
        "install",
        "-q",
        "--offline",
        "--no-index",
        "--python",
        f"{VENV}/bin/python",
        "--find-links",
        str(wheelhouse),
        "sglang==0.5.0",
    )


def kinds(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [d["kind"] for d in json.loads(result.stdout)["drift"]]


def test_the_seed_scenario_in_a_docker_container(
    tmp_path: Path, wheelhouse: Path, docker_engine: Engine, docker_container: MakeDocker
) -> None:
    box = docker_container(mounts=[(wheelhouse, str(wheelhouse))])
    profile = write_profile(tmp_path / "p", wheelhouse, docker_target(docker_engine, box))
    first = cli("check", "--json", profile)
    assert first.returncode == 1 and "uv" in kinds(first), first.stderr
    applied = cli("apply", "-y", profile)
    assert applied.returncode == 0, applied.stderr
    assert "uploading uv" in applied.stderr
    assert cli("check", profile).returncode == 0

    # The seed failure: a raw `docker exec box python3` is the image's interpreter.
    raw = docker_engine.exec(box, "python3", "-c", "import trainutil")
    assert raw.returncode != 0 and "No module named 'trainutil'" in raw.stderr
    ran = cli(
        "run",
        profile,
        "--",
        "python3",
        "-c",
        "import sys, torch; print(sys.prefix, torch.__version__)",
    )
    assert ran.returncode == 0, ran.stderr
    prefix, version = ran.stdout.split()
    assert prefix.startswith(f"{ROOT}/generations/1-") and version == "2.11.0+cu128"
    # The profile's venv path is the link to `current`: old habits keep working.
    link = docker_engine.exec(box, "readlink", VENV)
    assert link.stdout.strip() == f"{ROOT}/current"

    # Pollute inside the container, as a user would.
    polluted = pollute(docker_engine, box, wheelhouse)
    assert polluted.returncode == 0, polluted.stderr
    drift = cli("check", "--json", profile)
    assert drift.returncode == 1
    assert {"torch-build", "cuda-libraries", "package-extra"} <= set(kinds(drift))
    said = cli("check", profile)
    assert "2.11.0+cu128" in said.stdout + said.stderr and "cu130" in said.stdout + said.stderr
    refused = cli("run", profile, "--", "python", "-c", "print('started')")
    assert refused.returncode == 1 and "started" not in refused.stdout
    assert cli("rollback", "--resync", profile).returncode == 0
    assert cli("check", profile).returncode == 0

    # Exit codes are kept.
    code = cli("run", profile, "--", "python", "-c", "import sys; sys.exit(7)")
    assert code.returncode == 7, code.stderr


def counted(engine: Engine, box: str, *args: str | Path, cache: Path) -> tuple[int, int]:
    """(exit status, `docker exec`s the engine started in box) of one envlock command."""
    since = time.time()
    done = cli(*args, cache=cache)
    time.sleep(0.05)
    return done.returncode, engine.exec_starts(box, since, time.time())


def test_each_command_is_one_docker_exec_signals_reach_the_command(
    tmp_path: Path, wheelhouse: Path, docker_engine: Engine, docker_container: MakeDocker
) -> None:
    """Counted from the engine's own events (exec_start), not timed."""
    box = docker_container(mounts=[(wheelhouse, str(wheelhouse))])
    profile = write_profile(tmp_path / "p", wheelhouse, docker_target(docker_engine, box))
    cache = tmp_path / "user-cache"
    trips = {
        "apply (first: uv, build, switch)": counted(
            docker_engine, box, "apply", "-y", profile, cache=cache
        ),
        "check": counted(docker_engine, box, "check", profile, cache=cache),
        "check --deep": counted(docker_engine, box, "check", "--deep", profile, cache=cache),
        "run (first)": counted(docker_engine, box, "run", profile, "--", "true", cache=cache),
        "run": counted(docker_engine, box, "run", profile, "--", "true", cache=cache),
        "apply (nothing to do)": counted(docker_engine, box, "apply", "-y", profile, cache=cache),
        "generations": counted(docker_engine, box, "generations", profile, cache=cache),
        "rollback --resync": counted(
            docker_engine, box, "rollback", "--resync", profile, cache=cache
        ),
        "snapshot": counted(docker_engine, box, "snapshot", profile, tmp_path / "c", cache=cache),
    }
    print("round trips:", json.dumps(trips))
    # Without a [docker] table nothing of the Docker SDK (or envlock/docker/) loads.
    code, modules = loaded(tmp_path, cache, "check", profile)
    assert code == 0 and forbidden(modules) == [], forbidden(modules)
    assert all(code == 0 for code, _ in trips.values()), trips
    assert trips["check"][1] == 1 and trips["check --deep"][1] == 1
    assert trips["run"][1] == 1, trips  # the state as judged last time: one call

    # A signal to envlock reaches the command in the container; its status comes back.
    program = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: sys.exit(42))\n"
        "print('ready', flush=True)\n"
        "time.sleep(120)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "envlock", "run", str(profile), "--", "python", "-c", program],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=envlock_env(),
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 42, proc.communicate()[1]


def test_engine_and_container_errors_are_one_clear_message_each(
    tmp_path: Path, wheelhouse: Path, docker_engine: Engine, docker_container: MakeDocker
) -> None:
    box = docker_container(mounts=[(wheelhouse, str(wheelhouse))])
    down = docker_target(docker_engine, box)
    down[2] = f'host = "unix://{tmp_path}/no-engine.sock"'
    refused = cli("check", write_profile(tmp_path / "down", wheelhouse, down))
    assert refused.returncode == 3, refused.stderr
    assert (
        f"the Docker engine at unix://{tmp_path}/no-engine.sock does not answer" in refused.stderr
    )
    assert "is dockerd running there?" in refused.stderr

    missing = docker_target(docker_engine, "no-such-box")
    refused = cli("check", write_profile(tmp_path / "missing", wheelhouse, missing))
    assert refused.returncode == 3, refused.stderr
    assert "container no-such-box on unix://" in refused.stderr
    assert "does not exist" in refused.stderr

    assert docker_engine.docker("stop", "-t", "0", box).returncode == 0
    stopped = cli(
        "check", write_profile(tmp_path / "stopped", wheelhouse, docker_target(docker_engine, box))
    )
    assert stopped.returncode == 3, stopped.stderr
    assert f"container {box} on {docker_engine.host} is not running" in stopped.stderr
    assert f"docker -H {docker_engine.host} start {box}" in stopped.stderr


def test_generations_rollback_gc_and_snapshot_on_a_volume(
    tmp_path: Path, wheelhouse: Path, docker_engine: Engine, docker_container: MakeDocker
) -> None:
    """The root on a named volume: rollback --to, gc and snapshot as on any target; a new
    container on the same volume finds the environment as it was."""
    volume = f"envroot-{tmp_path.name}"
    box = docker_container(mounts=[(wheelhouse, str(wheelhouse))], volumes=[(volume, ROOT)])
    profile = write_profile(tmp_path / "p", wheelhouse, docker_target(docker_engine, box))
    assert cli("apply", "-y", profile).returncode == 0
    profile.write_text(profile.read_text().replace("tinydep==1.0", "tinydep==0.9"))
    assert cli("lock", profile).returncode == 0
    assert cli("apply", "-y", profile).returncode == 0
    listed = json.loads(cli("generations", "--json", profile).stdout)
    assert listed["current"].startswith("2-")

    back = cli("rollback", "--to", "1", profile)
    assert back.returncode == 0, back.stderr
    ran = cli("run", profile, "--", "python", "-c", "import tinydep; print(tinydep.VERSION)")
    assert ran.returncode == 0 and ran.stdout.strip() == "1.0", ran.stderr
    assert cli("apply", "-y", profile).returncode == 0
    collected = cli("gc", "--keep", "1", "-y", profile)
    assert collected.returncode == 0, collected.stderr
    left = docker_engine.exec(box, "ls", f"{ROOT}/generations")
    # Never the active one nor the previous (the rollback target).
    assert [name[:2] for name in left.stdout.split()] == ["1-", "2-"], left.stdout

    shot = cli("snapshot", profile, tmp_path / "ckpt")
    assert shot.returncode == 0, shot.stderr
    document = json.loads((tmp_path / "ckpt" / "envlock-snapshot.json").read_text())
    assert document["generation"].startswith("2-"), document["generation"]
    assert box in document["host"]["target"], document["host"]

    # A run that writes its snapshot (DIR on this machine), and the compile cache's status.
    into = cli("run", "--snapshot-into", tmp_path / "run1", profile, "--", "python", "-c", "pass")
    assert into.returncode == 0, into.stderr
    written = json.loads((tmp_path / "run1" / "envlock-snapshot.json").read_text())
    assert written["generation"].startswith("2-")
    status = cli("cache", profile, "status", "--json")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["cache_dir"].startswith(f"{ROOT}/cache")

    # The container goes; another one on the same volume (the venv link is the image's
    # business: recreated, it is made again by apply) finds generation 2 as it was.
    assert docker_engine.docker("rm", "-f", box).returncode == 0
    again = docker_container(
        name=box, mounts=[(wheelhouse, str(wheelhouse))], volumes=[(volume, ROOT)]
    )
    assert again == box
    healed = cli("apply", "-y", profile)
    assert healed.returncode == 0, healed.stderr
    assert "building" not in healed.stderr, healed.stderr
    assert cli("check", profile).returncode == 0
