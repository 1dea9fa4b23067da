"""Secrets and scrubbing, as behaviour: the Proxmox secret never appears in an error message,
secret-named values are redacted (and only those), and `run` scrubs the variables that would
make the generation's interpreter look elsewhere.
"""

# ruff: noqa: E501 (the tables hold messages whole, as users read them)
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import requests
from proxmoxer import AuthenticationError, ResourceException

from envlock.base.secrets import (
    is_secret_name,
    redact,
    redact_argv,
    redact_config,
    redact_env,
    redact_text,
    snake,
)
from envlock.errors import OperationError, UsageError
from envlock.profile.read import load_profile
from envlock.proxmox.api import (
    _raise_connect_error,
    _scrub,
    _transport_error,
    read_secret,
    read_secret_file,
)
from envlock.proxmox.settings import LxcSettings
from envlock.reconcile.state import parse_state
from envlock.runs.environment import SCRUBBED, run_environment
from envlock.runs.launch import LAUNCHER, remote_spec
from envlock.targets.ssh import SshSettings

SECRET = "s3cr3t-5ca1ab1e-token"


def hashed(text: str) -> str:
    return f"<redacted sha256:{hashlib.sha256(text.encode()).hexdigest()[:8]}>"


# -- the Proxmox secret in connection errors --------------------------------------------------


def test_scrub_replaces_every_occurrence_and_leaves_other_text() -> None:
    assert _scrub(f"a {SECRET} b {SECRET}", SECRET) == "a *** b ***"
    assert _scrub("no secret here", SECRET) == "no secret here"
    assert _scrub("empty secret", "") == "empty secret"


def lxc(**changes: object) -> LxcSettings:
    base = {
        "ssh": SshSettings("pve1"),
        "api_url": "https://pve1:8006",
        "node": "pve1",
        "vmid": 101,
        "api_user": "root@pam",
        "secret_file": "/etc/envlock/pve-secret",
    }
    return LxcSettings(**{**base, **changes})  # type: ignore[arg-type]


# Each way a connection can fail, with the secret echoed back somewhere in what failed.
FAILURES = [
    ResourceException(500, "Internal Server Error", f"bad ticket {SECRET}"),
    ResourceException(401, "Unauthorized", f"no such token {SECRET}"),
    AuthenticationError(f"Couldn't authenticate user: root@pam with {SECRET}"),
    requests.exceptions.ConnectionError(
        f"HTTPSConnectionPool: [Errno 111] Connection refused by {SECRET} host"
    ),
    requests.exceptions.SSLError(f"[SSL: CERTIFICATE_VERIFY_FAILED] verify {SECRET} failed"),
    RuntimeError(f"unexpected answer carrying {SECRET}"),
]


@pytest.mark.parametrize("exc", FAILURES, ids=[type(e).__name__ for e in FAILURES])
@pytest.mark.parametrize("token", ["envlock", None])
def test_a_connection_error_never_shows_the_secret(exc: Exception, token: str | None) -> None:
    url = f"https://pve1:8006/{SECRET}"  # even a secret pasted into the URL
    with pytest.raises(OperationError) as info:
        _raise_connect_error(exc, lxc(token_id=token), url, "root@pam", token, SECRET)
    shown = f"{info.value.message}\n{info.value.hint}"
    assert SECRET not in shown
    assert info.value.__cause__ is None and info.value.__suppress_context__
    assert "pve1" in shown


def test_a_401_names_the_login_and_where_the_secret_came_from() -> None:
    exc = ResourceException(401, "Unauthorized", "")
    with pytest.raises(OperationError) as info:
        _raise_connect_error(exc, lxc(), "https://pve1:8006", "root@pam", "ci", SECRET)
    assert "refused the login of API token root@pam!ci (HTTP 401)" in info.value.message
    assert "file /etc/envlock/pve-secret" in (info.value.hint or "")


# -- secret names and redaction ------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "HF_TOKEN",
        "hfToken",
        "--hf-token",
        "WANDB_API_KEY",
        "api-key",
        "AWS_SECRET_ACCESS_KEY",
        "DB_PASSWORD",
        "passwd",
        "SSH_KEY",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "AUTH",
        "token",
        # holder words after the secret word, down to the secret word alone
        "HF_TOKEN_VALUE",
        "TOKEN_VALUE",
        # a special token's name exempts a token only
        "pad_secret",
    ],
)
def test_secret_names(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "max_tokens",
        "MAX_TOKENS",
        "TOKENIZERS_PARALLELISM",
        "tokenizer",
        "KEYBOARD",
        "lr",
        "PATH",
        "bos_token",
        "PAD_TOKEN",
    ],
)
def test_hyperparameters_are_not_secret_names(name: str) -> None:
    assert not is_secret_name(name)


