"""A session with the Proxmox VE API: login over verified HTTPS, and errors people can act on.

The secret (an API token's value or a password) comes from the environment variable or file
the profile names, goes to proxmoxer and nowhere else: it is never kept on our objects, put
in a message or chained into an exception.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlsplit

import requests
from proxmoxer import AuthenticationError, ProxmoxAPI, ResourceException

from envlock.errors import OperationError, UsageError
from envlock.proxmox.config import root_only_keys
from envlock.proxmox.settings import LxcSettings

DEFAULT_PORT = 8006
# What logging in can raise: proxmoxer's errors, requests' (connection, TLS, timeout), and
# a server that answers 200 with something other than PVE's JSON.
CONNECT_ERRORS = (
    AuthenticationError,
    ResourceException,
    requests.exceptions.RequestException,
    NotImplementedError,
    ValueError,
    KeyError,
    TypeError,
)
Progress = Callable[[str], None]


@dataclass(frozen=True)
class ProxmoxSession:
    """A logged-in connection to one Proxmox VE API endpoint."""

    api: Any = field(repr=False, compare=False)  # proxmoxer.ProxmoxAPI
    url: str
    user: str
    token_id: str | None
    version: str

    @property
    def login(self) -> str:
        """Who the API sees, in words: `API token root@pam!envlock` or `root@pam (password)`."""
        if self.token_id is not None:
            return f"API token {self.user}!{self.token_id}"
        return f"{self.user} (password login)"

    @property
    def login_id(self) -> str:
        """The login as pveum names it: `root@pam!envlock` (a token) or `root@pam`."""
        return f"{self.user}!{self.token_id}" if self.token_id is not None else self.user

    @property
    def may_set_root_only(self) -> bool:
        return self.user == "root@pam" and self.token_id is None


# -- connect ----------------------------------------------------------------------------


def connect(target: LxcSettings, *, timeout: float = 30.0) -> ProxmoxSession:
    """Log in to the target's Proxmox API over verified HTTPS; OperationError if that fails."""
    url = _required(target, "api_url", "api-url")
    _required(target, "node", "node")
    _required(target, "vmid", "vmid")
    host, port, prefix = parse_api_url(url)
    user, token = split_token(target)
    secret = read_secret(target)
    options: dict[str, Any] = {
        "port": port,
        "verify_ssl": tls_verification(target),
        "timeout": timeout,
        "path_prefix": prefix,
    }
    if token is not None:
        options.update(user=user, token_name=token, token_value=secret)
    else:
        options.update(user=user, password=secret)
    try:
        api = ProxmoxAPI(host, **options)
        version = api.version.get()
    except CONNECT_ERRORS as exc:  # every way in fails with one clear message
        _raise_connect_error(exc, target, url, user, token, secret)
    return ProxmoxSession(
        api=api,
        url=url,
        user=user,
        token_id=token,
        version=str((version or {}).get("version", "unknown")),
    )


def parse_api_url(url: str) -> tuple[str, int, str | None]:
    """(host, port, path prefix or None) of `https://host[:port][/prefix]`."""
    parts = urlsplit(url)
    if parts.scheme != "https" or not parts.hostname:
        raise UsageError(
            f'[target] api-url: expected an https:// URL of the Proxmox API, found "{url}"',
            hint='e.g. "https://pve1.example:8006"',
        )
    try:
        port = parts.port or DEFAULT_PORT
    except ValueError:
        raise UsageError(f'[target] api-url: invalid port in "{url}"') from None
    path = re.sub(r"/?api2/json/?$", "", parts.path).strip("/")
    return parts.hostname, port, path or None


def split_token(target: LxcSettings) -> tuple[str, str | None]:
    """(user, token name or None); token-id may be `name` or `user@realm!name`."""
    user = target.api_user or "root@pam"
    token = target.token_id
    if token and "!" in token:
        owner, _, token = token.partition("!")
        if owner != user:
            raise UsageError(
                f'[target] token-id "{target.token_id}" belongs to {owner}, api-user is {user}',
                hint=f'set api-user = "{owner}" or token-id = "{token}"',
            )
    return user, token or None


def read_secret(target: LxcSettings) -> str:
    """The token value or password, from the environment variable or the file named."""
    if target.secret_env and os.environ.get(target.secret_env):
        return os.environ[target.secret_env].rstrip("\r\n")
    if target.secret_file:
        return read_secret_file(Path(target.secret_file))
    if target.secret_env:
        what = "API token secret" if target.token_id else f"password of {target.api_user}"
        raise UsageError(
            f"environment variable {target.secret_env} is not set or empty: it should hold "
            f"the {what}",
            hint=f"export {target.secret_env}=... before running envlock",
        )
    raise UsageError(
        "[target] names no Proxmox secret",
        hint='add secret-env = "PVE_TOKEN_SECRET" or secret-file = "..."',
    )


