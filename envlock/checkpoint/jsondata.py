"""JSON from a checkpoint (safetensors headers, sharded indexes, config.json), within limits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from envlock.base.limits import MAX_JSON_DEPTH, Refused
from envlock.base.untrusted import read_untrusted
from envlock.errors import OperationError


def read_json(
    path: Path, what: str, *, within: Path | None = None, follow_links: bool = False
) -> Any:
    """The JSON document in `path`, refused past MAX_BYTES["json"] or MAX_JSON_DEPTH; with
    `within`, a member of that directory (see untrusted.py)."""
    raw = read_untrusted(path, "json", within=within, follow_links=follow_links)
    return parse_json(raw, f"{path}: {what}")


def parse_json(raw: bytes, where: str) -> Any:
    """Parse `raw`; OperationError naming `where` if it is not JSON or nests too deep."""
    try:
        value = json.loads(raw)
    except RecursionError:  # the parser's own guard, at Python's recursion limit
        raise Refused(f"{where}: JSON nesting", f"{MAX_JSON_DEPTH} levels") from None
    except ValueError as exc:  # includes UnicodeDecodeError and ints past 4300 digits
        raise OperationError(f"{where} is not valid JSON ({str(exc)[:200]})") from exc
    _check_depth(value, where)
    return value


def _check_depth(value: Any, where: str) -> None:
    # Iterative: JSON is a tree (no shared references), so this is linear in its size.
    level = [value]
    for _ in range(MAX_JSON_DEPTH):
        level = [
            child
            for node in level
            if isinstance(node, dict | list)
            for child in (node.values() if isinstance(node, dict) else node)
        ]
        if not level:
            return
    if any(isinstance(node, dict | list) for node in level):
        raise Refused(f"{where}: JSON nesting", f"{MAX_JSON_DEPTH} levels")
