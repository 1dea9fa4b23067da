"""The --json contract, over EVERY command in cli.COMMANDS: its success document and an error
parse as one JSON object with "schema" (the number envlock.schema.DOCUMENTS declares for the
kind), with the documented exit code; an error is {"schema", "error", "hint", "exit"} with the
same status as the text path. A new command without a row here fails the first test.

One applied local root (the test wheelhouse, offline) serves every success case; the error
cases fail before anything is built."""

from __future__ import annotations

import ast
import json
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest

from envlock import cli, schema
from envlock.runs import snapshot_doc
from tests.conftest import Envlock, run_envlock
from tests.json_shapes import SHAPES, conforms
from tests.projects import write_seed_project

# command -> (the success case's arguments, its document's kind, its exit code); "{P}" is
# the applied profile, "{T}" a fresh directory, "{S}" a small safetensors checkpoint, "{D}"
# a profile naming a dataset. `run`'s stdout is its command's own once that starts: the
# success case checks that envlock adds nothing to it.
SUCCESS: dict[str, tuple[tuple[str, ...], str | None, int]] = {
    "init": (("init", "--json", "{T}/new.toml"), "init", 0),
    "lock": (("lock", "--json", "{P}"), "lock", 0),
    "plan": (("plan", "--json", "{P}"), "plan", 0),
    "apply": (("apply", "--json", "-y", "{P}"), "apply", 0),
    "check": (("check", "--json", "{P}"), "check", 0),
    "run": (("run", "--json", "{P}", "--", "python", "-c", "print('ran')"), None, 0),
    "rollback": (("rollback", "--json", "--resync", "{P}"), "rollback", 0),
    "generations": (("generations", "--json", "{P}"), "generations", 0),
    "gc": (("gc", "--json", "{P}"), "gc", 0),
    "snapshot": (("snapshot", "--json", "{P}", "{T}/ckpt"), "snapshot", 0),
    "diff": (("diff", "--json", "{L}", "{L}"), "diff", 0),
    "inspect": (("inspect", "--json", "{S}"), "inspect", 0),
    "data": (("data", "--json", "{D}"), "data", 0),
    "cache": (("cache", "--json", "{P}", "status"), "cache-status", 0),
    "add": (("add", "--json", "--dry-run", "{P}", "tinydep==1.0"), "add", 0),
    "remove": (("remove", "--json", "--dry-run", "{P}", "trainutil"), "remove", 1),
    # GOOD and BAD the same lock: nothing to bisect, no answer (1)
    "bisect": (("bisect", "--json", "{P}", "{L}", "{L}", "--", "true"), "bisect", 1),
}

# command -> (arguments that fail, the status the text path gives). Profiles that do not
# exist, a missing argument, a bad option value: refused before any work.
ERRORS: dict[str, tuple[tuple[str, ...], int]] = {
    "init": (("init", "--json", "--backend", "cu128", "{T}/x.toml"), 2),
    "lock": (("lock", "--json", "{T}/missing.toml"), 2),
    "plan": (("plan", "--json", "{T}/missing.toml"), 2),
    "apply": (("apply", "--json", "-y", "--force", "{P}"), 2),
    "check": (("check", "--json", "{N}"), 2),  # no lock yet (the issue's own example)
    "run": (("run", "--json", "{P}"), 2),  # no command
    "rollback": (("rollback", "--json", "{N}"), 2),  # nothing applied to roll back to
    "generations": (("generations", "--json", "--container", "{P}"), 2),
    "gc": (("gc", "--json", "--keep", "-1", "{P}"), 2),
    "snapshot": (("snapshot", "--json", "{P}"), 2),  # no DIR
    "diff": (("diff", "--json", "{T}/a.json", "{T}/b.json"), 2),
    "inspect": (("inspect", "--json", "{T}/none.pt"), 2),
    "data": (("data", "--json", "{P}"), 2),  # names no datasets
    "cache": (("cache", "--json", "{P}", "sweep"), 2),
    "add": (("add", "--json", "{P}"), 2),  # nothing to add
    "remove": (("remove", "--json", "{N}", "trainutil"), 2),  # no lock
    "bisect": (("bisect", "--json", "{P}", "{L}", "{L}"), 2),  # no command
}


