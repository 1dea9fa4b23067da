"""One implementation per rule (issue 38, item 2): no two functions of envlock/ share a body,
and a rule's name is defined once.

- A body is a function's statements, its docstring aside, with every name, argument and
  constant made alike and annotations dropped: a typed controller copy of an untyped agent
  function, with its variables renamed and its messages reworded, is still the same body.
  Bodies of fewer than MIN_STATEMENTS statements (nested ones counted) are too small to say.
- A rule is a public top-level function of the modules that hold envlock's rules: every module
  of envlock/base/, and the agent's core, cuda and start modules (which the controller imports:
  envlock/agent/ is stdlib only and shipped, so a rule the agent needs is written there). A
  top-level function of the same name elsewhere is a second definition unless it hands over to
  the rule (calls it, as envlock/base/atomic.py calls the agent's write_atomic to give it
  envlock's errors) or is one of the HOMONYMS below: the same word for another thing.
- So is a public constant of those modules (TORCH_CUDA_FAMILIES, MAX_ENV_TEXT): assigned again
  at the top of another module, it is a copy (import it instead), unless it is a per-module
  convention (each command's KIND) or a homonym.
- No Python lives in a string (a program shipped to a target is a module, built from its
  source text: envlock/reconcile/agentcode.py's `program`), where ruff, mypy and these checks
  would never see it.
"""

from __future__ import annotations

import ast
import copy
import functools
import re
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "envlock"
MIN_STATEMENTS = 4
# The modules whose public top-level functions are envlock's rules (paths in envlock/).
RULE_MODULES = ("base/", "agent/core.py", "agent/cuda.py", "agent/start.py")
# Names every entry point or command module may define for itself.
CONVENTIONS = {"main", "command", "render_text", "render_json", "KIND", "KINDS"}
# Names of rules that elsewhere mean something else (each place, and what it is there).
HOMONYMS = {
    "describe": "base/tomlread.py: a TOML value for an error; commands/data.py: a dataset line",
    "fail": "agent/core.py: the agent's error answer; cli_group.py: the CLI's exit",
    "progress": "agent/core.py: a progress line; checkpoint/summary.py: a run's step and epoch",
    "read_json": "agent/core.py: its own state files; checkpoint/jsondata.py: through the gate",
    "shown": "base/limits.py, base/tomlread.py, schema.py: a value in a message, each in its own "
    "form; commands/guarded.py: how a guarded edit is shown",
    "start": "base/started.py: a process started early; agent/launch.py: the command of `run`",
    "untrusted": "agent/core.py: the ownership rule; ui.py: text from elsewhere made printable",
    "COMMANDS": "agent/core.py: the agent's commands; commands/__init__.py: the CLI's",
}


def package_sources(package: Path = PACKAGE) -> dict[str, str]:
    """{path inside envlock/: source} of every module."""
    return {p.relative_to(package).as_posix(): p.read_text() for p in sorted(package.rglob("*.py"))}


@functools.cache
def parsed(source: str) -> ast.Module:
    """A module's tree, parsed once (read only: body_of copies what it changes)."""
    return ast.parse(source)


# -- bodies -----------------------------------------------------------------------------------
class Alike(ast.NodeTransformer):
    """Names, arguments and constants made alike; annotations dropped."""

    def visit_Name(self, node: ast.Name) -> ast.AST:
        return ast.Name(id="_")

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        return ast.Name(id="_")

    def visit_JoinedStr(self, node: ast.JoinedStr) -> ast.AST:
        return ast.Name(id="_")

    def visit_arg(self, node: ast.arg) -> ast.AST:
        return ast.arg(arg="_")

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST | None:
        if node.value is None:
            return None
        return self.visit(ast.Assign(targets=[node.target], value=node.value))


Function = ast.FunctionDef | ast.AsyncFunctionDef


def statements(function: Function) -> list[ast.stmt]:
    """The function's statements, its docstring aside."""
    body = function.body
    first = body[0] if body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
        return body[1:] if isinstance(first.value.value, str) else body
    return body


def body_of(function: Function) -> str | None:
    """The function's body made alike, None when it is too small to say."""
    body = statements(function)
    if sum(isinstance(n, ast.stmt) for s in body for n in ast.walk(s)) < MIN_STATEMENTS:
        return None
    alike = [Alike().visit(copy.deepcopy(s)) for s in body]
    return ast.dump(ast.Module(body=alike, type_ignores=[]), annotate_fields=False)


@functools.cache
def bodies_in(rel: str, source: str) -> tuple[tuple[str, str], ...]:
    """(body, `path:line name`) of each function of a module: methods and nested ones too."""
    return tuple(
        (body, f"{rel}:{node.lineno} {node.name}")
        for node in ast.walk(parsed(source))
        if isinstance(node, Function) and (body := body_of(node)) is not None
    )


