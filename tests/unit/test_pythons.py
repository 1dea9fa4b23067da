"""One function starts envlock's own Pythons (envlock/base/pythons.py), and nothing else does.

A scan of envlock/ finds every command line that would start an interpreter outside that
module: an argv whose first word is a Python, interpreter flags outside `sh -c SCRIPT`, a
`sh -c` script that execs what follows it, a shell command line (os.system, shell=True)
naming a Python, a read of a transport's `system_python`, or `sys.executable` in a command.
The scanner is itself tested on the shapes it must catch. Then the function's argv, run for
real: isolated, in `/`, and never a planted interpreter.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from envlock.base.pythons import own_python
from envlock.targets.local import LocalTransport

PACKAGE = Path(__file__).resolve().parents[2] / "envlock"
THE_ONE = PACKAGE / "base" / "pythons.py"

SHELLS = {"sh", "bash", "dash", "/bin/sh", "/bin/bash"}
INTERPRETER_FLAGS = {"-c", "-m", "-I", "-S", "-E", "-s", "-B", "-X", "-P"}
# An interpreter's path or name, as an argv's first word, a name in code, a word of a script.
PYTHON_PATH = re.compile(r"^(.*/)?python[0-9.]*$")
PYTHON_NAME = re.compile(r"(^|_)(python|interpreter)$|^py$", re.I)
PYTHON_IN_SCRIPT = re.compile(r"(^|[\s/\"'])python[0-9.]*[\"']?(\s|$)")
# A shell script that execs a word it was given runs whatever argv follows it.
EXEC_ARGUMENT = re.compile(r"\bexec\s+\"?\$")


def constant(node: ast.AST, names: dict[str, str]) -> str | None:
    """The string a node stands for: a literal, or a name bound to one in the module."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return names.get(node.id)
    return None


def looks_like_python(node: ast.AST, names: dict[str, str]) -> bool:
    """An argv's first word that is an interpreter: "python3", f"{gen}/bin/python",
    os.path.join(…, "python"), sys.executable, a name or attribute called python."""
    if is_sys_executable(node):
        return True
    text = constant(node, names)
    if text is not None:
        return bool(PYTHON_PATH.search(text))
    if isinstance(node, ast.JoinedStr):
        tail = node.values[-1] if node.values else None
        return isinstance(tail, ast.Constant) and bool(PYTHON_PATH.search(str(tail.value)))
    if isinstance(node, ast.Call) and node.args and ast.unparse(node.func).endswith("join"):
        return looks_like_python(node.args[-1], names)
    if isinstance(node, ast.BinOp):
        return looks_like_python(node.right, names)
    identifier = node.id if isinstance(node, ast.Name) else getattr(node, "attr", "")
    return bool(PYTHON_NAME.search(identifier))


def is_sys_executable(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "executable"
        and isinstance(node.value, ast.Name)
        and node.value.id == "sys"
    )


def module_strings(tree: ast.AST) -> dict[str, str]:
    """Names bound to string constants anywhere in the module (SCRIPT = "…")."""
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(getattr(node.value, "value", 0), str):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found[target.id] = node.value.value
    return found


def argv_problems(items: list[ast.AST], names: dict[str, str]) -> list[str]:
    """What in one list/tuple literal would start a Python."""
    words = [item.value if isinstance(item, ast.Starred) else item for item in items]
    if not words:
        return []
    problems = []
    first = constant(words[0], names)
    shell = first in SHELLS and len(words) > 2 and constant(words[1], names) == "-c"
    if shell:
        script = constant(words[2], names)
        if script is None or EXEC_ARGUMENT.search(script) or PYTHON_IN_SCRIPT.search(script):
            problems.append("a `sh -c` script that starts what follows it")
    elif looks_like_python(words[0], names):
        problems.append("an argv that starts a Python")
    flags_from = 3 if shell else 0
    if any(constant(w, names) in INTERPRETER_FLAGS for w in words[flags_from:]):
        problems.append("interpreter flags in an argv")
    if any(is_sys_executable(w) for w in words):
        problems.append("sys.executable in an argv")
    return problems


