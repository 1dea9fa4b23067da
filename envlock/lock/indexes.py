"""How a profile's indexes reach uv: through its environment, never its argv.

An index URL may carry credentials (`https://user:TOKEN@host/simple`). A process's argv is
readable by every user of the machine (/proc/PID/cmdline); its environment only by its owner
and root. So `lock` (and `add`, and the question to the torch backend's index) hands uv the
indexes as the variables uv documents as equivalent to its options, and the torch backend's
index, which resolver_input names in a pyproject.toml, without credentials there: uv takes
them from that index's own variables.
"""

from __future__ import annotations

from urllib.parse import unquote, urlsplit, urlunsplit

from envlock.profile.read import Profile

# The torch backend's index, as resolver_input names it for uv ([[tool.uv.index]] name).
TORCH_INDEX_VARS = ("UV_INDEX_TORCH_BACKEND_USERNAME", "UV_INDEX_TORCH_BACKEND_PASSWORD")


def uv_index_env(profile: Profile) -> dict[str, str]:
    """The profile's indexes for uv, through its environment: an index URL may carry
    credentials (`https://user:TOKEN@host/simple`), and a process's argv is readable by every
    user in /proc/PID/cmdline while its environment is readable by its owner only.
    UV_DEFAULT_INDEX and UV_INDEX are uv's `--default-index` and `--index` (space-separated,
    in order); the torch backend's index takes its credentials from uv's per-index
    UV_INDEX_<NAME>_USERNAME / _PASSWORD."""
    deps = profile.dependencies
    env: dict[str, str] = {}
    if not deps.offline:
        if deps.index_url:
            env["UV_DEFAULT_INDEX"] = deps.index_url
        if deps.extra_index_urls:
            env["UV_INDEX"] = " ".join(deps.extra_index_urls)
    backend = profile.torch.backend_index if profile.torch else None
    if backend:
        parts = urlsplit(backend)
        for var, value in zip(TORCH_INDEX_VARS, (parts.username, parts.password), strict=True):
            if value:
                env[var] = unquote(value)
    return env


def without_credentials(url: str) -> str:
    """`https://user:pw@host/simple` → `https://host/simple`."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
