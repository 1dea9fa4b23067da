"""One result value per command (PDM's shape): options → a function returning a typed
result → a renderer for text and one for JSON, and a fleet member's row from the same value.

For each converted command, read from its source: `command` calls the one producer once,
and the only things it hands to the renderers are that value (`render_text(result)`,
`ui.emit_json(KIND, result.to_json())`, or `result.kind` where a command prints several kinds
of document) and its exit status (`sys.exit(result.code)`);
the fleet member's work calls the same producer and returns `result.member()`. So the text,
the document and the fleet's row cannot be built from different data."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect

import pytest

# command → (its producer, its fleet member's work or None)
CONVERTED = {
    "check": ("check_of", "check_member"),
    "plan": ("plan_of", "plan_member"),
    "generations": ("generations_of", "generations_member"),
    "rollback": ("rollback_of", "rollback_member"),
    "gc": ("gc_of", None),
    "apply": ("apply_of", "apply_member"),
    "lock": ("lock_of", None),
    "add": ("change_of", None),
    "remove": ("change_of", None),
    "diff": ("diff_of", None),
    "inspect": ("inspect_of", None),
    "snapshot": ("snapshot_of", "snapshot_member"),
    "cache": ("cache_of", "cache_member"),
    "init": ("init_of", None),
    "data": ("data_of", None),
    "bisect": ("bisect_of", None),
}


def test_every_command_returns_one_result() -> None:
    """Every command but `run` (whose output is its command's own) is in the table above."""
    from envlock.cli import COMMANDS

    assert set(CONVERTED) == set(COMMANDS) - {"run"}


def function(module: object, name: str) -> ast.FunctionDef:
    tree = ast.parse(inspect.getsource(module))  # type: ignore[arg-type]
    found = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
    assert found, f"{name} not found"
    return found[0]


def calls(node: ast.AST) -> list[ast.Call]:
    return [n for n in ast.walk(node) if isinstance(n, ast.Call)]


def called_name(call: ast.Call) -> str:
    func = call.func
    if isinstance(func, ast.Attribute):
        base = func.value.id if isinstance(func.value, ast.Name) else "?"
        return f"{base}.{func.attr}"
    return func.id if isinstance(func, ast.Name) else "?"


def the_value(func: ast.FunctionDef, producer: str) -> str:
    """The one name the producer's value is bound to in `func`."""
    bound = [
        target.id
        for node in ast.walk(func)
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Call)
        and called_name(node.value) == producer
        for target in node.targets
        if isinstance(target, ast.Name)
    ]
    produced = [c for c in calls(func) if called_name(c) == producer]
    assert len(produced) == 1 and len(bound) == 1, f"{func.name}: calls {producer} once"
    return bound[0]


@pytest.mark.parametrize("name", sorted(CONVERTED))
def test_text_and_json_are_rendered_from_the_one_value(name: str) -> None:
    module = importlib.import_module(f"envlock.commands.{name}")
    producer, member = CONVERTED[name]
    command = function(module, "command")
    value = the_value(command, producer)
    renders = {called_name(c): c for c in calls(command)}
    assert "render_text" in renders and "ui.emit_json" in renders, sorted(renders)
    for call in calls(command):
        called = called_name(call)
        if called == "render_text":
            assert [ast.unparse(a) for a in call.args] == [value]
        elif called == "ui.emit_json":
            # (a command with two documents, such as `lock --check`, names it by the value)
            kind, *rest = [ast.unparse(a) for a in call.args]
            assert kind in ("KIND", f"{value}.kind") and rest == [f"{value}.to_json()"]
        elif called == "sys.exit":
            assert [ast.unparse(a) for a in call.args] == [f"{value}.code"]
        else:  # nothing else may print or build output beside the value
            assert not called.startswith(("ui.out", "ui.info", "ui.warn", "print")), called
    # The document's kind is a row of the central schema table (each of them, for a
    # command whose subcommands or modes print different documents).
    from envlock.schema import DOCUMENTS

    kinds = getattr(module, "KINDS", None) or (module.KIND,)
    assert set(kinds) <= set(DOCUMENTS), kinds

    result_type = inspect.signature(getattr(module, producer)).return_annotation
    result_class = getattr(module, str(result_type))
    assert dataclasses.is_dataclass(result_class)
    assert result_class.__dataclass_params__.frozen  # type: ignore[attr-defined]
    if member:
        work = function(module, member)
        value = the_value(work, producer)
        returned = [n.value for n in ast.walk(work) if isinstance(n, ast.Return)]
        # (generations --container lists the container's snapshots: another document)
        assert f"{value}.member()" in [ast.unparse(r) for r in returned if r is not None]


