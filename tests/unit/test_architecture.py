"""ARCHITECTURE.md's layers are the real imports: a module imports only its own layer or a
lower one (function-level imports included, typing-only ones aside); the agent and the
start-up modules, shipped alone to targets, import nothing of envlock's but their own."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "envlock"

# From the top down, as ARCHITECTURE.md draws them: a folder is a layer. A module's layer is
# its folder's (or, at the top of the package, its own name's); every module must be named.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("integrations", ("envlock.integrations",)),
    ("cli", ("envlock.cli", "envlock.cli_group", "envlock.__main__")),
    ("commands", ("envlock.commands",)),
    ("converge", ("envlock.converge",)),
    ("runs and edits", ("envlock.runs", "envlock.edits", "envlock.starters")),
    ("reconcile", ("envlock.reconcile",)),
    (
        "core",
        (
            "envlock.lock",
            "envlock.profile",
            "envlock.targets",
            "envlock.proxmox",
            "envlock.docker",
            "envlock.checkpoint",
        ),
    ),
    (
        "leaves",
        (
            "envlock",
            "envlock.errors",
            "envlock.ui",
            "envlock.schema",
            "envlock.base",
            "envlock.agent",
            "envlock.startup",
        ),
    ),
]
# The one import that goes up, on purpose: the package re-exports `envlock.snapshot()` (the
# Python API) lazily, on first use.
ALLOWED_UP = {("envlock", "envlock.runs.snapshot")}

# At most this many modules at the top of the package (the CLI entry, errors, ui, schema,
# the package face); everything else lives in the folder of its layer.
TOP_LEVEL_LIMIT = 12


def unit_of(module: str) -> str:
    """The name a layer lists for a module: its folder (envlock.lock.read → envlock.lock),
    or the module itself at the top of the package."""
    parts = module.split(".")
    in_a_folder = len(parts) >= 3 or (len(parts) == 2 and (PACKAGE / parts[1]).is_dir())
    return ".".join(parts[:2]) if in_a_folder else module


def layer_of(module: str) -> int:
    unit = unit_of(module)
    for index, (_, units) in enumerate(LAYERS):
        if unit in units:
            return index
    raise AssertionError(f"{module} is in no layer: add {unit} to LAYERS and ARCHITECTURE.md")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def envlock_imports(source: str) -> list[tuple[int, str]]:
    """(line, module) of every envlock import, typing-only ones aside; `from envlock import
    ui` imports envlock.ui."""
    tree = ast.parse(source)
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for inner in ast.walk(node)
    }
    found = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "envlock":
                found += [(node.lineno, f"envlock.{a.name}") for a in node.names]
            elif node.module.startswith("envlock."):
                found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found += [
                (node.lineno, a.name)
                for a in node.names
                if a.name == "envlock" or a.name.startswith("envlock.")
            ]
    return found


def as_module(target: str) -> str:
    """`from envlock.x import name` names module envlock.x unless envlock.x.name is one."""
    path = PACKAGE.parent / Path(*target.split("."))
    return target if path.with_suffix(".py").exists() or path.is_dir() else target.rsplit(".", 1)[0]


def upward(here: str, source: str) -> list[str]:
    """The imports of module `here` (its source) that go to a higher layer."""
    wrong = []
    for line, imported in envlock_imports(source):
        target = as_module(imported)
        if layer_of(target) < layer_of(here) and (here, target) not in ALLOWED_UP:
            wrong.append(
                f"{here}:{line} ({LAYERS[layer_of(here)][0]}) imports {target} "
                f"({LAYERS[layer_of(target)][0]}), a higher layer"
            )
    return wrong


def test_no_module_imports_a_higher_layer() -> None:
    files = sorted(PACKAGE.rglob("*.py"))
    assert [w for path in files for w in upward(module_name(path), path.read_text())] == []


def test_the_check_catches_an_upward_import() -> None:
    """The test above can fail: a reconcile module that imports a command is caught, and so
    is a leaf that imports the reconciler inside a function."""
    plan = (PACKAGE / "reconcile" / "plan.py").read_text()
    assert upward("envlock.reconcile.plan", plan + "\nfrom envlock.commands import apply\n")
    ui = (PACKAGE / "ui.py").read_text()
    planted = ui + "\ndef f():\n    from envlock.reconcile.context import check\n"
    assert upward("envlock.ui", planted)
    assert upward("envlock.ui", ui) == []


def import_graph(sources: dict[str, str]) -> dict[str, set[str]]:
    """Module → the envlock modules it imports (function-level ones too; the package's lazy
    re-export aside: ALLOWED_UP runs on first use, after everything below has loaded)."""
    return {
        here: {as_module(t) for _, t in envlock_imports(source)}
        - {here}
        - {t for h, t in ALLOWED_UP if h == here}
        for here, source in sources.items()
    }


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = list(graph.get(start, ()))
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo += graph.get(module, ())
    return seen


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each set of modules that import one another, directly or around a circle."""
    reach = {module: reachable(graph, module) for module in graph}
    circles = {
        tuple(sorted(m for m in reach[module] if module in reach[m]))
        for module in graph
        if module in reach[module]
    }
    return sorted(list(c) for c in circles)


