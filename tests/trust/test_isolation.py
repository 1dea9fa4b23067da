"""Pollution that fights back, on real roots built by envlock: envlock's own Pythons (probe,
agent, remote launcher) run isolated (envlock/base/pythons.py), so what a polluting install or a
shared directory plants never runs inside them and cannot hide from `check`.

Each case plants something, then `check`, `check --deep` and `plan` must still report the
drift by name (exit 1), `run` must refuse, and no canary may ever be written. The user's
command under `run` keeps its normal site: a `.pth`-installed package of the lock imports.

The controller is started as a user starts it, by its console script (`python -m envlock`
would put the working directory on the controller's own sys.path). Where the case is the
caller's PYTHON* variables it is started with -E: envlock's own entry point is the
caller's interpreter, not one envlock starts; the variables still reach what envlock
starts, through the environment it inherits.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.projects import write_seed_project
from tests.remote.fixtures import Node
from tests.remote.test_remote import cli, ssh_target
from tests.wheelhouse import build_wheel

CONSOLE = Path(sys.executable).parent / "envlock"
SITE = "lib/python3.11/site-packages"


@dataclass
class Pollution:
    """What a case planted: the drift it must show, and how the controller is started."""

    expected: set[tuple[str, str]]
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    controller: tuple[str, ...] = ()  # flags for the controller's own interpreter


@dataclass(frozen=True)
class Project:
    profile: Path
    gen: Path  # the active generation (real path)
    canary: Path
    workdir: Path  # a directory others can write, where root types the command

    @property
    def site(self) -> Path:
        return self.gen / SITE


def with_pth_package(wheelhouse: Path, dest: Path) -> Path:
    """The suite's wheels plus `pthpkg`, whose module is importable only through the `.pth`
    file its wheel installs (as editable installs and some namespace packages do)."""
    dest.mkdir()
    for wheel in wheelhouse.iterdir():
        (dest / wheel.name).symlink_to(wheel)
    files = {"pthpkg.pth": "pthpkg_lib\n", "pthpkg_lib/pthmod.py": "VALUE = 42\n"}
    build_wheel(dest, "pthpkg", "1.0", files={**files, "pthpkg/__init__.py": ""})
    return dest


@pytest.fixture
def project(tmp_path: Path, wheelhouse: Path) -> Project:
    links = with_pth_package(wheelhouse, tmp_path / "wheels")
    profile = write_seed_project(
        tmp_path / "proj", links, packages=("trainutil", "tinydep==1.0", "pthpkg")
    )
    for command in (["lock"], ["apply", "-y"]):
        done = envlock(*command, profile, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
    gen = (tmp_path / "proj" / "root" / "current").resolve()
    workdir = tmp_path / "workspace"
    workdir.mkdir(mode=0o777)
    return Project(profile, gen, tmp_path / "canary", workdir)


def envlock(
    *args: str | Path,
    cwd: Path,
    env: dict[str, str] | None = None,
    controller: tuple[str, ...] = (),
) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, *controller, str(CONSOLE), *map(str, args)]
    return subprocess.run(
        argv, cwd=cwd, capture_output=True, text=True, env={**os.environ, **(env or {})}
    )


def writes_canary(canary: Path, what: str) -> str:
    """Python source that leaves a line in the canary: who ran it."""
    return (
        "import sys\n"
        "_who = [a[:60] for a in getattr(sys, 'orig_argv', sys.argv)[:3]]\n"
        f"with open({str(canary)!r}, 'a') as _h:\n"
        f"    _h.write({what!r} + ' ' + repr(_who) + '\\n')\n"
    )


# A `.pth` that makes the probe blind: names starting with "zz" vanish from every listing,
# and reading the edited file gives its original bytes (so a deep check's hash matches).
HIDER = """
import builtins, io, os
_scandir, _listdir, _open = os.scandir, os.listdir, builtins.open
ORIGINAL = {original!r}
EDITED = {edited!r}
class _Hidden:
    def __init__(self, it): self.it = it
    def __enter__(self): return self
    def __exit__(self, *a): self.it.close()
    def __iter__(self): return self
    def __next__(self):
        while True:
            entry = next(self.it)
            if not entry.name.startswith("zz"):
                return entry
    def close(self): self.it.close()
os.scandir = lambda path=".": _Hidden(_scandir(path))
os.listdir = lambda path=".": [n for n in _listdir(path) if not str(n).startswith("zz")]
def _reopen(file, *args, **kwargs):
    if isinstance(file, str) and file.endswith(EDITED):
        file = ORIGINAL
    return _open(file, *args, **kwargs)
