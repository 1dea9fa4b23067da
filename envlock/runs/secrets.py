"""Secrets: which names hold one, and what is recorded instead of the value.

A snapshot travels with its checkpoint, so a token in it would travel too. Every value whose
name says it is a secret (an environment variable, a config key, a command-line option) is
recorded as `<redacted sha256:XXXXXXXX>`: the first 8 hex digits of the value's sha256, so a
diff can still say that it changed without saying what it is.

Stdlib only and free of envlock imports: the in-process snapshot API (envlock/startup) runs
this very module inside a training script's interpreter.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

# *TOKEN*, *SECRET*, *PASSWORD*, *PASSWD*, *_KEY, *API_KEY*, *CREDENTIAL*, *AUTH*, matched on
# the name in upper snake case. TOKENS/TOKENIZ… are counts and tokenizer settings
# (max_tokens, TOKENIZERS_PARALLELISM), the hyperparameters a diff exists to show.
SECRET_NAME = re.compile(r"TOKEN(?!S|IZ)|SECRET|PASSWORD|PASSWD|_KEY$|API_KEY|CREDENTIAL|AUTH")
REDACTED = re.compile(r"^<redacted sha256:[0-9a-f]{8}>$")
# `--name=value` or `NAME=value` on a command line (not code that happens to hold a `=`).
ASSIGNMENT = re.compile(r"^(-{0,2}[A-Za-z_][A-Za-z0-9_.-]*)=(.*)$", re.DOTALL)


def snake(name: str) -> str:
    """`hfToken`, `--hf-token` and `HF_TOKEN` all become `HF_TOKEN`."""
    name = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name.lstrip("-"))
    return re.sub(r"[^A-Za-z0-9]", "_", name).upper()


def is_secret_name(name: str) -> bool:
    """Whether a variable, config key or option of this name holds a secret."""
    return bool(SECRET_NAME.search(snake(str(name))))


def redact(value: Any) -> str:
    """What is recorded instead of a secret (idempotent: a redacted value stays as it is)."""
    if isinstance(value, str) and REDACTED.match(value):
        return value
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=repr)
    return f"<redacted sha256:{hashlib.sha256(text.encode()).hexdigest()[:8]}>"


def redact_env(env: Mapping[str, Any]) -> dict[str, Any]:
    """Environment variables with the secrets' values redacted."""
    return {k: redact(v) if is_secret_name(k) else v for k, v in env.items()}


def redact_config(value: Any) -> Any:
    """A run config (JSON data) with the values of secret-named keys redacted, at any depth."""
    if isinstance(value, Mapping):
        return {
            k: redact(v) if is_secret_name(k) and v is not None else redact_config(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [redact_config(v) for v in value]
    return value


def redact_argv(argv: list[str]) -> list[str]:
    """A command line with the values of secret options (`--hf-token X`, `--api-key=X`) and
    assignments (`HF_TOKEN=X`) redacted."""
    out: list[str] = []
    secret_next = False
    for arg in argv:
        if secret_next and not arg.startswith("-"):
            out.append(redact(arg))
            secret_next = False
            continue
        assignment = ASSIGNMENT.match(arg)
        if assignment and is_secret_name(assignment.group(1)):
            out.append(f"{assignment.group(1)}={redact(assignment.group(2))}")
        else:
            out.append(arg)
        secret_next = not assignment and arg.startswith("-") and is_secret_name(arg)
    return out