def shared_bodies(sources: dict[str, str]) -> list[list[str]]:
    """Each group of functions (`path:line name`) that share a body."""
    seen: dict[str, list[str]] = defaultdict(list)
    for rel, source in sources.items():
        for body, place in bodies_in(rel, source):
            seen[body].append(place)
    return sorted(places for places in seen.values() if len(places) > 1)


# -- rules' names ------------------------------------------------------------------------------
def top_level_functions(source: str) -> list[Function]:
    return [node for node in parsed(source).body if isinstance(node, Function)]


def top_level_constants(source: str) -> list[str]:
    """The UPPER_CASE names a module assigns at its top (`A = …`, `A, B = …`, `A: T = …`)."""
    found = []
    for node in parsed(source).body:
        targets = list(node.targets) if isinstance(node, ast.Assign) else []
        targets += [node.target] if isinstance(node, ast.AnnAssign) else []
        for target in targets:
            names = target.elts if isinstance(target, ast.Tuple) else [target]
            found += [n.id for n in names if isinstance(n, ast.Name) and n.id.isupper()]
    return found


def rules(sources: dict[str, str]) -> set[str]:
    return {
        name
        for rel, source in sources.items()
        if rel.startswith(RULE_MODULES)
        for name in [f.name for f in top_level_functions(source)] + top_level_constants(source)
        if not name.startswith("_")
    }


def hands_over(function: Function, tree: ast.Module) -> bool:
    """Whether `function` calls the rule of its own name (`core.write_atomic(...)`, or a name
    imported as it: `from envlock.base.usercache import entry_path as cache_entry`)."""
    aliases = {function.name} | {
        alias.asname
        for node in tree.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if alias.name == function.name and alias.asname
    }
    for node in ast.walk(function):
        if isinstance(node, ast.Call):
            called = node.func
            if isinstance(called, ast.Attribute) and called.attr == function.name:
                return True
            if isinstance(called, ast.Name) and called.id in aliases - {function.name}:
                return True
    return False


def definitions(sources: dict[str, str]) -> dict[str, list[str]]:
    """Each rule's name → where it is defined (`path`), hand-overs aside."""
    wanted = rules(sources) - CONVENTIONS
    found: dict[str, list[str]] = defaultdict(list)
    for rel, source in sources.items():
        tree = parsed(source)
        for function in top_level_functions(source):
            if function.name in wanted and not hands_over(function, tree):
                found[function.name].append(rel)
        for name in set(top_level_constants(source)) & wanted:
            found[name].append(rel)
    return found


def defined_twice(sources: dict[str, str]) -> dict[str, list[str]]:
    return {name: places for name, places in definitions(sources).items() if len(places) > 1}


# -- code in strings ---------------------------------------------------------------------------
# A %-template's fields (`%(key)r`), read as a value: a template is code all the same.
FIELD = re.compile(r"%\((\w+)\)[rsd]")


def python_in(text: str) -> bool:
    """Whether a string of three lines or more is a program: it parses as Python with at
    least MIN_STATEMENTS statements that are not all bare expressions (prose parses too)."""
    if text.count("\n") < 2:
        return False
    try:
        tree = ast.parse(FIELD.sub("0", text).replace("%%", "%"))
    except SyntaxError:
        return False
    if all(isinstance(statement, ast.Expr) for statement in tree.body):
        return False
    return sum(isinstance(n, ast.stmt) for n in ast.walk(tree)) >= MIN_STATEMENTS


def code_in_strings(sources: dict[str, str]) -> list[str]:
    return [
        f"{rel}:{node.lineno}"
        for rel, source in sources.items()
        for node in ast.walk(parsed(source))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and python_in(node.value)
    ]


# -- the tree ----------------------------------------------------------------------------------
def test_no_two_functions_share_a_body() -> None:
    assert shared_bodies(package_sources()) == []


def test_a_rules_name_is_defined_once() -> None:
    twice = defined_twice(package_sources())
    assert {n: p for n, p in twice.items() if n not in HOMONYMS} == {}
    # The list of homonyms is what the tree holds: a name freed leaves it.
    assert sorted(twice) == sorted(HOMONYMS)


def test_no_python_lives_in_a_string() -> None:
    assert code_in_strings(package_sources()) == []


# -- the checks can fail -------------------------------------------------------------------------
# The controller's copy of the agent's `untrusted`'s helper, typed, renamed, reworded: as it was.
PLANTED_JUDGE = '''
def judge(path: str, st: os.stat_result, uid: int, last: bool) -> str | None:
    """Why `path` is not ours."""
    if st.st_uid not in (uid, 0):
        whose = "root" if uid == 0 else f"{owner_name(uid)} or root"
        return f"{path} belongs to {owner_name(st.st_uid)}, not to {whose}"
    sticky = stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX
    if st.st_mode & 0o022 and (last or not sticky):
        return f"{path} may be written by others ({stat.S_IMODE(st.st_mode):o})"
    return None
'''


