"""Secrets: THE rule for which names and values hold one, and what is recorded instead.

A snapshot travels with its checkpoint, so a token in it would travel too. Every path that
records or shows a run's strings (`envlock snapshot`, `run --snapshot-into`, the in-process
`envlock.snapshot()`, `diff` of snapshots and checkpoints, `inspect`'s config) asks this
module, and no other, what to hide:

- a value whose *name* says it is a secret (an environment variable, a config key, a
  command-line option) is recorded as `<redacted sha256:XXXXXXXX>`: the first 8 hex digits of
  the value's sha256, so a diff can still say that it changed without saying what it is;
- inside any other string, the password of a URL (`scheme://user:PASSWORD@host`, DSNs
  included), the user of an http(s) URL that has no password (`https://TOKEN@host`: a token
  in the user's place), and secret-named query parameters (`?access_token=…`) are replaced by
  `<redacted-sha256:XXXXXXXX>` (no space: the URL stays one word).

Stdlib only, Python 3.8, free of envlock imports: the in-process snapshot API (envlock/startup)
runs this very file inside a training script's interpreter (runs/startup_set.py ships it).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

# -- names ---------------------------------------------------------------------------------
# A name is split into lower-case words (snake, kebab, dotted and camel case alike: `hfToken`,
# `--hf-token`, `HF_TOKEN` → hf, token). It names a secret when its LAST word (after holder
# words such as `_value`, and trailing digits) is a secret word: English compounds put the
# head noun last, so `hf_token` is a token while `token_budget` is a budget, `key_dim` a
# dimension, `num_key_value_heads` a count of heads and `bos_token_id` an id. Plurals of
# counted things (`max_tokens`, `keys`) are not secret words; `credentials` and `cookies` are.
# fmt: off
SECRET_WORDS = frozenset((
    "token", "secret", "secrets", "password", "passwords", "passwd", "passphrase", "key",
    "apikey", "accesskey", "secretkey", "privatekey", "credential", "credentials", "creds",
    "cred", "auth", "authorization", "cookie", "cookies", "pat", "dsn", "signature",
    "bearer", "pw", "pwd",
))
# A single word ending in one of these is a secret word too (`authtoken`, `hftoken`,
# `dbpassword`); `key` is not among them: monkey, hotkey, turkey.
SECRET_ENDINGS = ("token", "secret", "password", "passwd", "passphrase", "apikey")
# Words after the secret word that still name the secret itself (`API_KEY_VALUE`).
HOLDER_WORDS = frozenset((
    "value", "val", "string", "str", "raw", "text", "b64", "base64", "hex", "data", "header",
))
# `X_token` where X is a tokenizer's special token holds that token's text (`"<pad>"`), a
# setting a diff must show, never a credential.
SPECIAL_TOKENS = frozenset((
    "bos", "eos", "pad", "unk", "sep", "cls", "mask", "start", "end", "eot", "eom", "eod",
    "boi", "eoi", "image", "video", "audio", "special", "additional", "sot", "begin", "stop",
))
# fmt: on
WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


def words(name: str) -> list[str]:
    """`--hfToken2`, `HF_TOKEN2` and `hf.token2` all become ["hf", "token"] (digits dropped)."""
    return [w.lower() for w in WORD.findall(str(name)) if not w.isdigit()]


def snake(name: str) -> str:
    """`hfToken`, `--hf-token` and `HF_TOKEN` all become `HF_TOKEN` (for display)."""
    name = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", str(name).lstrip("-"))
    return re.sub(r"[^A-Za-z0-9]", "_", name).upper()


def is_secret_word(word: str) -> bool:
    return word in SECRET_WORDS or word.endswith(SECRET_ENDINGS)


# The shell's working directory (POSIX sets PWD): a path, shown, also as the last part of a
# flattened key (`run.PWD`); `pwd`, `DB_PWD` and `--pwd` are passwords.
NOT_SECRET = re.compile(r"(?:^|[^A-Za-z0-9_-])(?:OLD)?PWD$")


def is_secret_name(name: Any) -> bool:
    """Whether a variable, config key or option of this name holds a secret."""
    if NOT_SECRET.search(str(name)):
        return False
    found = words(str(name))
    while len(found) > 1 and found[-1] in HOLDER_WORDS:
        found.pop()
    if not found or not is_secret_word(found[-1]):
        return False
    return not (found[-1] == "token" and len(found) > 1 and found[-2] in SPECIAL_TOKENS)


# -- values --------------------------------------------------------------------------------
REDACTED = re.compile(r"^<redacted sha256:[0-9a-f]{8}>$")
IN_URL = re.compile(r"^<redacted-sha256:[0-9a-f]{8}>$")
# scheme://USERINFO@ — greedy up to the netloc's last `@` (a raw `@` in a password is common).
USERINFO = re.compile(r"\b([A-Za-z][A-Za-z0-9+.\-]*://)([^/\s?#@]*(?:@[^/\s?#@]*)*)@")
QUERY = re.compile(r"([?&;])([^=&#\s]+)=([^&#\s]*)")
# `--name=value` or `NAME=value` on a command line (not code that happens to hold a `=`).
ASSIGNMENT = re.compile(r"^(-{0,2}[A-Za-z_][A-Za-z0-9_.-]*)=(.*)$", re.DOTALL)


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def redact(value: Any) -> str:
    """What is recorded instead of a secret (idempotent: a redacted value stays as it is)."""
    if isinstance(value, str) and REDACTED.match(value):
        return value
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=repr)
    return f"<redacted sha256:{digest(text)}>"


def in_url(part: str) -> str:
    return part if IN_URL.match(part) else f"<redacted-sha256:{digest(part)}>"


def _userinfo(match: Any) -> str:
    scheme, info = match.group(1), match.group(2)
    if IN_URL.match(info):
        return match.group(0)  # redacted already
    user, colon, password = info.partition(":")
    if colon:
        return f"{scheme}{user}:{in_url(password)}@"
    if scheme.lower().rstrip(":/").endswith(("http", "https")) and user:
        return f"{scheme}{in_url(user)}@"  # a token in the user's place
    return match.group(0)  # ssh://git@host: a login name, not a secret


def _query(match: Any) -> str:
    sep, name, value = match.groups()
    if value and is_secret_name(name):
        return f"{sep}{name}={in_url(value)}"
    return match.group(0)


def redact_text(text: str) -> str:
    """A string with the secrets inside its URLs redacted; the rest as it was."""
    if "://" in text:
        text = USERINFO.sub(_userinfo, text)
    if "=" in text and ("?" in text or "&" in text):
        text = QUERY.sub(_query, text)
    return text


def redact_value(name: Any, value: Any) -> Any:
    """A named value as it may be recorded: hidden whole when the name is secret (nulls stay
    null: nothing is hidden), else with the secrets inside it redacted."""
    if is_secret_name(name) and value is not None:
        return redact(value)
    return redact_config(value)


def redact_env(env: Mapping[str, Any]) -> dict[str, Any]:
    """Environment variables with the secrets in them redacted."""
    return {k: redact_value(k, v) for k, v in env.items()}


def redact_config(value: Any) -> Any:
    """JSON data (a run config, checkpoint args) with its secrets redacted, at any depth."""
    if isinstance(value, Mapping):
        return {k: redact_value(k, v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_config(v) for v in value]
    if isinstance(value, str):
        return redact_text(value)
    return value


def redact_argv(argv: list[str]) -> list[str]:
    """A command line with the values of secret options (`--hf-token X`, `--api-key=X`) and
    assignments (`HF_TOKEN=X`) redacted, and the secrets inside every other argument.
    The word after a secret option is its value whatever its first character (a token may
    start with `-`): `--token --verbose` records `--verbose` redacted, the safe mistake."""
    out: list[str] = []
    secret_next = False
    for arg in argv:
        if secret_next:
            out.append(redact(arg))
            secret_next = False
            continue
        assignment = ASSIGNMENT.match(arg)
        if assignment:
            out.append(f"{assignment.group(1)}={redact_value(*assignment.groups())}")
        else:
            out.append(redact_text(arg))
            secret_next = arg.startswith("-") and is_secret_name(arg)
    return out