def test_snake_joins_every_spelling_of_a_name() -> None:
    assert snake("hfToken") == snake("--hf-token") == snake("HF_TOKEN") == "HF_TOKEN"
    assert snake("api.key2") == "API_KEY2"
    assert snake("x9Y") == "X9_Y"


def test_redact_records_a_short_hash_and_is_idempotent() -> None:
    assert redact("abc") == hashed("abc")
    assert redact(redact("abc")) == hashed("abc")
    assert redact(12) == hashed("12")
    assert redact({"b": 1, "a": 2}) == hashed('{"a": 2, "b": 1}')
    assert redact("<redacted sha256:xyz>") == hashed("<redacted sha256:xyz>")


def test_redact_env_touches_secret_names_only() -> None:
    assert redact_env({"HF_TOKEN": "t", "LR": "0.1"}) == {"HF_TOKEN": hashed("t"), "LR": "0.1"}


def test_redact_config_at_any_depth_and_keeps_nulls() -> None:
    config = {
        "lr": 0.1,
        "api_key": "k",
        "empty_token": None,
        "nested": {"password": "p", "layers": [{"auth": 5}, 3]},
    }
    assert redact_config(config) == {
        "lr": 0.1,
        "api_key": hashed("k"),
        "empty_token": None,
        "nested": {"password": hashed("p"), "layers": [{"auth": hashed("5")}, 3]},
    }


def test_redact_argv_options_and_assignments() -> None:
    argv = [
        "python",
        "train.py",
        "--hf-token",
        "T1",
        "data.txt",
        "--api-key=K1",
        "HF_TOKEN=T2",
        "--lr",
        "0.1",
        "--token",
        "--verbose",
        "--max-tokens",
        "512",
        "x=1",
    ]
    assert redact_argv(argv) == [
        "python",
        "train.py",
        "--hf-token",
        hashed("T1"),
        "data.txt",
        f"--api-key={hashed('K1')}",
        f"HF_TOKEN={hashed('T2')}",
        "--lr",
        "0.1",
        "--token",
        hashed("--verbose"),  # a secret option's value, whatever its first character
        "--max-tokens",
        "512",
        "x=1",
    ]


# -- the environment a command gets under `envlock run` ---------------------------------------