def test_a_planted_twin_body_is_found() -> None:
    sources = package_sources()
    sources["base/planted.py"] = "import os\nimport stat\n" + PLANTED_JUDGE
    (group,) = shared_bodies(sources)
    assert [place.split(":")[0] for place in group] == ["agent/core.py", "base/planted.py"]


def test_a_method_or_a_nested_function_is_a_body_too() -> None:
    source = "class C:\n    def judge_it(self, path, st, uid, last):\n" + "\n".join(
        "    " + line for line in PLANTED_JUDGE.split("\n", 2)[2].splitlines()
    )
    sources = {**package_sources(), "runs/planted.py": "import os\nimport stat\n" + source}
    assert len(shared_bodies(sources)) == 1


def test_a_rule_defined_again_is_found_and_a_hand_over_is_not() -> None:
    sources = package_sources()
    again = "def write_atomic(path, data, mode=0o644):\n    open(path, 'wb').write(data)\n"
    sources["runs/planted.py"] = again
    assert defined_twice(sources)["write_atomic"] == ["agent/core.py", "runs/planted.py"]
    handing = "from envlock.agent import core\n\ndef write_atomic(path, data):\n"
    sources["runs/planted.py"] = handing + "    core.write_atomic(path, data, 0o600)\n"
    assert "write_atomic" not in defined_twice(sources)
    aliased = "from envlock.agent.cuda import cuda_major as major\n\ndef cuda_major(n, v):\n"
    sources["runs/planted.py"] = aliased + "    return major(n, v)\n"
    assert "cuda_major" not in defined_twice(sources)


def test_a_copied_constant_is_found() -> None:
    """The CUDA families as the probe kept them: a copy of the rule's list."""
    copied = "TORCH_CUDA_FAMILIES = frozenset(['cublas'])\nNOT_FOUND, OTHER = 127, 1\n"
    sources = {**package_sources(), "agent/planted.py": copied}
    twice = defined_twice(sources)
    assert twice["TORCH_CUDA_FAMILIES"] == ["agent/cuda.py", "agent/planted.py"]
    assert twice["NOT_FOUND"] == ["agent/start.py", "agent/planted.py"]


PLANTED_STRINGS = r'''
BOOTSTRAP = """\
import os
k=%(key)r
if k:
    os.exit(k %% 2)
"""
TEXT = """A line.
Another line.
A third one.
"""
START = 'cd / || exit 125\nexec "$python" -c "$program"\nexit 1\n'
'''


def test_a_program_in_a_string_is_found() -> None:
    """The bootstrap as it was: a %-template of a program; prose and shell are not code."""
    assert code_in_strings({"runs/planted.py": PLANTED_STRINGS}) == ["runs/planted.py:2"]


def test_a_new_homonym_is_found() -> None:
    """A rule's name given to something else is a new entry in HOMONYMS, said why."""
    sources = {**package_sources(), "runs/planted.py": "def kind_of(x):\n    return x\n"}
    assert "kind_of" in defined_twice(sources)


# -- what ships is built from the modules ------------------------------------------------------
def test_each_shipped_program_is_its_modules_and_a_call() -> None:
    """The launcher, the installer and the bootstrap are their modules' source text (their
    repository-only imports aside) and one call: nothing else runs on the target, and what
    runs imports nothing of envlock's."""
    from envlock.reconcile.agentcode import BOOTSTRAP, REPO_ONLY, agent_bootstrap, agent_source
    from envlock.runs.launch import LAUNCHER
    from envlock.runs.startup_set import INSTALLER

    shipped = {
        LAUNCHER: ("start.py", "programs/launcher.py"),
        INSTALLER: ("start.py", "programs/installer.py"),
        agent_bootstrap("probe"): BOOTSTRAP,
    }
    for program, modules in shipped.items():
        sources = [REPO_ONLY.sub("", agent_source(name).decode()) for name in modules]
        built = "\n".join(sources)
        assert program.startswith(built)
        call = ast.parse(program[len(built) :]).body
        assert len(call) == 1 and isinstance(call[0], ast.Expr), program[len(built) :]
        imported = [
            name
            for node in ast.walk(ast.parse(program))
            for name in (
                [a.name for a in node.names] if isinstance(node, ast.Import) else
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            )
        ]  # fmt: skip
        assert imported and not [n for n in imported if n.split(".")[0] == "envlock"]