def test_every_command_has_a_success_and_an_error_case() -> None:
    assert set(SUCCESS) == set(cli.COMMANDS) == set(ERRORS)


def test_every_document_kind_has_one_number() -> None:
    """The table is the one place: the snapshot file (written by a module shipped alone,
    which cannot import the table) agrees with it."""
    assert all(isinstance(n, int) and n >= 1 for n in schema.DOCUMENTS.values())
    assert schema.DOCUMENTS["snapshot-file"] == snapshot_doc.SCHEMA


@pytest.fixture(scope="module")
def places(tmp_path_factory: pytest.TempPathFactory, wheelhouse: Path) -> dict[str, str]:
    """An applied local project, a project never locked, a checkpoint, a dataset."""
    base = tmp_path_factory.mktemp("contract")
    profile = write_seed_project(base / "proj", wheelhouse)
    for step in (("lock", profile), ("apply", "-y", profile)):
        done = run_envlock(*step)
        assert done.returncode == 0, done.stderr
    never = write_seed_project(base / "never", wheelhouse, name="never")
    (base / "data" / "train").mkdir(parents=True)
    (base / "data" / "train" / "part-0").write_bytes(b"tokens")
    data = base / "data" / "data.toml"
    data.write_text(
        '[profile]\nname = "data"\n[target]\ntype = "local"\nroot = "root"\n'
        f'venv = "venv"\n[python]\nversion = "3.11"\n[data]\ntrain = "{base}/data/train"\n'
    )
    return {
        "P": str(profile),
        "N": str(never),
        "L": str(profile.parent / "pylock.seed.toml"),
        "S": str(safetensors(base / "model.safetensors")),
        "D": str(data),
    }


def safetensors(path: Path) -> Path:
    """A one-tensor safetensors file, written by hand: 8-byte length, JSON header, bytes."""
    header = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 8)
    return path


def filled(args: tuple[str, ...], places: dict[str, str], tmp: Path) -> list[str]:
    values = {**places, "T": str(tmp)}
    return [arg.format(**values) if "{" in arg else arg for arg in args]