def test_run_scrubs_what_would_make_the_interpreter_look_elsewhere(tmp_path: Path) -> None:
    profile_path = tmp_path / "p.toml"
    profile_path.write_text(
        '[profile]\nname = "p"\n\n[target]\ntype = "local"\nroot = "root"\n\n'
        '[python]\nversion = "3.11"\n\n[env]\nHF_HOME = "/data/hf"\n'
    )
    profile = load_profile(profile_path)
    state = parse_state({"current": "1-0123456789ab", "packages": {}})
    base = {
        "PATH": "/usr/bin",
        "HOME": "/home/u",
        "PYTHONHOME": "/elsewhere",
        "PYTHONPATH": "/elsewhere/site",
        "CONDA_PREFIX": "/opt/conda",
        "__PYVENV_LAUNCHER__": "/x/python",
    }
    env = run_environment(profile, state, base)
    gen = os.path.join(profile.target.root, "generations", "1-0123456789ab")
    for name in ("PYTHONHOME", "CONDA_PREFIX", "__PYVENV_LAUNCHER__"):
        assert name not in env
    assert "/elsewhere" not in env["PYTHONPATH"]
    assert set(SCRUBBED) >= {"PYTHONHOME", "PYTHONPATH", "CONDA_PREFIX"}
    assert env["HOME"] == "/home/u" and env["HF_HOME"] == "/data/hf"
    assert env["VIRTUAL_ENV"] == gen
    assert env["PATH"] == f"{gen}/bin{os.pathsep}/usr/bin"
    assert env["ENVLOCK_GENERATION"] == "1-0123456789ab"
    # And a real interpreter started with it does not see the scrubbed paths.
    shown = subprocess.run(
        [sys.executable, "-c", "import os, sys; print(os.environ.get('CONDA_PREFIX'), sys.path)"],
        env={**env, "PATH": os.environ["PATH"]},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert shown.startswith("None ") and "/elsewhere" not in shown


def test_on_a_target_the_launcher_unsets_the_targets_own_interpreter_variables(
    tmp_path: Path,
) -> None:
    """A remote run's env file, read by the real launcher in a real process whose own
    environment (the target's) has CONDA_PREFIX, PYTHONHOME and PYTHONPATH set."""
    env = {"PATH": "/ignored", "HF_HOME": "/data/hf", "PYTHONPATH": "/startup"}
    spec_file = tmp_path / "run.env"
    spec_file.write_bytes(remote_spec(env, "/gen/bin", SCRUBBED))
    target_env = {
        "PATH": os.environ["PATH"],
        "CONDA_PREFIX": "/opt/conda",
        "PYTHONHOME": "/elsewhere",
        "PYTHONPATH": "/elsewhere/site",
        "__PYVENV_LAUNCHER__": "/x/python",
        "KEEP": "kept",
    }
    names = [*SCRUBBED, "HF_HOME", "KEEP"]
    shown = subprocess.run(
        [
            sys.executable,
            "-I",
            "-c",
            LAUNCHER,
            str(spec_file),
            str(tmp_path / "run.pid"),  # the .env's twin, as run_remote names them
            "/usr/bin/env",
        ],
        env=target_env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    seen = dict(line.split("=", 1) for line in shown.splitlines())
    assert {k: seen.get(k) for k in names} == {
        "PYTHONHOME": None,
        "PYTHONPATH": "/startup",
        "CONDA_PREFIX": None,
        "__PYVENV_LAUNCHER__": None,
        "HF_HOME": "/data/hf",
        "KEEP": "kept",
    }
    assert seen["PATH"].startswith("/gen/bin:") and not spec_file.exists()


# -- where the secret comes from, and transport failures in words ------------------------------


def test_the_secret_comes_from_the_variable_first_then_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret_file = tmp_path / "secret"
    secret_file.write_text("from-file\n")
    secret_file.chmod(0o600)
    target = lxc(secret_env="ENVLOCK_T_SECRET", secret_file=str(secret_file))
    monkeypatch.setenv("ENVLOCK_T_SECRET", "from-env\r\n")
    assert read_secret(target) == "from-env"
    monkeypatch.setenv("ENVLOCK_T_SECRET", "")
    assert read_secret(target) == "from-file"


@pytest.mark.parametrize(
    ("changes", "message", "hint"),
    [
        (
            {"secret_env": "ENVLOCK_T_SECRET", "secret_file": None, "token_id": "ci"},
            "environment variable ENVLOCK_T_SECRET is not set or empty: it should hold the "
            "API token secret",
            "export ENVLOCK_T_SECRET=... before running envlock",
        ),
        (
            {"secret_env": "ENVLOCK_T_SECRET", "secret_file": None},
            "environment variable ENVLOCK_T_SECRET is not set or empty: it should hold the "
            "password of root@pam",
            "export ENVLOCK_T_SECRET=... before running envlock",
        ),
        (
            {"secret_file": None},
            "[target] names no Proxmox secret",
            'add secret-env = "PVE_TOKEN_SECRET" or secret-file = "..."',
        ),
    ],
)
def test_a_missing_secret_says_where_it_was_looked_for(
    monkeypatch: pytest.MonkeyPatch, changes: dict[str, object], message: str, hint: str
) -> None:
    monkeypatch.delenv("ENVLOCK_T_SECRET", raising=False)
    with pytest.raises(UsageError) as info:
        read_secret(lxc(**changes))
    assert (info.value.message, info.value.hint) == (message, hint)


URL = "https://pve1:8006"
TRANSPORT_FAILURES = [
    (
        requests.exceptions.SSLError(
            "HTTPSConnectionPool(host='pve1', port=8006): Max retries exceeded (Caused by "
            "SSLError(SSLCertVerificationError(1, '[SSL: CERTIFICATE_VERIFY_FAILED] "
            "certificate verify failed: self-signed certificate in certificate chain (_ssl.c)')))"
        ),
        None,
        f"doing: TLS verification of {URL} failed: certificate verify failed: self-signed "
        "certificate in certificate chain",
        "set ca-file in [target] to the node's CA (copy /etc/pve/pve-root-ca.pem from the "
        "node); verify-tls = false only on a network you trust",
    ),
    (
        requests.exceptions.SSLError("handshake"),
        "/etc/pve-ca.pem",
        f"doing: TLS verification of {URL} failed: the TLS handshake failed",
        "the node's certificate is not signed by the CA in ca-file /etc/pve-ca.pem: copy "
        "/etc/pve/pve-root-ca.pem from the node",
    ),
    (
        requests.exceptions.ConnectTimeout("timed out"),
        None,
        f"doing: no answer from {URL} in time",
        "check that the node is up and reachable, then re-run",
    ),
    (
        requests.exceptions.ConnectionError(
            "HTTPSConnectionPool(host='pve1', port=8006): Max retries exceeded (Caused by "
            "NewConnectionError('<urllib3.connection.HTTPSConnection>: Failed to establish a "
            "new connection: [Errno 111] Connection refused'))"
        ),
        None,
        f"doing: cannot reach {URL}: Connection refused",
        "check api-url (host and port 8006) and that pveproxy runs on the node "
        "(`systemctl status pveproxy`)",
    ),
    (
        requests.exceptions.ConnectionError("no errno here"),
        None,
        f"doing: cannot reach {URL}: ConnectionError",
        "check api-url (host and port 8006) and that pveproxy runs on the node "
        "(`systemctl status pveproxy`)",
    ),
]


@pytest.mark.parametrize(("exc", "ca_file", "message", "hint"), TRANSPORT_FAILURES)
def test_transport_failures_in_words(
    exc: requests.exceptions.RequestException, ca_file: str | None, message: str, hint: str
) -> None:
    error = _transport_error(URL, "doing", exc, lxc(ca_file=ca_file))
    assert (error.message, error.hint) == (message, hint)


# -- the secret file and the login failures, every message whole ------------------------------

FILE_HINT = "[target] secret-file must name a readable file holding only the secret"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read the Proxmox secret from {path}: No such file or directory"),
        ("DIR", "cannot read the Proxmox secret from {path}: Is a directory"),
        (b"\xff", "the Proxmox secret file {path} is not UTF-8 text"),
        (b"\r\n", "the Proxmox secret file {path} is empty"),
        (
            b"a\x00b",
            "the Proxmox secret file {path} holds control characters or more than one line",
        ),
        (
            b"a\nb\n",
            "the Proxmox secret file {path} holds control characters or more than one line",
        ),
        (
            b"a\x1fb",
            "the Proxmox secret file {path} holds control characters or more than one line",
        ),
        (
            b"a\x7fb",
            "the Proxmox secret file {path} holds control characters or more than one line",
        ),
    ],
)
def test_secret_file_refusals_in_full(
    tmp_path: Path, content: bytes | str | None, message: str
) -> None:
    path = tmp_path / "secret"
    if content == "DIR":
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
        path.chmod(0o600)
    with pytest.raises(UsageError) as info:
        read_secret_file(path)
    assert (info.value.message, info.value.hint) == (message.format(path=path), FILE_HINT)