def scan(source: str) -> list[tuple[int, str]]:
    """(line, what) for each place in a module that starts a Python on its own."""
    tree = ast.parse(source)
    names = module_strings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "system_python":
            if isinstance(node.ctx, ast.Load):
                found.append((node.lineno, "reads a transport's system_python"))
        elif isinstance(node, (ast.List, ast.Tuple)):
            found += [(node.lineno, problem) for problem in argv_problems(node.elts, names)]
        elif isinstance(node, ast.Call):
            called = ast.unparse(node.func)
            execs = re.fullmatch(r"(os\.)?(exec|spawn|posix_spawn)\w*", called)
            if execs and node.args and looks_like_python(node.args[0], names):
                found.append((node.lineno, f"{called} of a Python"))
            if node.args and shell_string(node, called):
                line = constant(node.args[0], names)
                if line is None or PYTHON_IN_SCRIPT.search(line) or EXEC_ARGUMENT.search(line):
                    found.append((node.lineno, "a shell command line that starts a Python"))
        elif isinstance(node, ast.Assign) and is_sys_executable(node.value):
            # An alias would carry it into an argv unseen; a transport may declare it as
            # its system_python, which only pythons.py reads.
            names_bound = [getattr(t, "attr", getattr(t, "id", "")) for t in node.targets]
            if any(name != "system_python" for name in names_bound):
                found.append((node.lineno, "sys.executable kept under another name"))
    return found


def shell_string(call: ast.Call, called: str) -> bool:
    """A command given as one string to a shell: os.system, os.popen, shell=True."""
    shell = any(
        k.arg == "shell" and not (isinstance(k.value, ast.Constant) and not k.value.value)
        for k in call.keywords
    )
    return shell or called in ("os.system", "os.popen")


def envlock_modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if p != THE_ONE)


def test_no_code_outside_pythons_py_starts_a_python() -> None:
    offenders = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {what}"
        for path in envlock_modules()
        for line, what in scan(path.read_text())
    ]
    assert offenders == [], (
        "start envlock's Pythons with envlock.base.pythons.own_python:\n" + "\n".join(offenders)
    )


MUST_CATCH = [
    'argv = [transport.system_python, "-c", PROGRAM]',
    'transport.run([self.transport.system_python, "-c", "print(1)", "x"])',
    "python = transport.system_python",
    'subprocess.run([sys.executable, "-m", "json.tool"])',
    'proc = transport.spawn([f"{gen}/bin/python", "-c", LAUNCHER, *argv])',
    'transport.run([os.path.join(gen, "bin", "python"), script])',
    'transport.run(["python3", "-c", "import os"])',
    'transport.run([python, "-c", INSTALLER, final])',
    'run_step([interpreter, "-I", "-S", "-c", code])',
    'transport.run(("/usr/bin/python3.11", "script.py"))',
    'SCRIPT = \'mkdir -p "$1" && shift && exec "$@"\'\nrun(["sh", "-c", SCRIPT, "sh", d, p])',
    'run(["sh", "-c", \'exec "$p" "$@"\', "sh", p, "-c", code])',
    'run(["sh", "-c", "python3 -c \'import os\'"])',
    'run(["sh", "-c", script_from_elsewhere, "sh", x])',
    'os.execv(python, [python, "-c", code])',
    'os.execvpe("python3", argv, env)',
    'subprocess.Popen(["env", "-i", sys.executable, "x.py"])',
    'exe = sys.executable\nrun([exe, "x.py"])',
    "os.system(\"python3 -c 'import os'\")",
    'subprocess.run(f"{gen}/bin/python -c pass", shell=True)',
    "subprocess.check_output(line, shell=True)",
]

MUST_PASS = [
    'transport.run(["sh", "-c", \'umask 077 && mkdir -p "$1" && cat > "$2"\', "sh", d, p])',
    'transport.run(["test", "-f", path])',
    'subprocess.run(["git", "-C", directory, "rev-parse", "HEAD"])',
    'argv = [req["uv"], "pip", "sync", lock, "--python", os.path.join(gen, "bin", "python")]',
    "self.system_python = sys.executable",
    "os.execvpe(argv[0], argv, env)",
    'Drift("interpreter", f"{root}/current/bin/python", "runs", "does not start")',
    "return own_python(transport, LAUNCHER, env_file, pid_file, *argv, root=root)",
    "subprocess.run(argv, shell=False)",
    'os.system("nvidia-smi -L")',
]