def package_sources() -> dict[str, str]:
    return {module_name(p): p.read_text() for p in sorted(PACKAGE.rglob("*.py"))}


def test_no_import_cycle() -> None:
    """A module that needs another which needs it back is one idea in two files, or a
    shared part that wants its own module (as diff_types.py is for diff and diff_data)."""
    assert import_cycles(import_graph(package_sources())) == []


def test_the_check_catches_an_import_cycle() -> None:
    """Including one closed by an import inside a function, three modules around."""
    sources = package_sources()
    sources["envlock.ui"] += "\ndef f():\n    from envlock.runs.diff import compare\n"
    cycles = import_cycles(import_graph(sources))
    assert any({"envlock.ui", "envlock.runs.diff"} <= set(c) for c in cycles)


@pytest.mark.parametrize("package", ["agent", "startup"])
def test_shipped_modules_import_only_their_own(package: str) -> None:
    """The agent and the start-up modules run on targets without envlock: they import
    nothing of envlock's but their own package (in the repository; shipped, one namespace)."""
    wrong = [
        f"{path.name}:{line}: {target}"
        for path in sorted((PACKAGE / package).rglob("*.py"))
        for line, target in envlock_imports(path.read_text())
        if not target.startswith(f"envlock.{package}")
    ]
    assert wrong == []


def test_the_top_of_the_package_is_small_and_every_folder_is_a_layer() -> None:
    """`ls envlock` shows the layers: a handful of modules at the top, every other module in
    a folder that LAYERS names as a whole (no module of a folder sits in another layer)."""
    top = sorted(p.stem for p in PACKAGE.glob("*.py"))
    assert len(top) <= TOP_LEVEL_LIMIT, top
    folders = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists())
    listed = {unit for _, units in LAYERS for unit in units}
    assert [f for f in folders if f"envlock.{f}" not in listed] == []
    assert [m for m in top if m != "__init__" and f"envlock.{m}" not in listed] == []


ARCHITECTURE = PACKAGE.parent / "ARCHITECTURE.md"
LISTED = re.compile(r"^- `([\w/]+\.py)` — ", re.MULTILINE)
TABLE = re.compile(r"`([\w/]+\.py)` `([A-Z][A-Z_]+)`")


def section(text: str, title: str) -> str:
    start = text.index(f"## {title}")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def modules_to_name() -> set[str]:
    """Every module of the package by its path under envlock/, but a folder's __init__.py
    that holds nothing except its docstring."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        body = ast.parse(path.read_text()).body
        only_a_docstring = all(
            isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) for node in body
        )
        if path.name == "__init__.py" and only_a_docstring and path.parent != PACKAGE:
            continue
        found.add(path.relative_to(PACKAGE).as_posix())
    return found


def test_architecture_md_names_every_module_in_a_line() -> None:
    listed = LISTED.findall(section(ARCHITECTURE.read_text(), "The modules"))
    assert sorted(m for m in listed if listed.count(m) > 1) == []
    assert sorted(modules_to_name() - set(listed)) == []  # modules the page does not name
    assert sorted(set(listed) - modules_to_name()) == []  # names of modules that are gone


def test_every_table_architecture_md_names_is_in_its_module() -> None:
    tables = TABLE.findall(section(ARCHITECTURE.read_text(), "The tables"))
    assert len(tables) >= 7
    for module, name in tables:
        tree = ast.parse((PACKAGE / module).read_text())
        assigned = {
            target.id
            for node in tree.body
            if isinstance(node, (ast.Assign, ast.AnnAssign))
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
            if isinstance(target, ast.Name)
        }
        assert name in assigned, f"ARCHITECTURE.md names {module} {name}, which it lacks"


def test_the_page_check_catches_a_module_it_does_not_name() -> None:
    text = section(ARCHITECTURE.read_text(), "The modules")
    planted = text.replace("- `base/uvbin.py` — ", "- uvbin — ")
    assert "base/uvbin.py" in modules_to_name() - set(LISTED.findall(planted))
