"""Compile caches on a target: status, portable save and restore (through the agent)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from envlock.base.atomic import write_atomic
from envlock.base.untrusted import open_untrusted
from envlock.errors import OperationError, UsageError
from envlock.reconcile.agentcall import call_agent, call_agent_raw, parse_answer
from envlock.reconcile.context import Context
from envlock.reconcile.state import CacheState


def cache_request(ctx: Context) -> dict[str, Any]:
    return {"root": ctx.profile.target.root, "cache_dir": ctx.profile.cache_dir}


def cache_status(ctx: Context) -> dict[str, Any]:
    return call_agent(ctx.transport, ctx.profile.target.root, "cache-status", cache_request(ctx))


def save_cache(ctx: Context, file: Path) -> int:
    """Archive the active build's cache into FILE (atomically); returns its size."""
    result = call_agent_raw(
        ctx.transport, ctx.profile.target.root, "cache-save", cache_request(ctx)
    )
    if not result.ok:
        # The agent reports on stdout before the stream starts, on stderr after.
        for text in (result.stdout, result.stderr):
            lines = text.decode(errors="replace").strip().splitlines()
            if lines and lines[-1].startswith('{"error"'):
                error = json.loads(lines[-1])["error"]
                raise OperationError(f"{ctx.transport.name}: {error['message']}")
        raise OperationError(
            f"saving the compile cache failed (exit {result.exit_code}): {result.error_text()}"
        )
    write_atomic(file, result.stdout)
    return len(result.stdout)


def restore_cache(ctx: Context, file: Path, *, force: bool = False) -> dict[str, Any]:
    try:  # streamed to the target: an archive is never held whole
        archive = open_untrusted(file, "cache archive", hint="pass the archive file itself")
    except OSError as exc:
        raise UsageError(f"{file}: cannot read: {exc.strerror}") from None
    with archive:
        result = call_agent_raw(
            ctx.transport,
            ctx.profile.target.root,
            "cache-restore",
            {**cache_request(ctx), "force": force},
            stdin=archive,
        )
    return parse_answer(ctx.transport, "cache-restore", result)


def cache_warnings(
    state_cache: CacheState | None, environ: dict[str, str], local: bool, profile: str
) -> list[str]:
    """Not drift, but worth knowing before a run: a cache that went cold (it held files at
    an earlier check and lost them: the first compiled step recompiles and throughput may
    halve until it is warm again), variables pointing away. A cache that was never warm,
    as in every fresh environment and for CPU users who never compile, says nothing."""
    if state_cache is None:
        return []
    warnings = []
    if not state_cache.files and state_cache.was_warm:
        warnings.append(
            f"the compile cache of this build went cold ({state_cache.dir}): it held "
            "compiled kernels before; the first compiled step recompiles. "
            f"`envlock cache {profile} restore FILE` brings a saved archive back"
        )
    if local:
        for var, sub in (("TORCHINDUCTOR_CACHE_DIR", "inductor"), ("TRITON_CACHE_DIR", "triton")):
            want = os.path.join(state_cache.dir, sub)
            have = environ.get(var)
            if have and os.path.normpath(have) != os.path.normpath(want):
                warnings.append(
                    f"{var} in this shell points to {have}; processes started "
                    f"outside `envlock run` would miss the build's cache ({want})"
                )
    return warnings