@pytest.mark.parametrize("source", MUST_CATCH)
def test_the_scan_catches_a_new_way_of_starting_a_python(source: str) -> None:
    assert scan(source), source


@pytest.mark.parametrize("source", MUST_PASS)
def test_the_scan_passes_what_starts_no_python(source: str) -> None:
    assert scan(source) == [], source


# -- the function's argv, run for real ----------------------------------------------------
REPORT = """
import json, os, sys
print(json.dumps({
    "cwd": os.getcwd(), "path": sys.path, "executable": sys.executable,
    "isolated": sys.flags.isolated, "no_site": sys.flags.no_site,
    "site_loaded": "site" in sys.modules, "args": sys.argv[1:],
}))
"""


def report(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> dict[str, object]:
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def plant(directory: Path, canary: Path) -> None:
    """Modules that shadow what a Python imports first, each leaving a canary."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("json", "os", "binascii", "sitecustomize", "usercustomize", "encodings"):
        (directory / f"{name}.py").write_text(f"open({str(canary)!r}, 'a').write('{name}\\n')\n")


def test_own_python_is_isolated_from_the_callers_directory_and_environment(
    tmp_path: Path,
) -> None:
    caller, canary = tmp_path / "shared dir", tmp_path / "canary"
    plant(caller, canary)
    startup = tmp_path / "startup.py"
    startup.write_text(f"open({str(canary)!r}, 'a').write('startup\\n')\n")
    env = {
        **os.environ,
        "PYTHONPATH": str(caller),
        "PYTHONSTARTUP": str(startup),
        "PYTHONHOME": str(tmp_path / "no-such-home"),  # ignored, not fatal
        "PYTHONINSPECT": "1",
    }
    argv = own_python(LocalTransport(), REPORT, "a b", "$(touch x)")
    seen = report(argv, caller, env)
    assert not canary.exists()
    assert seen["cwd"] == "/"
    assert seen["isolated"] == 1 and seen["no_site"] == 1 and seen["site_loaded"] is False
    assert seen["args"] == ["a b", "$(touch x)"]
    assert str(caller) not in seen["path"] and "" not in seen["path"]
    assert not [p for p in seen["path"] if "site-packages" in str(p)]


def make_root(tmp_path: Path) -> tuple[Path, Path]:
    """A root whose current generation is a real venv (uv's: bin/python links out)."""
    from tests.support import UV

    root = tmp_path / "root"
    gen = root / "generations" / "1-000000000000"
    subprocess.run(
        [UV, "venv", "-q", "--offline", "--no-python-downloads", "--python", sys.executable, gen],
        check=True,
    )
    (root / "current").symlink_to(gen)
    return root, gen


def test_the_environments_interpreter_runs_when_it_links_out_of_the_root(
    tmp_path: Path,
) -> None:
    root, _ = make_root(tmp_path)
    seen = report(own_python(LocalTransport(), REPORT, root=str(root)), tmp_path)
    assert seen["executable"] == f"{root}/current/bin/python"
    assert seen["no_site"] == 1 and seen["cwd"] == "/"


@pytest.mark.parametrize("how", ["binary", "link-inside", "root-through-a-link"])
def test_a_planted_interpreter_is_never_run(tmp_path: Path, how: str) -> None:
    root, gen = make_root(tmp_path)
    canary = tmp_path / "planted-ran"
    python = gen / "bin" / "python"
    planted = f'#!/bin/sh\necho planted > {canary}\nexec {sys.executable} "$@"\n'
    python.unlink()
    if how == "binary":
        python.write_text(planted)
        python.chmod(0o755)
    else:
        inside = root / "tools" / "python"
        inside.parent.mkdir()
        inside.write_text(planted)
        inside.chmod(0o755)
        python.symlink_to(os.path.relpath(inside, python.parent))
    if how == "root-through-a-link":  # the root itself reached through a link: still inside it
        alias = tmp_path / "alias"
        alias.symlink_to(root)
        root = alias
    seen = report(own_python(LocalTransport(), REPORT, root=str(root)), tmp_path)
    assert not canary.exists()
    assert seen["executable"] == sys.executable  # the fallback: the transport's python