builtins.open = io.open = _reopen
"""


def pth_that_hides(p: Project) -> Pollution:
    edited = p.site / "trainutil" / "__init__.py"
    original = p.site / "zzoriginal.bin"
    original.write_bytes(edited.read_bytes())
    with open(edited, "a") as handle:
        handle.write("print('tampered')\n")
    hider = HIDER.format(original=str(original), edited="trainutil/__init__.py")
    (p.site / "zzhide.py").write_text(hider + writes_canary(p.canary, "hider"))
    (p.site / "zz-hide.pth").write_text("import zzhide\n")
    (p.site / "zzplanted.py").write_text("x = 1\n")
    return Pollution(
        {
            ("pth-injection", f"{SITE}/zz-hide.pth"),
            ("file-added", f"{SITE}/zzhide.py"),
            ("file-added", f"{SITE}/zzplanted.py"),
            ("file-added", f"{SITE}/zzoriginal.bin"),
            ("file-modified", f"{SITE}/trainutil/__init__.py"),
        }
    )


def plain_pth(p: Project) -> Pollution:
    # site.py runs a .pth line that starts with "import": one line, as such files are.
    line = f"import sys; open({str(p.canary)!r}, 'a').write('pth %r\\n' % sys.argv[:1])"
    (p.site / "evil.pth").write_text(line + "\n")
    return Pollution({("pth-injection", f"{SITE}/evil.pth")})


def customize(name: str) -> Callable[[Project], Pollution]:
    def plant(p: Project) -> Pollution:
        (p.site / f"{name}.py").write_text(writes_canary(p.canary, name))
        return Pollution({("file-added", f"{SITE}/{name}.py")})

    return plant


STDLIB_NAMES = ("binascii", "json", "os", "zlib", "marshal", "hashlib", "re", "contextlib")


def stdlib_names_in(directory: Path, canary: Path) -> None:
    for name in STDLIB_NAMES:
        (directory / f"{name}.py").write_text(writes_canary(canary, name))


def stdlib_names_in_site(p: Project) -> Pollution:
    stdlib_names_in(p.site, p.canary)
    return Pollution({("file-added", f"{SITE}/{name}.py") for name in STDLIB_NAMES})


def planted_file(p: Project) -> set[tuple[str, str]]:
    """Something for the check to find while the case's pollution sits elsewhere."""
    (p.site / "planted.py").write_text("x = 1\n")
    return {("file-added", f"{SITE}/planted.py")}


def stdlib_names_in_the_callers_directory(p: Project) -> Pollution:
    stdlib_names_in(p.workdir, p.canary)
    (p.workdir / "sitecustomize.py").write_text(writes_canary(p.canary, "cwd sitecustomize"))
    return Pollution(planted_file(p), cwd=p.workdir)


def callers_python_variables(p: Project) -> Pollution:
    stdlib_names_in(p.workdir, p.canary)
    (p.workdir / "sitecustomize.py").write_text(writes_canary(p.canary, "sitecustomize"))
    (p.workdir / "usercustomize.py").write_text(writes_canary(p.canary, "usercustomize"))
    startup = p.workdir / "startup.py"
    startup.write_text(writes_canary(p.canary, "startup"))
    env = {"PYTHONPATH": str(p.workdir), "PYTHONSTARTUP": str(startup), "PYTHONINSPECT": "1"}
    return Pollution(planted_file(p), env=env, controller=("-E",))


def callers_python_home(p: Project) -> Pollution:
    # Another Python's home: envlock's own interpreters ignore it (a run's command has it
    # scrubbed), rather than failing to start or loading another stdlib.
    other = p.workdir / "home"
    (other / "lib" / "python3.11").mkdir(parents=True)
    stdlib_names_in(other / "lib" / "python3.11", p.canary)
    env = {"PYTHONHOME": str(other)}
    return Pollution(planted_file(p), env=env, controller=("-E",))