# More than any token or password: a secret-file naming a big file is a mistake, not a secret.
MAX_SECRET_FILE = 64 * 1024


def read_secret_file(path: Path) -> str:
    """The secret in a file: UTF-8 text on one line (a trailing newline is dropped), in a
    file only its owner may read (as ssh demands of a key: others may have copied it)."""
    hint = "[target] secret-file must name a readable file holding only the secret"
    try:
        # O_NONBLOCK: a FIFO in its place reads as empty instead of hanging the command.
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
        try:
            # Judged on the open file, not by name: what is read is what was checked.
            mode = os.fstat(fd).st_mode
            if stat.S_ISREG(mode) and mode & 0o077:
                raise UsageError(
                    f"the Proxmox secret file {path} is readable by others "
                    f"(mode {stat.S_IMODE(mode):04o}): its secret may have been copied",
                    hint=f"chmod 600 {path}, and rotate the secret if others could read it",
                )
            data = os.read(fd, MAX_SECRET_FILE + 1)
        finally:
            os.close(fd)
        if len(data) > MAX_SECRET_FILE:
            raise UsageError(
                f"the Proxmox secret file {path} is larger than {MAX_SECRET_FILE} bytes", hint=hint
            )
        secret = data.decode("utf-8").rstrip("\r\n")
    except OSError as exc:
        raise UsageError(
            f"cannot read the Proxmox secret from {path}: {exc.strerror}", hint=hint
        ) from None
    except UnicodeDecodeError:
        raise UsageError(f"the Proxmox secret file {path} is not UTF-8 text", hint=hint) from None
    if not secret:
        raise UsageError(f"the Proxmox secret file {path} is empty", hint=hint)
    # It goes into an HTTP header or a form field: a NUL or an inner newline would break
    # the request with a traceback instead of this message.
    if any(ord(char) < 32 or ord(char) == 127 for char in secret):
        raise UsageError(
            f"the Proxmox secret file {path} holds control characters or more than one line",
            hint=hint,
        )
    return secret


def tls_verification(target: LxcSettings) -> str | bool:
    """requests' `verify`: the CA file when given, True by default, False only if asked."""
    if not target.verify_tls:
        return False
    if target.ca_file is None:
        return True
    if not Path(target.ca_file).is_file():
        raise UsageError(
            f"[target] ca-file {target.ca_file} does not exist",
            hint="copy /etc/pve/pve-root-ca.pem from the node and point ca-file at it",
        )
    return target.ca_file


def _required(target: LxcSettings, attr: str, key: str) -> str:
    value = getattr(target, attr)
    if not value:
        raise UsageError(f"[target] {key} is required for a proxmox-lxc target")
    return str(value)


def _raise_connect_error(
    exc: Exception, target: LxcSettings, url: str, user: str, token: str | None, secret: str
) -> NoReturn:
    who = f"API token {user}!{token}" if token else f"{user} (password login)"
    source = (
        f"environment variable {target.secret_env}"
        if target.secret_env and os.environ.get(target.secret_env)
        else f"file {target.secret_file}"
    )
    if isinstance(exc, AuthenticationError) or (
        isinstance(exc, ResourceException) and exc.status_code == 401
    ):
        message = f"the Proxmox API at {url} refused the login of {who} (HTTP 401)"
        hint = (
            f"check api-user and token-id, and that the token's secret is in {source} "
            "(Datacenter > Permissions > API Tokens)"
            if token
            else f"check api-user and the password in {source}"
        )
        error = OperationError(_scrub(message, secret), hint=hint)
    elif isinstance(exc, ResourceException):
        error = OperationError(
            _scrub(
                f"the Proxmox API at {url} answered HTTP {exc.status_code}: {exc.content}", secret
            ),
            hint="is api-url the Proxmox VE API (port 8006) of the node?",
        )
    elif isinstance(exc, (ValueError, KeyError, TypeError)):  # JSONDecodeError among them
        error = OperationError(
            f"the server at {url} did not answer the login like the Proxmox VE API",
            hint="is api-url the Proxmox VE API (port 8006) of the node?",
        )
    elif isinstance(exc, requests.exceptions.RequestException):
        error = _transport_error(url, "connecting to the Proxmox API", exc, target)
        error = OperationError(_scrub(error.message, secret), hint=error.hint)
    else:
        error = OperationError(
            _scrub(f"connecting to the Proxmox API at {url} failed: {exc}", secret)
        )
    # Not chained: a requests exception carries the request, and so the token, with it.
    raise error from None


def _scrub(text: str, secret: str) -> str:
    return text.replace(secret, "***") if secret else text


# -- errors -----------------------------------------------------------------------------

ROOT_ONLY_HINT = (
    'log in as root@pam with its password: in [target] set api-user = "root@pam", remove '
    "token-id, and point secret-env (or secret-file) at root@pam's password"
)