def document(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """stdout is exactly one JSON object (json.loads refuses a second one after it)."""
    data = json.loads(done.stdout)
    assert isinstance(data, dict), done.stdout
    return data


@pytest.mark.parametrize("name", list(SUCCESS))
def test_success_is_one_document_with_its_schema(
    name: str, places: dict[str, str], tmp_path: Path, envlock: Envlock
) -> None:
    args, kind, code = SUCCESS[name]
    done = envlock(*filled(args, places, tmp_path))
    assert done.returncode == code, done.stderr
    if kind is None:  # run: the command's own output, nothing of envlock's mixed in
        assert done.stdout == "ran\n"
        return
    data = document(done)
    assert data["schema"] == schema.DOCUMENTS[kind]
    assert "error" not in data


@pytest.mark.parametrize("name", list(ERRORS))
def test_an_error_is_one_document_with_the_text_paths_status(
    name: str, places: dict[str, str], tmp_path: Path, envlock: Envlock
) -> None:
    args, code = ERRORS[name]
    argv = filled(args, places, tmp_path)
    text = envlock(*[a for a in argv if a != "--json"])
    done = envlock(*argv)
    assert text.returncode == done.returncode == code, (text.stderr, done.stderr)
    data = document(done)
    assert set(data) >= {"schema", "error", "hint", "exit"}
    assert (data["schema"], data["exit"]) == (schema.DOCUMENTS["error"], code)
    assert data["error"] and data["error"].splitlines()[0] in done.stderr  # said to people too


def test_names_agree_across_commands(places: dict[str, str], envlock: Envlock) -> None:
    """One name per concept: `generation` is the active generation's name wherever it is
    reported, and `lock_id` the 12 hex digits the messages name."""
    profile = places["P"]
    locked = document(envlock("lock", "--json", profile))
    lock_id = locked["lock_id"]
    assert len(lock_id) == 12 and lock_id in envlock("lock", profile).stdout
    assert document(envlock("lock", "--check", "--json", profile))["lock_id"] == lock_id
    names = {
        name: document(envlock(name, "--json", profile))["generation"]
        for name in ("check", "generations", "apply")
    }
    assert set(names.values()) == {f"1-{lock_id}"}, names
    resynced = document(envlock("rollback", "--resync", "--json", profile))
    assert resynced["generation"] == f"1-{lock_id}"


def test_a_run_refused_under_json_lists_the_drift(
    places: dict[str, str], tmp_path: Path, envlock: Envlock
) -> None:
    """`run --json` refused on drift: the error document carries the drift items, and the
    status is the refusal's (ENVLOCK_RUN_REFUSED_EXIT)."""
    script = Path(places["P"]).parent / "deployed" / "train.py"
    original = script.read_text()
    script.write_text(original + "# edited\n")
    try:
        done = envlock("run", "--json", places["P"], "--", "true")
    finally:
        script.write_text(original)
    assert done.returncode == 1, done.stderr
    data = document(done)
    assert data["exit"] == 1 and data["error"].startswith("refusing to run")
    assert [d["kind"] for d in data["drift"]] == ["script-modified"]


def test_a_fleet_member_says_what_the_single_target_document_says(
    places: dict[str, str], envlock: Envlock
) -> None:
    """The fleet's per-member result and the single-target document: every key they share
    has the same value (same name, same meaning), for each command run across members."""
    from envlock.commands.check import check_member
    from envlock.commands.generations import generations_member
    from envlock.commands.plan import plan_member
    from envlock.converge.fleet import member_json
    from envlock.proxmox.members import Member
    from envlock.reconcile.context import open_context

    ctx = open_context(places["P"], allow_stale=True)
    member = Member(201, "pve1", "ct201", "running")
    quiet = {"as_json": True}
    works = {
        "check": lambda: check_member(ctx, print, deep=False, strict=False, **quiet),
        "plan": lambda: plan_member(ctx, print, **quiet),
        "generations": lambda: generations_member(ctx, print, container=False, **quiet),
    }
    for name, work in works.items():
        single = document(envlock(name, "--json", places["P"]))
        fleet = member_json(member, work())
        shared = (set(single) & set(fleet)) - {"schema"}
        assert {"generation"} <= shared or name == "plan", (name, sorted(shared))
        assert {k: fleet[k] for k in shared} == {k: single[k] for k in shared}, name


# Documents of a command's other modes: (arguments, kind, exit code).
MODES = {
    "lock --check": (("lock", "--check", "--json", "{P}"), "lock-check", 0),
    "lock --check, no lock": (("lock", "--check", "--json", "{N}"), "lock-check", 1),
}


def tabled_kinds() -> set[str]:
    """The kinds the parametrized tests below check, through the tables above."""
    return {kind for _args, kind, _code in (*SUCCESS.values(), *MODES.values()) if kind}


def test_every_command_s_documents_are_declared() -> None:
    """Every kind of document envlock prints has a declared shape, and nothing else does."""
    assert tabled_kinds() | {"error"} <= set(SHAPES)
    assert set(SHAPES) == set(schema.DOCUMENTS)


def asserted_kinds(tests: Path) -> set[str]:
    """The kinds named as the first argument of a `conforms("kind", ...)` call in tests/."""
    kinds = set()
    for file in tests.rglob("*.py"):
        for node in ast.walk(ast.parse(file.read_text(), str(file))):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            first = node.args[0]
            if name == "conforms" and isinstance(first, ast.Constant):
                kinds.add(first.value)
    return kinds


def test_every_declared_kind_is_checked_against_a_real_document() -> None:
    """A shape nothing checks is a guess: each kind is asserted on a document some test
    makes envlock print (here through the tables, elsewhere by name: the fleet, container,
    compile-cache and init --from tests)."""
    checked = tabled_kinds() | asserted_kinds(Path(__file__).parents[1])
    assert set(schema.DOCUMENTS) - checked == set()
    assert checked <= set(schema.DOCUMENTS), "a kind that envlock.schema does not declare"


@pytest.mark.parametrize("name", [n for n, (_a, kind, _c) in SUCCESS.items() if kind])
def test_every_document_has_its_declared_shape(
    name: str, places: dict[str, str], tmp_path: Path, envlock: Envlock
) -> None:
    """The success document and the error document of every command, field by field."""
    args, kind, code = SUCCESS[name]
    done = envlock(*filled(args, places, tmp_path))
    assert done.returncode == code, done.stderr
    assert kind is not None
    data = document(done)
    conforms(kind, data)
    if kind == "snapshot":  # and the file it wrote into the checkpoint directory
        conforms("snapshot-file", json.loads(Path(data["snapshot"]).read_text()))
    error_args, error_code = ERRORS[name]
    failed = envlock(*filled(error_args, places, tmp_path))
    assert failed.returncode == error_code
    conforms("error", document(failed))


@pytest.mark.parametrize("mode", list(MODES))
def test_other_modes_documents_have_their_declared_shape(
    mode: str, places: dict[str, str], tmp_path: Path, envlock: Envlock
) -> None:
    args, kind, code = MODES[mode]
    done = envlock(*filled(args, places, tmp_path))
    assert done.returncode == code, done.stderr
    conforms(kind, document(done))


def field_checks(check: schema.Check) -> list[tuple[str, schema.Check]]:
    """Every named field declared inside `check`, at any depth: the shapes are closures
    (obj over its fields, nullable and items over their inner check), walked through."""
    found: list[tuple[str, schema.Check]] = []
    for cell in check.__closure__ or ():
        value = cell.cell_contents
        if isinstance(value, dict) and all(callable(v) for v in value.values()):
            for name, inner in value.items():
                found += [(name, inner), *field_checks(inner)]
        elif callable(value) and value is not check:
            found += field_checks(value)
    return found


def declared_fields(kind: str) -> list[tuple[str, schema.Check]]:
    required, optional = SHAPES[kind]
    fields = {**required, **optional}
    return [
        pair for name, inner in fields.items() for pair in [(name, inner), *field_checks(inner)]
    ]


def checks_lock_id(check: schema.Check) -> bool:
    """`check` is LOCK_ID, or LOCK_ID made nullable."""
    from tests.json_shapes import LOCK_ID

    return check is LOCK_ID or any(c.cell_contents is LOCK_ID for c in check.__closure__ or ())


# The snapshot file's "lock" is the lock itself (its text and sha256), neither its id nor
# its path: a file format of its own, read by older envlocks.
LOCK_ITSELF = {("snapshot-file", "lock")}


def test_one_name_per_concept_in_every_declared_document() -> None:
    """The 12-hex lock id is `lock_id` (`lock_id_before`, `generation_lock_id`: a lock id
    qualified), the lock file's path `lock_file`; a bare `lock` names neither."""
    for kind in SHAPES:
        for name, check in declared_fields(kind):
            assert name != "lock" or (kind, name) in LOCK_ITSELF, f"{kind}: a field `lock`"
            if checks_lock_id(check):
                assert (
                    name == "lock_id" or name.startswith("lock_id_") or name.endswith("_lock_id")
                ), f"{kind}: lock id field `{name}`"
            if name.endswith("lock_id"):
                assert checks_lock_id(check), f"{kind}: `{name}` is not checked as a lock id"


def test_a_container_snapshot_s_unknowns_are_null() -> None:
    """What a snapshot's description leaves unknown (no generation yet, the container was
    stopped, a snapshot taken by hand) is null in `generations --container --json`, as in
    every other document, never "none", "unknown …" or ""."""
    from envlock.commands.generations import container_document
    from envlock.proxmox.provision import listed, snapshot_description
    from envlock.proxmox.snapshots import SnapshotInfo

    lock_id = "0123456789ab"
    described = {
        "envlock-1-20261102123005": (f"1-{lock_id}", lock_id, 1793622605),
        "envlock-none-20261102123006": ("none", "", 1793622606),
        "envlock-unknown-20261102123007": (None, "", None),
    }
    infos = [
        SnapshotInfo(name, snapshot_description(gen, lock, "fedcba987654"), time, None)
        for name, (gen, lock, time) in described.items()
    ]
    infos.append(SnapshotInfo("by-hand", "taken by hand", None, None))
    document = {"schema": schema.DOCUMENTS["generations-container"]}
    document |= container_document("pve1/905", [listed(info) for info in infos])
    conforms("generations-container", document)
    rows = [(r["generation"], r["lock_id"], r["taken"] is None) for r in document["snapshots"]]
    assert rows == [
        (f"1-{lock_id}", lock_id, False),
        (None, None, False),
        (None, None, True),
        (None, None, True),
    ]