def planted_interpreter(p: Project) -> Pollution:
    python = p.gen / "bin" / "python"
    python.unlink()
    python.write_text(f'#!/bin/sh\necho interpreter >> {p.canary}\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    return Pollution({("interpreter", f"{p.gen.parent.parent}/current/bin/python")})


CASES = {
    "pth-that-hides-files": pth_that_hides,
    "plain-pth": plain_pth,
    "sitecustomize-in-site": customize("sitecustomize"),
    "usercustomize-in-site": customize("usercustomize"),
    "stdlib-names-in-site": stdlib_names_in_site,
    "stdlib-names-in-the-callers-directory": stdlib_names_in_the_callers_directory,
    "callers-python-variables": callers_python_variables,
    "callers-python-home": callers_python_home,
}


def reported(result: subprocess.CompletedProcess[str], key: str) -> set[tuple[str, str]]:
    assert result.stdout.strip(), result.stderr
    return {(d["kind"], d["subject"]) for d in json.loads(result.stdout)[key]}


@pytest.mark.parametrize("case", sorted(CASES))
def test_pollution_is_reported_and_never_runs(project: Project, case: str) -> None:
    pollution = CASES[case](project)
    cwd = pollution.cwd or project.profile.parent

    def run_cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
        return envlock(*args, cwd=cwd, env=pollution.env, controller=pollution.controller)

    for command in (["check", "--json"], ["check", "--deep", "--json"], ["plan", "--json"]):
        result = run_cli(*command, project.profile)
        assert result.returncode == 1, (command, result.stdout, result.stderr)
        found = reported(result, "drift")
        assert pollution.expected <= found, (command, found)
    human = run_cli("check", project.profile)
    assert "matches" not in human.stdout
    refused = run_cli("run", project.profile, "--", "true")
    assert refused.returncode == 1 and refused.stderr.startswith("envlock: "), refused.stderr
    assert not project.canary.exists(), project.canary.read_text()


def test_a_planted_interpreter_is_named_and_never_run(project: Project) -> None:
    # The probe falls back to the system python and says why the generation's is not run.
    # (`plan` lists this drift too; planning its repair is the planner's part, not this.)
    expected = planted_interpreter(project)
    for command in (["check", "--json"], ["check", "--deep", "--json"]):
        result = envlock(*command, project.profile, cwd=project.workdir)
        assert result.returncode == 1, (command, result.stdout, result.stderr)
        assert expected.expected <= reported(result, "drift")
        (item,) = [d for d in json.loads(result.stdout)["drift"] if d["kind"] == "interpreter"]
        assert item["actual"] == f"is {project.gen}/bin/python, a file inside the root: not run"
    plan = envlock("plan", "--json", project.profile, cwd=project.workdir)
    assert expected.expected <= reported(plan, "drift")
    refused = envlock("run", project.profile, "--", "true", cwd=project.workdir)
    assert refused.returncode == 1 and refused.stderr.startswith("envlock: ")
    assert not project.canary.exists(), project.canary.read_text()


def test_the_command_under_run_keeps_its_site(project: Project) -> None:
    # A .pth planted in the environment, run anyway: it runs in the user's Python (its
    # environment, its site), never in envlock's probe before it.
    (project.site / "zz-seen.pth").write_text("import zzseen\n")
    (project.site / "zzseen.py").write_text(writes_canary(project.canary, "seen"))
    program = "import pthmod, sys; print(pthmod.VALUE, sys.flags.no_site)"
    ran = envlock(
        "run", "--allow-drift", project.profile, "--", "python", "-c", program, cwd=project.workdir
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == ["42", "0"]
    (line,) = project.canary.read_text().splitlines()
    assert line.startswith("seen ") and "import pthmod" in line


# -- remote: the launcher, and the start line on ssh and pct --------------------------------
def ssh_project(tmp_path: Path, wheelhouse: Path, node: Node) -> Path:
    links = with_pth_package(wheelhouse, tmp_path / "wheels")
    profile = write_seed_project(
        tmp_path / "p", links, packages=("trainutil", "tinydep==1.0", "pthpkg"), scripts={}
    )
    text = profile.read_text().replace(
        '[target]\ntype = "local"\nroot = "root"\nvenv = "venv"\n',
        "[target]\n" + "\n".join(ssh_target(tmp_path / "root", tmp_path / "venv", node)) + "\n",
    )
    assert 'type = "ssh"' in text
    profile.write_text(text)
    for command in (["lock"], ["apply", "-y"]):
        done = cli(*command, profile)
        assert done.returncode == 0, done.stderr
    return profile


def test_the_remote_launcher_is_isolated_and_the_command_keeps_its_site(
    tmp_path: Path, wheelhouse: Path, node_sshd: Node
) -> None:
    profile = ssh_project(tmp_path, wheelhouse, node_sshd)
    site = (tmp_path / "root" / "current").resolve() / SITE
    canary = tmp_path / "canary"
    (site / "zz-seen.pth").write_text("import zzseen\n")
    (site / "zzseen.py").write_text(writes_canary(canary, "seen"))
    check = cli("check", "--json", profile)
    assert check.returncode == 1
    assert ("pth-injection", f"{SITE}/zz-seen.pth") in reported(check, "drift")
    assert not canary.exists()
    program = "import os, pthmod, sys; print(pthmod.VALUE, sys.flags.no_site, os.getcwd())"
    ran = cli("run", "--allow-drift", profile, "--", "python", "-c", program)
    assert ran.returncode == 0, ran.stderr
    value, no_site, cwd = ran.stdout.split()
    assert (value, no_site) == ("42", "0")
    assert cwd == os.path.expanduser("~")  # where ssh starts a command: the login's home
    # Only the user's command ran the .pth: not the probe, the installer or the launcher.
    (line,) = canary.read_text().splitlines()
    assert line.startswith("seen ") and "import os, pthmod" in line


REPORT = (
    "import json, os, sys; print(json.dumps([os.getcwd(), sys.flags.isolated, "
    "sys.flags.no_site, 'site' in sys.modules, sys.argv[1:]]))"
)


def test_the_start_line_is_isolated_over_ssh_and_pct(node_sshd: Node, lxc_container) -> None:
    from envlock.base.pythons import own_python
    from tests.remote.test_remote import transport

    pct = transport(node_sshd, lxc_container())
    for where in (pct.node, pct):
        result = where.run(own_python(where, REPORT, "a b", "$HOME"))
        assert result.ok, result.error_text()
        assert json.loads(result.stdout) == ["/", 1, 1, False, ["a b", "$HOME"]]