@contextmanager
def api_call(
    session: ProxmoxSession, doing: str, params: Mapping[str, object] | None = None
) -> Iterator[None]:
    """Turn what proxmoxer and requests raise inside into one OperationError about `doing`."""
    try:
        yield
    except ResourceException as exc:
        raise api_error(session, doing, exc, params or {}) from exc
    except AuthenticationError:
        raise OperationError(
            f"{doing} failed: the Proxmox API at {session.url} refused a new login ticket "
            f"for {session.login}",
            hint="check the password in the environment variable or file the profile names",
        ) from None
    except requests.exceptions.RequestException as exc:
        # Not chained: the exception carries the request and its Authorization header.
        raise _transport_error(session.url, doing, exc, None) from None


def api_error(
    session: ProxmoxSession, doing: str, exc: ResourceException, params: Mapping[str, object]
) -> OperationError:
    """An OperationError naming what failed, PVE's message and its per-field errors."""
    status = int(exc.status_code)
    reason = str(exc.content or exc.status_message or "").strip()
    lines = [f"{doing} failed: {reason} (HTTP {status})"]
    if isinstance(exc.errors, dict):
        lines += [f"  {k}: {str(v).strip()}" for k, v in sorted(exc.errors.items())]
    elif exc.errors:
        lines.append(f"  {str(exc.errors).strip()}")
    root_keys = root_only_keys(params)
    if _root_only_refusal(status, reason, root_keys, session):
        lines.append(
            "Proxmox lets only root@pam, logged in with its password, set device passthrough "
            "(devN), bind mounts (mpN from a host path) and the features of privileged "
            f"containers; this request sets {', '.join(root_keys) or 'one of them'} and is "
            f"made by {session.login}."
        )
        return OperationError("\n".join(lines), hint=ROOT_ONLY_HINT)
    return OperationError("\n".join(lines), hint=_hint(status, reason, session))


def _root_only_refusal(
    status: int, reason: str, root_keys: list[str], session: ProxmoxSession
) -> bool:
    """True when PVE refused what only root@pam may do (its wording, or a bare 403)."""
    if "only allowed for root@pam" in reason or "Only root can" in reason:
        return True
    # A 403 that names a privilege on a path is an ordinary missing privilege.
    names_privilege = re.search(r"\(/[^,)]*, [\w.|]+\)", reason) is not None
    return (
        status == 403 and bool(root_keys) and not session.may_set_root_only and not names_privilege
    )


def _hint(status: int, reason: str, session: ProxmoxSession) -> str | None:
    if status == 401:
        return f"the login of {session.login} is no longer accepted: check the secret, re-run"
    if status == 403:
        return (
            f"{session.login} lacks the privilege named above: grant it on the node "
            "(`pveum acl modify PATH --roles ROLE --users USER`, or --tokens for a token)"
        )
    if "is locked" in reason:
        return (
            "another operation (backup, snapshot, migration) holds the container: wait for "
            "it to end and re-run; if a task died, `pct unlock VMID` on the node"
        )
    if "no quorum" in reason:
        return "the cluster has lost quorum: bring its nodes back, then re-run"
    if status in (595, 596):
        return "the node did not answer its peer: check that the node named in [target] is up"
    if status >= 500:  # the API's own failure, not the login's: never a permissions hint
        return (
            "the Proxmox API failed on its side: its reason is in the node's log "
            "(`journalctl -u pveproxy -u pvedaemon`); re-run once it is fixed"
        )
    return None


def _transport_error(
    url: str, doing: str, exc: requests.exceptions.RequestException, target: LxcSettings | None
) -> OperationError:
    text = str(exc)
    if isinstance(exc, requests.exceptions.SSLError):
        found = re.search(r"\[SSL[^\]]*\] ([^(')\"]+)", text)
        why = found.group(1).strip() if found else "the TLS handshake failed"
        ca_file = target.ca_file if target else None
        hint = (
            f"the node's certificate is not signed by the CA in ca-file {ca_file}: copy "
            "/etc/pve/pve-root-ca.pem from the node"
            if ca_file
            else "set ca-file in [target] to the node's CA (copy /etc/pve/pve-root-ca.pem "
            "from the node); verify-tls = false only on a network you trust"
        )
        return OperationError(f"{doing}: TLS verification of {url} failed: {why}", hint=hint)
    if isinstance(exc, requests.exceptions.Timeout):
        return OperationError(
            f"{doing}: no answer from {url} in time",
            hint="check that the node is up and reachable, then re-run",
        )
    found = re.search(r"\[Errno -?\d+\] ([^'\")]+)", text)
    why = found.group(1).strip() if found else exc.__class__.__name__
    return OperationError(
        f"{doing}: cannot reach {url}: {why}",
        hint="check api-url (host and port 8006) and that pveproxy runs on the node "
        "(`systemctl status pveproxy`)",
    )