def test_a_plan_member_row_carries_the_single_targets_document(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A stopped container's plan, built by hand: the row, the document and the text all
    come from it (the container's change is in each)."""
    from envlock.base.drift_kinds import Drift
    from envlock.commands.plan import PlanResult, render_text

    step = Drift("container-config", "cores", "2", "8")
    result = PlanResult((step,))
    document = result.to_json()
    assert document["reason"] == "container not running" and document["actions"] == []
    assert [d["subject"] for d in document["container"]] == ["cores"]
    row = result.member()
    assert (row.code, row.result, row.drift, row.data) == (1, "container not running", 1, document)
    render_text(result)
    text = capsys.readouterr().out
    assert "container: 1 change(s)" in text and "cores: 2 → 8" in text
    assert "once the container runs" in text


def test_generations_rows_are_typed_and_both_renderers_read_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A generations result built by hand from typed rows: the document keeps its fields
    (one name per concept), and the table's notes come from the same rows."""
    from envlock.commands.generations import GenerationRow, GenerationsResult, render_text
    from envlock.reconcile.state import Hold, Switch

    old = GenerationRow(
        1,
        "1-aaaaaaaaaaaa",
        "aaaaaaaaaaaa",
        True,
        False,
        "2026-01-01",
        10,
        2048,
        1024,
        False,
        True,
        None,
    )
    new = GenerationRow(
        2,
        "2-bbbbbbbbbbbb",
        "bbbbbbbbbbbb",
        True,
        True,
        "2026-01-02",
        12,
        4096,
        None,
        True,
        False,
        None,
    )
    hold = Hold("1-aaaaaaaaaaaa", "2-bbbbbbbbbbbb", "2026-01-03T00:00:00Z")
    switch = Switch("2-bbbbbbbbbbbb", "1-aaaaaaaaaaaa", "apply", "2026-01-02T00:00:00Z")
    result = GenerationsResult("2-bbbbbbbbbbbb", 2, "bbbbbbbbbbbb", hold, (old, new), (switch,))
    document = result.to_json()
    assert document["generation"] == "2-bbbbbbbbbbbb"
    assert [g["number"] for g in document["generations"]] == [1, 2]
    assert set(document["generations"][0]) == {
        "number",
        "name",
        "lock_id",
        "complete",
        "active",
        "built",
        "files",
        "bytes",
        "adds_bytes",
        "matches_lock",
        "held",
        "adopted_from",
        "irreplaceable",
    }
    assert document["history"] == [switch.to_json()]
    assert result.member().generation == 2
    render_text(result)
    text = capsys.readouterr().out
    assert "held (rolled back from 2-bbbbbbbbbbbb" in text
    assert "the profile's lock" in text


def test_add_says_what_it_changes_in_the_profile(capsys: pytest.CaptureFixture[str]) -> None:
    """add's result when the profile already says it: the entry as listed, exit 0, and the
    document says nothing changed; an edit's lines say added, replaced or kept."""
    from pathlib import Path

    from envlock.commands.guarded import ChangeResult, profile_lines, render_text
    from envlock.profile.edit import Edit

    kept = Edit("same", kept=("tqdm: already listed as tqdm>=4.66",))
    result = ChangeResult(Path("/p/train.toml"), kept, "0123456789ab")
    assert result.code == 0
    assert result.to_json() == {
        "profile": "/p/train.toml",
        "changed": False,
        "lock_id": "0123456789ab",
    }
    render_text(result)
    assert capsys.readouterr().out == (
        "✓ nothing to change in train.toml: tqdm: already listed as tqdm>=4.66\n"
    )
    replaced = Edit("new", dependencies=("tqdm>=4.66 → tqdm", "rich"))
    assert profile_lines(replaced) == [
        "~ [dependencies] packages: tqdm>=4.66 → tqdm",
        "+ [dependencies] packages: rich",
    ]
