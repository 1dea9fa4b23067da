"""Every --json document's declared shape, per kind of envlock.schema.DOCUMENTS, and
`conforms(kind, data)`: the contract test (tests/cli/test_json_contract.py) and the tests that
produce a kind only they can (fleets, containers, compile caches, init --from) check their
documents against the one table here."""

from __future__ import annotations

import re
from typing import Any

from envlock import schema

# kind -> (its fields that are always there, those some outcomes add), each with its shape.
# A document holds "schema" and these fields, nothing else: a field renamed, dropped or added
# by one command's result fails here until the table (and, when a field changes meaning, the
# kind's number in envlock.schema.DOCUMENTS) says so.
LOCK_ID = schema.matching(re.compile(r"[0-9a-f]{12}"), "a lock id (12 hex digits)")
GENERATION = schema.matching(re.compile(r"\d+-[0-9a-f]{12}"), "a generation (N-<lock id>)")
STRS = schema.items(schema.STR)
OBJ = schema.kind(dict, "an object")
OBJS = schema.items(OBJ)
ACTION = schema.obj({"kind": schema.STR, "description": schema.STR}, ("kind", "description"))
PLAN = {"actions": schema.items(ACTION), "reason": schema.nullable(schema.STR)}
PROPOSAL = {
    "profile": schema.STR,
    "changed": schema.BOOL,
    "lock_id": LOCK_ID,
}
PROPOSED = {
    "profile_changes": STRS,
    "lock_id_before": LOCK_ID,
    "packages": OBJS,
    "torch_moves": STRS,
    "notes": STRS,
    "dry_run": schema.BOOL,
    "generation": schema.nullable(GENERATION),
}
VERSIONS = schema.mapping(schema.PACKAGE_NAME, schema.STR)
# A fleet member's row: the fields every command's member has (envlock.converge.fleet.member_json).
MEMBER = {
    "member": schema.STR,
    "vmid": schema.nullable(schema.INT),  # a Docker fleet's members have none
    "node": schema.STR,
    "name": schema.STR,
    "status": schema.STR,
    "exit": schema.INT,
    "result": schema.STR,
    "generation": schema.nullable(GENERATION),
    "generation_number": schema.nullable(schema.INT),
    "generation_lock_id": schema.nullable(LOCK_ID),
    "held": schema.BOOL,
    "drift_count": schema.nullable(schema.INT),
    "note": schema.nullable(schema.STR),
    "cause": schema.nullable(schema.STR),
    "seconds": schema.NUMBER,
}
FLEET = {
    "profile": schema.STR,
    "lock_id": LOCK_ID,
    "members": schema.INT,
    "summary": schema.STR,
    "exit": schema.INT,
    "interrupted": schema.BOOL,
}
# envlock-snapshot.json as envlock writes it (envlock/runs/snapshot_doc.document); its
# reader's own, looser check is envlock/runs/snapshot_schema.SNAPSHOT.
OPT_STR = schema.nullable(schema.STR)
SNAPSHOT_FILE = {
    "created": schema.STR,
    "envlock": schema.STR,
    "profile": schema.obj(
        {"name": schema.STR, "path": schema.STR, "sha256": schema.SHA256},
        ("name", "path", "sha256"),
    ),
    "lock": schema.obj({"sha256": schema.SHA256, "text": schema.STR}, ("sha256", "text")),
    "generation": schema.nullable(GENERATION),
    "python": OPT_STR,
    "platform": schema.obj({"machine": OPT_STR, "libc": OPT_STR}, ("machine", "libc")),
    "packages": VERSIONS,
    "torch": schema.nullable(schema.obj({"version": schema.STR}, ("version", "cudnn"))),
    "hardware": OBJ,
    "scripts": schema.obj(
        {
            "dest": OPT_STR,
            "sha256": schema.mapping(schema.relative_path, schema.nullable(schema.SHA256)),
        },
        ("dest", "sha256"),
    ),
    "cache": schema.nullable(OBJ),
    "host": schema.obj(
        {"hostname": OPT_STR, "container": OPT_STR, "target": schema.STR},
        ("hostname", "container", "target"),
    ),
    "env": schema.mapping(schema.STR, schema.STR),
    "command": STRS,
    "git": schema.nullable(
        schema.obj({"commit": schema.STR, "dirty": schema.BOOL}, ("commit", "dirty"))
    ),
    "config": schema.json_data(64),
    "datasets": schema.mapping(schema.STR, OBJ),
    "metrics": schema.mapping(schema.STR, schema.NUMBER),
}
PROCESS = schema.obj(
    {
        "argv": STRS,
        "rank": schema.INT,
        "local_rank": schema.nullable(schema.INT),
        "world_size": schema.INT,
        "from": schema.STR,
    },
    ("argv", "rank", "local_rank", "world_size", "from"),
)
# A rollback's hold (reconcile/state.Hold); `check` adds the held generation's lock id.
HOLD_FIELDS: dict[str, schema.Check] = {
    "generation": GENERATION,
    "from": schema.nullable(GENERATION),
    "time": schema.STR,
}
HOLD = schema.obj(HOLD_FIELDS, tuple(HOLD_FIELDS))
CHECK_HOLD = schema.obj(
    {**HOLD_FIELDS, "lock_id": schema.nullable(LOCK_ID)}, (*HOLD_FIELDS, "lock_id")
)
SHAPES: dict[str, tuple[dict[str, schema.Check], dict[str, schema.Check]]] = {
    "error": (
        {"error": schema.STR, "hint": schema.nullable(schema.STR), "exit": schema.INT},
        {},
    ),
    "init": ({"profile": schema.STR, "name": schema.STR, "target": schema.STR, "next": STRS}, {}),
    "lock": (
        {
            "lock_file": schema.STR,
            "changed": schema.BOOL,
            "lock_id": LOCK_ID,
            "sha256": schema.SHA256,
            "packages": schema.mapping(schema.PACKAGE_NAME, schema.STR),
            "torch": schema.nullable(schema.STR),
            "machine_paths": STRS,
            "target_paths": STRS,
        },
        {},
    ),
    "plan": ({"container": OBJS, **PLAN}, {"drift": OBJS}),
    "apply": (
        {**PLAN, "applied": schema.BOOL, "generation": GENERATION, "container": STRS},
        {"current": GENERATION},
    ),
    "check": (
        {
            "profile": schema.STR,
            "lock_id": LOCK_ID,
            "judged_lock_id": schema.nullable(LOCK_ID),
            "hold": schema.nullable(CHECK_HOLD),
            "generation": schema.nullable(GENERATION),
            "deep": schema.BOOL,
            "files_checked": schema.INT,
            "clean": schema.BOOL,
            "drift": OBJS,
            "warnings": STRS,
            "gpu": schema.nullable(OBJ),
        },
        {},
    ),
    "rollback": (
        {
            **PLAN,
            "generation": GENERATION,
            "current": GENERATION,
            "milliseconds": schema.NUMBER,
            "switch_milliseconds": schema.nullable(schema.NUMBER),
        },
        {},
    ),
    "generations": (
        {
            "generation": GENERATION,
            "current": GENERATION,
            "hold": schema.nullable(HOLD),
            "generations": schema.items(
                schema.obj(
                    {"number": schema.INT, "name": GENERATION, "lock_id": LOCK_ID},
                    (
                        "number",
                        "name",
                        "lock_id",
                        "active",
                        "held",
                        "adopted_from",
                        "irreplaceable",
                    ),
                )
            ),
            "history": OBJS,
        },
        {},
    ),
    "gc": ({**PLAN, "freed_bytes": schema.INT}, {"dry_run": schema.BOOL}),
    "snapshot": (
        {
            "snapshot": schema.STR,
            "generation": GENERATION,
            "packages": schema.INT,
            "torch": schema.nullable(schema.STR),
        },
        {},
    ),
    "bisect": (
        {
            "good": schema.STR,
            "bad": schema.STR,
            "status": schema.matching(
                re.compile(r"found|inconclusive|nothing-to-bisect"), "a bisect's answer"
            ),
            "reason": schema.nullable(schema.STR),
            "cause": STRS,
            "metric": schema.nullable(schema.STR),
            "threshold": schema.nullable(schema.NUMBER),
            "ends": schema.obj({"good": OBJ, "bad": OBJ}, ("good", "bad")),
            "differences": schema.items(
                schema.obj(
                    {"key": schema.STR, "kind": schema.STR, "label": schema.STR, "packages": OBJS},
                    ("key", "kind", "label", "packages", "variable", "good", "bad"),
                )
            ),
            "notes": STRS,
            "not_tried": STRS,
            "probes": schema.items(
                schema.obj(
                    {
                        "number": schema.INT,
                        "changes": STRS,
                        "outcome": schema.STR,
                        "values": schema.items(schema.NUMBER),
                        "built": schema.BOOL,
                        "generation": schema.nullable(GENERATION),
                    },
                    ("number", "changes", "outcome", "values", "summary", "seconds", "built"),
                )
            ),
            "builds": schema.INT,
            "generations_removed": schema.items(GENERATION),
            "generations_kept": schema.items(GENERATION),
            "seconds": schema.NUMBER,
        },
        {},
    ),
    "diff": (
        {
            "a": schema.STR,
            "b": schema.STR,
            "identical": schema.BOOL,
            "complete": schema.BOOL,
            "sides": schema.obj({"a": OBJ, "b": OBJ}, ("a", "b")),
            "groups": schema.items(
                schema.obj({"name": schema.STR, "changes": OBJS}, ("name", "counted", "changes"))
            ),
            # What was compared whole, by digest, or not (issue #40): added, schema 1 kept.
            "coverage": schema.obj(
                {"whole": STRS, "by_digest": STRS, "not_compared": OBJS},
                ("whole", "by_digest", "not_compared", "tensors_hashed"),
            ),
        },
        {},
    ),
    "inspect": (
        {
            "path": schema.STR,
            "format": schema.STR,
            "files": OBJS,
            "size": OBJ,
            "tensors": OBJ,
            "sections": OBJS,
            "first": OBJS,
            "largest": OBJS,
            "shared_storage": OBJS,
            "progress": OBJ,
            "config": schema.nullable(OBJ),
            "structure": OBJ,
            "stubbed_globals": STRS,
            "suspicious_globals": STRS,
            "notes": STRS,
            "pattern": schema.nullable(schema.STR),
            "keys": schema.nullable(OBJS),
        },
        {},
    ),
    "data": (
        {
            "deep": schema.BOOL,
            "datasets": schema.mapping(
                schema.STR, schema.obj({"path": schema.STR, "missing": schema.BOOL}, ("path",))
            ),
        },
        {},
    ),
    "cache-status": (
        {
            "cache_dir": schema.STR,
            "active": schema.nullable(schema.STR),
            "active_parts": schema.nullable(OBJ),
            "current": schema.nullable(GENERATION),
            "dirs": schema.items(
                schema.obj(
                    {"id": schema.STR, "dir": schema.STR, "generations": STRS},
                    ("id", "dir", "generations", "active", "files", "bytes", "last_used"),
                )
            ),
        },
        {},
    ),
    "add": (PROPOSAL, PROPOSED),
    "remove": (PROPOSAL, PROPOSED),
    "lock-check": (
        {
            "lock_file": schema.STR,
            "lock_id": schema.nullable(LOCK_ID),
            "fresh": schema.BOOL,
            "reasons": STRS,
        },
        {},
    ),
    "init-from": (
        {
            "profile": schema.STR,
            "from": schema.STR,
            "installed": schema.INT,
            "lock_file": schema.nullable(schema.STR),  # its path, as in `lock --json`
            "lock_error": schema.nullable(schema.STR),
            "comparison": schema.nullable(
                schema.obj(
                    {
                        "exact": schema.BOOL,
                        "same": schema.INT,
                        "moved": schema.mapping(
                            schema.PACKAGE_NAME,
                            schema.obj(
                                {"installed": schema.STR, "locked": schema.STR},
                                ("installed", "locked"),
                            ),
                        ),
                        "not_locked": VERSIONS,
                        "added": VERSIONS,
                    },
                    ("exact", "same", "moved", "not_locked", "added"),
                )
            ),
            "left_out": schema.mapping(schema.PACKAGE_NAME, schema.STR),  # name -> why
            "seeded": STRS,
            "next": STRS,
            "machine_paths": STRS,  # wheels the lock names by a path of this machine
        },
        {},
    ),
    "cache-save": ({"file": schema.STR, "bytes": schema.INT}, {}),
    "cache-restore": (
        {"restored": schema.INT, "dir": schema.STR, "fingerprint": schema.STR},
        {},
    ),
    "rollback-container": ({"container": schema.STR, "container_snapshot": schema.STR}, {}),
    "generations-container": (
        {
            "container": schema.STR,
            "snapshots": schema.items(
                schema.obj(
                    {
                        "name": schema.STR,
                        "taken": schema.nullable(schema.STR),  # UTC; null: PVE did not say
                        # the generation active in it and its lock id; null when unknown
                        "generation": schema.nullable(GENERATION),
                        "lock_id": schema.nullable(LOCK_ID),
                        "ours": schema.BOOL,
                    },
                    ("name", "taken", "generation", "lock_id", "ours"),
                )
            ),
        },
        {},
    ),
    "fleet": (
        {
            "members": schema.items(
                schema.obj(MEMBER, tuple(MEMBER))  # and the command's own fields
            ),
            "fleet": schema.obj(FLEET, tuple(FLEET)),
        },
        {},
    ),
    "snapshot-file": (SNAPSHOT_FILE, {"process": PROCESS}),
}


def conforms(kind: str, data: dict[str, Any]) -> None:
    """`data` is a document of `kind` as SHAPES declares it (schema.Invalid names the field)."""
    required, optional = SHAPES[kind]
    assert data["schema"] == schema.DOCUMENTS[kind]
    fields = {**required, **optional}
    unknown = set(data) - {"schema", *fields}
    assert not unknown, f"{kind}: fields not declared: {sorted(unknown)}"
    schema.obj(fields, tuple(required))(data, kind)