@pytest.mark.parametrize(
    ("content", "secret"),
    [
        (b"tok\r\n", "tok"),
        (b" a b \n", " a b "),  # spaces are part of a password: only the line end goes
        (b"s3cr\xc3\xa9tX\n", "s3cr\u00e9tX"),
    ],
)
def test_secret_file_keeps_all_but_the_line_end(
    tmp_path: Path, content: bytes, secret: str
) -> None:
    path = tmp_path / "secret"
    path.write_bytes(content)
    path.chmod(0o600)
    assert read_secret_file(path) == secret


def test_the_variables_secret_keeps_all_but_the_line_end(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVLOCK_T_SECRET", " pass wordX\r\n")
    assert read_secret(lxc(secret_env="ENVLOCK_T_SECRET")) == " pass wordX"
    monkeypatch.setenv("ENVLOCK_T_SECRET", "pass word \n")
    assert read_secret(lxc(secret_env="ENVLOCK_T_SECRET")) == "pass word "


NOT_PVE_HINT = "is api-url the Proxmox VE API (port 8006) of the node?"
REACH_HINT = "check api-url (host and port 8006) and that pveproxy runs on the node (`systemctl status pveproxy`)"
# (exception, token, ca-file, message, hint) for a login to https://pve1:8006 as root@pam
CONNECT_FAILURES: list[tuple[Exception, str | None, str | None, str, str | None]] = [
    (
        AuthenticationError("x"),
        "ci",
        None,
        "the Proxmox API at https://pve1:8006 refused the login of API token root@pam!ci (HTTP 401)",
        "check api-user and token-id, and that the token's secret is in file /etc/envlock/pve-secret "
        "(Datacenter > Permissions > API Tokens)",
    ),
    (
        ResourceException(401, "Unauthorized", ""),
        None,
        None,
        "the Proxmox API at https://pve1:8006 refused the login of root@pam (password login) (HTTP 401)",
        "check api-user and the password in file /etc/envlock/pve-secret",
    ),
    (
        ResourceException(500, "Internal Server Error", f"bad {SECRET}"),
        "ci",
        None,
        "the Proxmox API at https://pve1:8006 answered HTTP 500: bad ***",
        NOT_PVE_HINT,
    ),
    *[
        (
            exc,
            None,
            None,
            "the server at https://pve1:8006 did not answer the login like the Proxmox VE API",
            NOT_PVE_HINT,
        )
        for exc in (ValueError("not JSON"), KeyError("data"), TypeError("NoneType"))
    ],
    (
        requests.exceptions.ConnectionError(f"[Errno 111] Connection refused {SECRET}"),
        None,
        None,
        "connecting to the Proxmox API: cannot reach https://pve1:8006: Connection refused ***",
        REACH_HINT,
    ),
    (
        requests.exceptions.SSLError("handshake"),
        None,
        "/etc/pve-ca.pem",
        "connecting to the Proxmox API: TLS verification of https://pve1:8006 failed: the TLS handshake failed",
        "the node's certificate is not signed by the CA in ca-file /etc/pve-ca.pem: copy "
        "/etc/pve/pve-root-ca.pem from the node",
    ),
    (
        NotImplementedError(f"no {SECRET}"),
        None,
        None,
        "connecting to the Proxmox API at https://pve1:8006 failed: no ***",
        None,
    ),
]


@pytest.mark.parametrize(("exc", "token", "ca_file", "message", "hint"), CONNECT_FAILURES)
def test_connection_failures_in_full(
    exc: Exception, token: str | None, ca_file: str | None, message: str, hint: str | None
) -> None:
    with pytest.raises(OperationError) as info:
        _raise_connect_error(
            exc,
            lxc(token_id=token, ca_file=ca_file),
            "https://pve1:8006",
            "root@pam",
            token,
            SECRET,
        )
    assert (info.value.message, info.value.hint) == (message, hint)


def test_a_401_names_the_variable_the_secret_came_from(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVLOCK_T_SECRET", SECRET)
    with pytest.raises(OperationError) as info:
        _raise_connect_error(
            AuthenticationError("x"),
            lxc(secret_env="ENVLOCK_T_SECRET"),
            "U",
            "root@pam",
            None,
            SECRET,
        )
    assert (
        info.value.hint
        == "check api-user and the password in environment variable ENVLOCK_T_SECRET"
    )


def test_a_tls_failure_without_target_settings() -> None:
    error = _transport_error(URL, "doing", requests.exceptions.SSLError("handshake"), None)
    assert error.message == f"doing: TLS verification of {URL} failed: the TLS handshake failed"
    assert (error.hint or "").startswith("set ca-file in [target]")


def test_snake_strips_only_leading_dashes_and_redact_takes_any_value() -> None:
    assert snake("--Xray-token") == "XRAY_TOKEN"
    assert redact(Path("/x")) == hashed(json.dumps("PosixPath('/x')"))


def in_url(text: str) -> str:
    return f"<redacted-sha256:{hashlib.sha256(text.encode()).hexdigest()[:8]}>"


@pytest.mark.parametrize(
    ("text", "recorded"),
    [
        ("https://user:pw@host/x", f"https://user:{in_url('pw')}@host/x"),
        ("git+https://u:p@a@host/x", f"git+https://u:{in_url('p@a')}@host/x"),
        # a token in the user's place over HTTP(S) only; ssh's user is a login name
        ("HTTPS://ghp_abc@github.com/x", f"HTTPS://{in_url('ghp_abc')}@github.com/x"),
        ("http://tok@h", f"http://{in_url('tok')}@h"),
        ("ssh://git@host/x", "ssh://git@host/x"),
        ("ftp://anon@host", "ftp://anon@host"),
        ("https://@host", "https://@host"),
        (f"https://{in_url('t')}@h", f"https://{in_url('t')}@h"),
        # secret query parameters, after `?`, `&` or `;`, with or without a URL
        ("https://h/x?token=abc", f"https://h/x?token={in_url('abc')}"),
        ("https://h/x?page=2&api_key=zz", f"https://h/x?page=2&api_key={in_url('zz')}"),
        ("a=1&api_key=zz", f"a=1&api_key={in_url('zz')}"),
        ("h;sig_token=q&x=1", f"h;sig_token={in_url('q')}&x=1"),
        ("https://h/x?token=&page=2", "https://h/x?token=&page=2"),
        ("lr=0.1 steps=10", "lr=0.1 steps=10"),
        ("no url here", "no url here"),
    ],
)
def test_redact_text_hides_the_secrets_inside_urls(text: str, recorded: str) -> None:
    assert redact_text(text) == recorded
    assert redact_text(recorded) == recorded  # redacted once
