"""`envlock.snapshot()` from inside a training script run by `envlock run` (issue #18).

The scripts run with the generation's own Python, from a directory outside the checkout, in
an environment whose lock does not hold envlock: what they import as `envlock` is the
stdlib-only API that `envlock run` puts on PYTHONPATH. The example of the site's snapshots
page (docs/guides/snapshots-and-diff.md, once the README's) is run as it is written there.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from envlock.runs.snapshot_doc import plain
from envlock.runs.snapshot_file import load_snapshot
from tests.conftest import run_envlock
from tests.projects import write_seed_project
from tests.wheelhouse import build_wheelhouse

CHECKOUT = Path(__file__).resolve().parents[2]
PAGE = CHECKOUT / "docs" / "guides" / "snapshots-and-diff.md"
SECTION = "# Snapshots and diffs"


class Project:
    """An applied profile named like the README's (train.toml) in a directory of its own."""

    def __init__(self, work: Path) -> None:
        self.dir = work / "project"
        self.profile = write_seed_project(
            self.dir, build_wheelhouse(work / "wheelhouse"), name="train"
        )
        for args in (("lock", self.profile), ("apply", "-y", self.profile)):
            result = run_envlock(*args)
            assert result.returncode == 0, result.stderr
        self.python = self.dir / "root" / "current" / "bin" / "python"

    def run(
        self, *argv: str | Path, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """`envlock run train.toml -- ARGV` from the project directory (outside the checkout)."""
        result = run_envlock("run", self.profile, "--", *argv, cwd=self.dir, env=env)
        assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
        return result


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    return Project(tmp_path_factory.mktemp("api"))


def readme_example() -> tuple[str, list[str], list[str]]:
    """The section's train.py, its console commands, and the output of the last one."""
    text = PAGE.read_text()
    section = text[text.index(SECTION) :]
    section = section[: section.index("\n## ", 1)]
    script = re.search(r"```python\n(.*?)```", section, re.S)
    console = re.search(r"```console\n(.*?)```", section, re.S)
    assert script and console, "the snapshots page lost its example"
    lines = console.group(1).splitlines()
    commands = [line[2:] for line in lines if line.startswith("$ ")]
    output = lines[max(i for i, line in enumerate(lines) if line.startswith("$ ")) + 1 :]
    return script.group(1), commands, output


def squeezed(lines: list[str]) -> list[str]:
    """Lines with runs of spaces made one (table column widths are rich's business)."""
    return [re.sub(r" +", " ", line).strip() for line in lines]


def test_readme_example_runs_as_written(project: Project) -> None:
    script, commands, expected = readme_example()
    (project.dir / "train.py").write_text(script)
    assert not project.dir.resolve().is_relative_to(CHECKOUT)  # outside the checkout
    last = None
    for command in commands:
        argv = shlex.split(command)
        assert argv[0] == "envlock"
        last = run_envlock(*argv[1:], cwd=project.dir)
        assert last.returncode in (0, 1), f"{command}: exit {last.returncode}\n{last.stderr}"
    assert last is not None and last.returncode == 1  # diff: the runs differ
    assert squeezed(last.stdout.strip().splitlines()) == squeezed(expected)
    data = load_snapshot(project.dir / "runs" / "a")
    assert data["config"] == {"__class__": "argparse.Namespace", "lr": 3e-4, "ckpt": "runs/a"}
    assert data["process"] == {
        "argv": ["train.py", "--lr", "3e-4", "--ckpt", "runs/a"],
        "rank": 0,
        "local_rank": None,
        "world_size": 1,
        "from": "default",
    }


# A script recording what `envlock snapshot` records, from inside the run.
PROBE_SCRIPT = """\
import dataclasses, json, sys
import envlock, envlock_megacache

@dataclasses.dataclass
class Optim:
    lr: float = 0.1
    betas: tuple = (0.9, 0.95)

class PydanticLike:  # model_dump() as pydantic has it; nothing imported
    def model_dump(self):
        return {"layers": 12, "api_key": "cfg-key-0001"}

path = envlock.snapshot(sys.argv[1], config={"optim": Optim(), "model": PydanticLike()})
print(json.dumps({"path": path, "api": envlock.__file__, "megacache": envlock_megacache.__file__}))
"""


def test_in_process_snapshot_records_what_the_cli_does(project: Project, tmp_path: Path) -> None:
    script = tmp_path / "record.py"
    script.write_text(PROBE_SCRIPT)
    env = {**os.environ, "HF_TOKEN": "hf-secret-0002", "NCCL_DEBUG": "INFO"}
    ran = project.run("python", script, tmp_path / "inside", env=env)
    seen = json.loads(ran.stdout.strip().splitlines()[-1])
    startup = Path(seen["megacache"]).parent
    assert Path(seen["api"]) == startup / "envlock_api" / "envlock" / "__init__.py"
    assert not str(startup).startswith(str(project.dir))  # envlock's, not the project's
    inside = load_snapshot(tmp_path / "inside")  # validated as any snapshot is
    text = (tmp_path / "inside" / "envlock-snapshot.json").read_text()
    assert "hf-secret-0002" not in text and "cfg-key-0001" not in text
    outside = run_envlock("snapshot", project.profile, tmp_path / "outside", env=env)
    assert outside.returncode == 0, outside.stderr
    cli = load_snapshot(tmp_path / "outside")
    same = (
        "profile",
        "lock",
        "generation",
        "python",
        "platform",
        "packages",
        "torch",
        "hardware",
        "scripts",
        "cache",
        "git",
    )
    assert {k: inside[k] for k in same} == {k: cli[k] for k in same}
    assert (
        inside["env"]["HF_TOKEN"] == cli["env"]["HF_TOKEN"]
        and inside["env"]["NCCL_DEBUG"] == "INFO"
    )
    assert inside["host"] == cli["host"] and cli["host"]["target"] == "local"
    assert inside["config"] == {
        "optim": {"__class__": "Optim", "lr": 0.1, "betas": [0.9, 0.95]},
        "model": {
            "__class__": "PydanticLike",
            "layers": 12,
            "api_key": inside["config"]["model"]["api_key"],
        },
    }
    assert inside["config"]["model"]["api_key"].startswith("<redacted sha256:")
    assert run_envlock("diff", tmp_path / "inside", tmp_path / "outside").returncode in (0, 1)


# torchrun's contract with each worker: RANK, LOCAL_RANK, WORLD_SIZE (and a rendezvous this
# test does not need). The launcher starts them at once; each snapshots into one directory.
LAUNCH = """\
import os, subprocess, sys
ckpt, all_ranks = sys.argv[1], sys.argv[2]
procs = [
    subprocess.Popen(
        [sys.executable, "-c", WORKER, ckpt, all_ranks],
        env={**os.environ, "RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": "4"},
    )
    for r in range(4)
]
sys.exit(max(p.wait() for p in procs))
"""
WORKER = """\
import os, sys
import envlock
ckpt, all_ranks = sys.argv[1], sys.argv[2] == "1"
for step in range(5):  # every rank, several times, into the same directory
    path = envlock.snapshot(ckpt, config={"lr": 0.01, "step": step}, all_ranks=all_ranks)
os.write(1, ("wrote %s\\n" % path).encode())  # one write: the ranks share a pipe
"""


def launch(project: Project, tmp_path: Path, ckpt: Path, all_ranks: bool) -> list[str]:
    script = tmp_path / "launch.py"
    script.write_text(f"WORKER = {WORKER!r}\n" + LAUNCH)
    ran = project.run("python", script, ckpt, "1" if all_ranks else "0")
    return sorted(ran.stdout.strip().splitlines())


def test_only_rank_zero_writes_by_default(project: Project, tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    said = launch(project, tmp_path, ckpt, all_ranks=False)
    assert said == [f"wrote {ckpt / 'envlock-snapshot.json'}", *["wrote None"] * 3]
    assert sorted(p.name for p in ckpt.iterdir()) == ["envlock-snapshot.json"]
    process = load_snapshot(ckpt)["process"]
    assert (process["rank"], process["local_rank"], process["world_size"]) == (0, 0, 4)


def test_all_ranks_write_one_file_each(project: Project, tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    launch(project, tmp_path, ckpt, all_ranks=True)
    names = sorted(p.name for p in ckpt.iterdir())  # no temp file left behind either
    assert names == [f"envlock-snapshot.rank{r}.json" for r in range(4)]
    for rank in range(4):
        data = load_snapshot(ckpt / f"envlock-snapshot.rank{rank}.json")
        assert data["process"]["rank"] == rank and data["process"]["world_size"] == 4
        assert data["config"] == {"lr": 0.01, "step": 4}


def test_concurrent_writers_never_corrupt_the_file(project: Project, tmp_path: Path) -> None:
    """Eight processes rewrite one snapshot while a ninth reads it: always a whole file."""
    ckpt = tmp_path / "ckpt"
    writer = tmp_path / "writer.py"
    writer.write_text(
        "import sys, envlock\n"
        "for step in range(15):\n"
        "    envlock.snapshot(sys.argv[1], config={'writer': sys.argv[2], 'step': step})\n"
    )
    reader = tmp_path / "reader.py"
    reader.write_text(
        "import json, os, sys, time\n"
        "path, seen, done = sys.argv[1], 0, sys.argv[2]\n"
        "while not os.path.exists(done) or seen == 0:\n"
        "    try:\n"
        "        with open(path) as handle:\n"
        "            json.load(handle)\n"
        "        seen += 1\n"
        "    except FileNotFoundError:\n"
        "        time.sleep(0.001)\n"
        "print(seen)\n"
    )
    launcher = tmp_path / "many.py"
    done = tmp_path / "done"
    launcher.write_text(
        "import subprocess, sys\n"
        f"ckpt, done = {str(ckpt)!r}, {str(done)!r}\n"
        f"reader_argv = [sys.executable, {str(reader)!r}, ckpt + '/envlock-snapshot.json', done]\n"
        "reader = subprocess.Popen(reader_argv, stdout=subprocess.PIPE, text=True)\n"
        f"writer_argv = [sys.executable, {str(writer)!r}, ckpt]\n"
        "writers = [subprocess.Popen([*writer_argv, str(w)]) for w in range(8)]\n"
        "codes = [w.wait() for w in writers]\n"
        "open(done, 'w').close()\n"
        "out, _ = reader.communicate()\n"
        "print(max(codes), reader.returncode, out.strip())\n"
    )
    ran = project.run("python", launcher)
    writers, reader_code, reads = ran.stdout.split()
    assert (writers, reader_code) == ("0", "0"), ran.stderr  # a partial file: json fails
    assert int(reads) > 0
    assert [p.name for p in ckpt.iterdir()] == ["envlock-snapshot.json"]
    assert load_snapshot(ckpt)["config"]["step"] == 14


def test_torch_distributed_decides_the_rank_when_initialized(
    project: Project, tmp_path: Path
) -> None:
    """An initialized process group is asked, never imported: a stand-in module plays it."""
    script = tmp_path / "dist.py"
    script.write_text(
        "import sys, types, envlock\n"
        "dist = types.ModuleType('torch.distributed')\n"
        "dist.is_available = lambda: True\n"
        "dist.is_initialized = lambda: True\n"
        "dist.get_rank = lambda: int(sys.argv[2])\n"
        "dist.get_world_size = lambda: 16\n"
        "sys.modules['torch.distributed'] = dist\n"
        "print(envlock.snapshot(sys.argv[1], all_ranks=sys.argv[2] != '0'))\n"
    )
    env = {**os.environ, "RANK": "0", "WORLD_SIZE": "1"}  # what the group says wins
    ran = project.run("python", script, tmp_path / "d", "5", env=env)
    assert ran.stdout.strip() == str(tmp_path / "d" / "envlock-snapshot.rank5.json")
    process = load_snapshot(tmp_path / "d" / "envlock-snapshot.rank5.json")["process"]
    assert (process["rank"], process["world_size"]) == (5, 16)
    assert process["from"] == "torch.distributed"


def test_a_real_envlock_is_never_shadowed(project: Project) -> None:
    """envlock's own Python under `envlock run` still imports envlock itself."""
    code = "import envlock, envlock.runs.snapshot; print(envlock.__file__)"
    ran = project.run(sys.executable, "-c", code)
    assert ran.stdout.strip() == str(Path(envlock_file()).resolve())


def envlock_file() -> str:
    import envlock

    return str(envlock.__file__)


def test_outside_envlock_run_it_records_and_says_it_was_not_verified(
    project: Project, tmp_path: Path
) -> None:
    # The generation's python started directly (an env copied without ENVLOCK_*, an IDE):
    # the snapshot records what the process sees and says the environment was not verified.
    seen = project.run("python", "-c", "import os; print(os.environ['PYTHONPATH'])")
    pythonpath = seen.stdout.strip()
    code = "import envlock\nprint(envlock.snapshot('x'))\n"
    bare = {k: v for k, v in os.environ.items() if not k.startswith("ENVLOCK_")}
    for env in ({**bare, "PYTHONPATH": pythonpath}, bare):  # run's copy, the generation's
        alone = subprocess.run(
            [str(project.python), "-c", code], env=env, capture_output=True, text=True, cwd=tmp_path
        )
        assert alone.returncode == 0, alone.stderr
        assert "was not verified against its lock" in alone.stderr
        written = json.loads((tmp_path / "x" / "envlock-snapshot.json").read_text())
        assert written["verified"] is False and written["profile"]["name"] == "train"
        shutil.rmtree(tmp_path / "x")
    # A Python that is no generation, given the API's directory: the advice, nothing written.
    plain = Path(sys.base_prefix) / "bin" / "python3"
    elsewhere = subprocess.run(
        [str(plain), "-c", code],
        env={**bare, "PYTHONPATH": pythonpath},
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert "needs a process started by `envlock run PROFILE -- CMD`" in elsewhere.stderr
    assert not (tmp_path / "x").exists()
    # envlock's own API outside envlock run, without a profile: the same advice.
    own = subprocess.run(
        [sys.executable, "-c", "import envlock; envlock.snapshot('x')"],
        env=bare,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert own.returncode != 0 and "envlock run" in own.stderr


def test_an_envlock_in_the_lock_is_not_shadowed(project: Project, tmp_path: Path) -> None:
    """When the generation installs a package named envlock, run exposes no API of its own."""
    seen = project.run("python", "-c", "import os; print(os.environ['PYTHONPATH'])")
    assert seen.stdout.strip().endswith("envlock_api")
    # The rule that decides it, on a state whose packages hold envlock.
    from envlock.profile.read import load_profile
    from envlock.reconcile.state import parse_state
    from envlock.runs.environment import run_environment

    profile = load_profile(project.profile)
    state = parse_state({"current": "1-abc", "packages": {"envlock": "0.1.0"}})
    env = run_environment(profile, state, {})
    assert "envlock_api" not in env["PYTHONPATH"] and env["PYTHONPATH"].endswith("startup")


def test_diff_shows_a_changed_hyperparameter(project: Project, tmp_path: Path) -> None:
    script = tmp_path / "hp.py"
    script.write_text(
        "import sys, envlock\n"
        "envlock.snapshot(sys.argv[1], config={'lr': float(sys.argv[2]), 'batch': 64})\n"
    )
    project.run("python", script, tmp_path / "a", "0.1")
    project.run("python", script, tmp_path / "b", "0.2")
    result = run_envlock("diff", "--json", tmp_path / "a", tmp_path / "b")
    assert result.returncode == 1
    groups: dict[str, Any] = {g["name"]: g["changes"] for g in json.loads(result.stdout)["groups"]}
    assert groups == {"hyperparameters": [{"key": "run.lr", "a": 0.1, "b": 0.2, "kind": "changed"}]}


# -- remote targets: the startup set is shipped to <root>/startup/<version>/ -------------------
def remote_profile(base: Path, wheelhouse: Path, target: list[str], extra: str = "") -> Path:
    """A cpu-torch profile (no GPU driver needed) for a remote target, locked."""
    base.mkdir(parents=True, exist_ok=True)
    (base / "scripts").mkdir(exist_ok=True)
    (base / "scripts" / "train.py").write_text("print('training')\n")
    profile = base / "remote.toml"
    lines = [
        "[profile]",
        'name = "remote"',
        "[target]",
        *target,
        "[python]",
        'version = "3.11"',
        "[torch]",
        'version = "2.11.0"',
        'backend = "cpu"',
        "[dependencies]",
        'packages = ["trainutil", "tinydep==1.0"]',
        f"find-links = {json.dumps([str(wheelhouse)])}",
        "offline = true",
        "[env]",
        'NCCL_DEBUG = "INFO"',
        "[scripts]",
        'source = "scripts"',
        'dest = "/opt/train dir"',
        'files = ["train.py"]',
        extra,
    ]
    profile.write_text("\n".join(lines) + "\n")
    for args in (("lock", profile), ("apply", "-y", profile)):
        result = remote_cli(*args)
        assert result.returncode == 0, result.stdout + result.stderr
    return profile


def remote_cli(*args: str | Path, env: dict[str, str] | None = None) -> Any:
    return run_envlock(*args, env={**os.environ, PVE_SECRET: "secret", **(env or {})})


PVE_SECRET = "ENVLOCK_TEST_PVE_PASSWORD"
# Run on the target: snapshot into argv[1] and say where the API and megacache came from.
REMOTE_CODE = (
    "import json, sys, envlock, envlock_megacache\n"
    "path = envlock.snapshot(sys.argv[1], config={'lr': float(sys.argv[2])})\n"
    "print(json.dumps([path, envlock.__file__, envlock_megacache.__file__]))\n"
)


def remote_snapshot(profile: Path, ckpt: str, lr: str) -> list[str]:
    ran = remote_cli(
        "run",
        "--env",
        "HF_TOKEN",
        profile,
        "--",
        "python",
        "-c",
        REMOTE_CODE,
        ckpt,
        lr,
        env={"HF_TOKEN": "hf-remote-secret-0003"},
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    return json.loads(ran.stdout.strip().splitlines()[-1])


def test_snapshot_inside_a_run_on_an_ssh_target(
    tmp_path: Path, wheelhouse: Path, node_sshd: Any
) -> None:
    from tests.remote.test_remote import ssh_lines

    root = tmp_path / "ssh root"
    target = ['type = "ssh"', f'root = "{root}"', f'venv = "{tmp_path}/venv"']
    profile = remote_profile(tmp_path / "p", wheelhouse, [*target, *ssh_lines(node_sshd)])
    path, api, megacache = remote_snapshot(profile, str(tmp_path / "ckpt-a"), "0.1")
    (version,) = os.listdir(root / "startup")  # one version, complete, nothing half-made
    shipped = root / "startup" / version
    assert (shipped / ".complete").is_file()
    assert api == str(shipped / "startup" / "envlock_api" / "envlock" / "__init__.py")
    assert megacache == str(shipped / "startup" / "envlock_megacache.py")
    # The ssh target is this machine: the snapshot it wrote is readable here.
    data = load_snapshot(Path(path).parent)
    assert data["host"]["target"].startswith("ssh root@127.0.0.1")
    assert data["packages"]["tinydep"] == "1.0" and data["torch"]["version"] == "2.11.0+cpu"
    assert data["env"]["NCCL_DEBUG"] == "INFO"
    assert data["env"]["HF_TOKEN"].startswith("<redacted sha256:")
    assert "hf-remote-secret-0003" not in Path(path).read_text()
    # Shipped once per version: a second run finds it and leaves it alone.
    marker = (shipped / ".complete").stat()
    remote_snapshot(profile, str(tmp_path / "ckpt-b"), "0.2")
    assert os.listdir(root / "startup") == [version]
    assert (shipped / ".complete").stat().st_ino == marker.st_ino
    groups = json.loads(
        run_envlock("diff", "--json", tmp_path / "ckpt-a", tmp_path / "ckpt-b").stdout
    )
    assert [(g["name"], [c["key"] for c in g["changes"]]) for g in groups["groups"]] == [
        ("hyperparameters", ["run.lr"])
    ]


def test_snapshot_inside_a_run_in_an_lxc_container(
    tmp_path: Path,
    wheelhouse: Path,
    node_sshd: Any,
    lxc_container: Any,
    fakepve: Any,
    fakepve_url: str,
    fakepve_cafile: str,
) -> None:
    """proxmox-lxc: a real LXC container behind a real sshd and the test `pct`."""
    from tests.remote.test_remote import TEMPLATE, ssh_lines

    vmid = lxc_container(mounts=[(wheelhouse, str(wheelhouse))])
    fakepve.store_file("local", TEMPLATE, 1, "vztmpl")
    root = "/opt/env lock 'q'; x"
    target = [
        'type = "proxmox-lxc"',
        f'api-url = "{fakepve_url}"',
        'node = "pve1"',
        f"vmid = {vmid}",
        'api-user = "root@pam"',
        f'secret-env = "{PVE_SECRET}"',
        f'ca-file = "{fakepve_cafile}"',
        f'root = "{root}"',
        'venv = "/opt/venv"',
        *ssh_lines(node_sshd),
    ]
    container = "\n".join(
        [
            "[container]",
            f'ostemplate = "local:vztmpl/{TEMPLATE}"',
            'rootfs = "local-lvm:8"',
            f'mounts = [{{ source = "{wheelhouse}", path = "{wheelhouse}" }}]',
        ]
    )
    profile = remote_profile(tmp_path / "p", wheelhouse, target, extra=container)
    path, api, megacache = remote_snapshot(profile, "/opt/ckpt", "0.1")
    assert path == "/opt/ckpt/envlock-snapshot.json"
    assert api.startswith(f"{root}/startup/") and megacache.startswith(f"{root}/startup/")
    # Read the container's snapshot back here, and check it as any snapshot is checked.
    cat = node_sshd.run("pct", "exec", str(vmid), "--", "cat", path)
    assert cat.returncode == 0, cat.stderr
    (tmp_path / "back").mkdir()
    (tmp_path / "back" / "envlock-snapshot.json").write_text(cat.stdout)
    data = load_snapshot(tmp_path / "back")
    assert data["host"]["target"] == f"container {vmid} on 127.0.0.1"
    # The same facts as `envlock snapshot` gathers over the transport.
    cli = remote_cli("snapshot", profile, tmp_path / "cli")
    assert cli.returncode == 0, cli.stderr
    outside = load_snapshot(tmp_path / "cli")
    same = ("lock", "generation", "python", "platform", "packages", "torch", "host", "cache")
    assert {k: data[k] for k in same} == {k: outside[k] for k in same}
    assert data["scripts"]["dest"] == "/opt/train dir" and set(data["scripts"]["sha256"]) == {
        "train.py"
    }
    assert data["env"]["HF_TOKEN"].startswith("<redacted sha256:")
    assert data["config"] == {"lr": 0.1}


def test_a_corrupted_startup_upload_is_refused(tmp_path: Path) -> None:
    """The installer on the target keeps only a set whose hash is the version it is named
    for (what the transport delivered is hashed back from disk)."""
    import base64

    from envlock.runs.startup_set import INSTALLER, startup_files, version_of

    files = startup_files()
    payload = {rel: base64.b64encode(data).decode() for rel, data in files.items()}
    final = tmp_path / "startup" / version_of(files)
    final.parent.mkdir()
    corrupted = dict(payload, **{"base/secrets.py": base64.b64encode(b"evil = 1\n").decode()})
    bad = subprocess.run(
        [sys.executable, "-c", INSTALLER, str(final), version_of(files)],
        input=json.dumps(corrupted),
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 3 and "arrived corrupted" in bad.stderr
    assert os.listdir(final.parent) == []  # nothing left behind, nothing installed
    good = subprocess.run(
        [sys.executable, "-c", INSTALLER, str(final), version_of(files)],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
    )
    assert good.returncode == 0, good.stderr
    assert (final / ".complete").is_file()
    assert (final / "base" / "secrets.py").read_bytes() == files["base/secrets.py"]


# -- configs as data -------------------------------------------------------------------------
class ToDict:  # OmegaConf containers, many config classes
    def to_dict(self) -> dict[str, Any]:
        return {"layers": 2, "path": Path("/data")}


class Broken:
    def model_dump(self) -> dict[str, Any]:
        raise ValueError("cannot")

    def __repr__(self) -> str:
        return "Broken()"


class Frozen(Mapping[str, int]):  # a Mapping that is no dict (OmegaConf's DictConfig is one)
    def __getitem__(self, key: str) -> int:
        return {"a": 1}[key]

    def __iter__(self) -> Iterator[str]:
        return iter(["a"])

    def __len__(self) -> int:
        return 1


@dataclasses.dataclass
class Sched:
    warmup: int = 10
    milestones: tuple[int, ...] = (100, 200)


def cycle() -> list[Any]:
    loop: list[Any] = []
    loop.append(loop)
    return loop


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"lr": 0.1, 3: None}, {"lr": 0.1, "3": None}),
        (argparse.Namespace(lr=0.1), {"__class__": "argparse.Namespace", "lr": 0.1}),
        (Sched(), {"__class__": "Sched", "warmup": 10, "milestones": [100, 200]}),
        (ToDict(), {"__class__": "ToDict", "layers": 2, "path": "/data"}),
        (Broken(), "Broken()"),
        (Frozen(), {"a": 1}),
        ({"tags": {"b", "a"}}, {"tags": ["a", "b"]}),
    ],
    ids=["dict", "namespace", "dataclass", "to_dict", "export-fails", "mapping", "set"],
)
def test_configs_become_json_data(config: Any, expected: Any) -> None:
    assert plain(config) == expected
    json.dumps(plain(config))


def test_a_cyclic_config_ends_as_a_repr() -> None:
    flat = json.dumps(plain(cycle()))
    assert "[...]" in flat
