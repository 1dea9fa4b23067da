"""Quoting at each hop, as behaviour: what a real shell makes of the one string ssh sends.

The ssh hop joins an argv into the one string the remote shell parses; the pct hop wraps an
argv in `pct exec VMID --keep-env 0 -- env -i K=V … argv` so that nothing of the node's
environment reaches the container. Hostile values here have no whitespace on purpose: a
quoting rule that only quotes words with spaces must fail these tests.
"""

# ruff: noqa: E501 (the tables hold messages whole, as users read them)
from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from envlock.base.tomlread import Table, _typo_distance, control_char, describe, load_toml, shown
from envlock.base.untrusted import NAMED_HINT
from envlock.errors import ProfileError
from envlock.targets.pct import BASE_ENV, PctTransport
from envlock.targets.ssh import SshSettings, SshTransport, insecure_ssh_option, read_ssh_settings

# No whitespace in any of them: each must still reach the command as one literal argument.
HOSTILE = [
    "$(touch {marker})",
    "`touch {marker}`",
    "a;touch {marker}",
    "a&&touch${{IFS}}{marker}",
    "a|tee${{IFS}}{marker}",
    ">{marker}",
    "'\"",
    "\\",
    "*",
    "~",
    "$HOME",
    "#comment",
    "!x",
    "",
    "a\nb",
]

ECHO_ARGV = "import json, sys; print(json.dumps(sys.argv[1:]))"
ECHO_ENV = "import json, os, sys; print(json.dumps({k: os.environ.get(k) for k in sys.argv[1:]}))"


@pytest.fixture(autouse=True)
def in_a_scratch_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The shells these tests start parse hostile values (`a|tee x`, `>x`): if a quoting rule
    ever breaks, what they write lands in the test's own directory, never in the checkout."""
    scratch = tmp_path / "cwd"
    scratch.mkdir()
    monkeypatch.chdir(scratch)


def hostile(tmp_path: Path) -> tuple[list[str], Path]:
    marker = tmp_path / "pwned"
    return [value.format(marker=marker) for value in HOSTILE], marker


def remote_shell(command: str, env: dict[str, str] | None = None) -> str:
    """What sshd does with the string: the login shell parses it (`sh -c`)."""
    done = subprocess.run(
        ["sh", "-c", command], capture_output=True, text=True, env=env, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


# -- the ssh hop ----------------------------------------------------------------------------


def test_every_hostile_argument_reaches_the_command_literally(tmp_path: Path) -> None:
    values, marker = hostile(tmp_path)
    command = SshTransport("host").remote_command([sys.executable, "-c", ECHO_ARGV, *values], None)
    assert json.loads(remote_shell(command)) == values
    assert not marker.exists()


@pytest.mark.parametrize("value", [v for v in HOSTILE if v.strip() == v and v])
def test_each_hostile_argument_alone(tmp_path: Path, value: str) -> None:
    # One at a time, so a failure names the value a quoting rule let through.
    literal = value.format(marker=tmp_path / "pwned")
    command = SshTransport("host").remote_command([sys.executable, "-c", ECHO_ARGV, literal], None)
    assert json.loads(remote_shell(command)) == [literal]
    assert not (tmp_path / "pwned").exists()


def test_environment_values_reach_the_command_literally(tmp_path: Path) -> None:
    values, marker = hostile(tmp_path)
    env = {f"V{i}": value for i, value in enumerate(values)}
    command = SshTransport("host").remote_command([sys.executable, "-c", ECHO_ENV, *env], env)
    assert command.startswith("env ")
    assert json.loads(remote_shell(command)) == env
    assert not marker.exists()


def test_without_env_the_argv_is_joined_as_it_is() -> None:
    transport = SshTransport("host")
    assert transport.remote_command(["python3", "-c", "x"], None) == "python3 -c x"
    assert transport.remote_command(["python3", "-c", "x"], {}) == "python3 -c x"
    assert transport.remote_command(["a b"], {"K": "v w"}) == "env 'K=v w' 'a b'"


# -- the pct hop ----------------------------------------------------------------------------


def pct() -> PctTransport:
    return PctTransport(SshTransport("node"), 101)


def test_pct_wrap_clears_the_environment_at_both_layers() -> None:
    wrapped = pct().wrap(["python3", "-c", "x"], {"HF_HOME": "/data"})
    assert wrapped == [
        "pct",
        "exec",
        "101",
        "--keep-env",
        "0",
        "--",
        "env",
        "-i",
        *(f"{k}={v}" for k, v in BASE_ENV.items()),
        "HF_HOME=/data",
        "python3",
        "-c",
        "x",
    ]


def test_pct_wrap_gives_the_base_environment_and_lets_the_caller_override_it() -> None:
    wrapped = pct().wrap(["true"], {"PATH": "/opt/bin", "EXTRA": "1"})
    assigned = wrapped[wrapped.index("-i") + 1 : -1]
    assert assigned == [
        "PATH=/opt/bin",
        f"HOME={BASE_ENV['HOME']}",
        f"LANG={BASE_ENV['LANG']}",
        f"USER={BASE_ENV['USER']}",
        "EXTRA=1",
    ]
    assert pct().wrap(["true"], None)[-1 - len(BASE_ENV) :] == [
        *(f"{k}={v}" for k, v in BASE_ENV.items()),
        "true",
    ]


def fake_pct(tmp_path: Path) -> Path:
    """A `pct` that does what PVE's does with `exec VMID [--keep-env 0|1] -- argv`: with
    keep-env (the default) the node's environment passes on; here the "container" is this
    machine, so the only thing under test is what envlock's argv lets through."""
    bin_dir = tmp_path / "node-bin"
    bin_dir.mkdir()
    script = bin_dir / "pct"
    script.write_text(
        "#!/bin/sh\n"
        '[ "$1" = exec ] || exit 2\n'
        "shift 2\n"
        'keep=1\nif [ "$1" = --keep-env ]; then keep=$2; shift 2; fi\n'
        '[ "$1" = -- ] || exit 2\nshift\n'
        'if [ "$keep" = 0 ]; then exec env -i PATH="$PATH" "$@"; fi\n'
        'exec "$@"\n'
    )
    script.chmod(0o755)
    return bin_dir


def test_the_nodes_environment_never_reaches_the_container(tmp_path: Path) -> None:
    """ssh hop + pct hop through real shells: a canary in the node's environment (as sshd's
    would be) is not seen by the command, and hostile values still arrive literally."""
    values, marker = hostile(tmp_path)
    transport = pct()
    names = ["NODE_CANARY", "PYTHONPATH", "HF_TOKEN", "VALUE"]
    program = (
        f"import json, os, sys; print(json.dumps({{k: os.environ.get(k) for k in {names!r}}}));"
        " print(json.dumps(sys.argv[1:]))"
    )
    wrapped = transport.wrap([sys.executable, "-c", program, *values], {"VALUE": values[0]})
    command = transport.node.remote_command(wrapped, None)
    node_env = {
        **os.environ,
        "PATH": f"{fake_pct(tmp_path)}:{os.environ['PATH']}",
        "NODE_CANARY": "leaked",
        "PYTHONPATH": "/node/site",
        "HF_TOKEN": "node-secret",
    }
    seen_env, seen_argv = remote_shell(command, node_env).splitlines()
    assert json.loads(seen_env) == {
        "NODE_CANARY": None,
        "PYTHONPATH": None,
        "HF_TOKEN": None,
        "VALUE": values[0],
    }
    assert json.loads(seen_argv) == values
    assert not marker.exists()


# -- values in messages: a profile's mistakes reported whole (tomlread) -----------------------
# Each message as a user reads it, so that a hostile or broken value is shown escaped on one
# line and every expectation, finding and hint is pinned word for word.


@pytest.mark.parametrize(
    ("value", "described"),
    [
        (True, "a boolean true"),
        (False, "a boolean false"),
        (3, "an integer 3"),
        (1.5, "a float 1.5"),
        ("a\nb", 'a string "a\\nb"'),
        ([1], "an array"),
        ({"a": 1}, "a table"),
        ("x" * 56, 'a string "' + "x" * 56 + '"'),  # 58 characters: shown whole
        ("x" * 58, 'a string "' + "x" * 58 + '"'),  # 60: still whole
        ("x" * 59, 'a string "' + "x" * 56 + "..."),  # 61: cut to 57 and "..."
        (datetime.date(2024, 1, 2), "date datetime.date(2024, 1, 2)"),
        (None, "NoneType None"),
        (
            "é\u2028\u2029\x00\x7f\t\r\x1b\x85",
            'a string "é\\u2028\\u2029\\u0000\\u007f\\t\\r\\u001b\\u0085"',
        ),
    ],
)
def test_describe_a_found_value(value: object, described: str) -> None:
    assert describe(value) == described


def test_control_char_names_the_first_one_escaped() -> None:
    assert control_char("plain text, spaces and é") is None
    assert control_char("a\tb\x00") == "\\t"
    assert control_char("a\u2028") == "\\u2028"
    assert shown("") == '""'


@pytest.mark.parametrize(
    ("content", "message", "hint", "line"),
    [
        (None, "{path}: no such file", "check the path", None),
        ("DIR", "{path}: a directory, not a regular file", NAMED_HINT, None),
        (b"\xff\xfe", "{path}: not UTF-8 text; TOML files must be UTF-8", None, None),
        (
            b"a = 1\n\nb = = 2\n",
            "{path}:3: invalid TOML: Invalid value (at line 3, column 5)",
            None,
            3,
        ),
        # tomllib before 3.14 names no line for an error at the very end
        (b"a = ", "{path}: invalid TOML: Invalid value (at end of document)", None, None),
    ],
)
def test_load_toml_failures_in_words(
    tmp_path: Path, content: bytes | str | None, message: str, hint: str | None, line: int | None
) -> None:
    path = tmp_path / "p.toml"
    if content == "DIR":
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    with pytest.raises(ProfileError) as info:
        load_toml(path)
    assert (info.value.message, info.value.hint, info.value.line) == (
        message.format(path=path),
        hint,
        line,
    )


def test_load_toml_reads_a_valid_file(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text('[target]\nhost = "gpu1"\n')
    assert load_toml(path) == {"target": {"host": "gpu1"}}


def table(data: dict[str, Any], *seen: str) -> Table:
    t = Table("p.toml", "target", data)
    t.seen.update(seen)
    return t


CONTROL_HINT = "remove the control character; TOML escapes such as \\n and \\u0000 count too"
# (what is asked of which table, the message, the hint)
TABLE_FAILURES: list[tuple[str, Callable[[], object], str, str | None]] = [
    ("fail-table", lambda: table({}).fail(None, "msg", hint="h"), "p.toml: [target]: msg", "h"),
    (
        "missing-because",
        lambda: table({}).raw("host", required_because="an ssh target needs it"),
        "p.toml: [target] host: missing required key (an ssh target needs it)",
        "add `host = ...` to [target]",
    ),
    (
        "missing",
        lambda: table({}).raw("host"),
        "p.toml: [target] host: missing required key",
        "add `host = ...` to [target]",
    ),
    (
        "missing-typo",
        lambda: table({"hots": 1}).raw("host"),
        "p.toml: [target] host: missing required key `host` (found unknown key `hots`: did you mean `host`?)",
        "rename `hots` to `host`",
    ),
    # "close" is one edit up to five letters, two beyond
    (
        "short-two-edits",
        lambda: table({"hsot1": 1}).raw("host"),
        "p.toml: [target] host: missing required key",
        "add `host = ...` to [target]",
    ),
    (
        "five-one-edit",
        lambda: table({"nodes": 1}).raw("node1"),
        "p.toml: [target] node1: missing required key `node1` (found unknown key `nodes`: did you mean `node1`?)",
        "rename `nodes` to `node1`",
    ),
    (
        "five-two-edits",
        lambda: table({"nodxs": 1}).raw("node1"),
        "p.toml: [target] node1: missing required key",
        "add `node1 = ...` to [target]",
    ),
    (
        "six-two-edits",
        lambda: table({"bakcedn": 1}).raw("backend"),
        "p.toml: [target] backend: missing required key `backend` (found unknown key `bakcedn`: did you mean `backend`?)",
        "rename `bakcedn` to `backend`",
    ),
    (
        "six-three-edits",
        lambda: table({"bxkxedx": 1}).raw("backend"),
        "p.toml: [target] backend: missing required key",
        "add `backend = ...` to [target]",
    ),
    (
        "folded",
        lambda: table({"Api_Url": 1}).raw("api-url"),
        "p.toml: [target] api-url: missing required key `api-url` (found unknown key `Api_Url`: did you mean `api-url`?)",
        "rename `Api_Url` to `api-url`",
    ),
    (
        "string",
        lambda: table({"k": 1}).string("k"),
        "p.toml: [target] k: expected a string, found an integer 1",
        None,
    ),
    (
        "integer-bool",
        lambda: table({"k": True}).integer("k"),
        "p.toml: [target] k: expected an integer, found a boolean true",
        None,
    ),
    (
        "integer-minimum",
        lambda: table({"k": 0}).integer("k", minimum=1),
        "p.toml: [target] k: expected an integer >= 1, found 0",
        None,
    ),
    (
        "boolean",
        lambda: table({"k": 1}).boolean("k"),
        "p.toml: [target] k: expected true or false, found an integer 1",
        None,
    ),
    (
        "strings",
        lambda: table({"k": "a"}).strings("k"),
        'p.toml: [target] k: expected an array of strings, found a string "a"',
        None,
    ),
    (
        "strings-item",
        lambda: table({"k": ["a", 2]}).strings("k"),
        "p.toml: [target] k[1]: expected a string, found an integer 2",
        None,
    ),
    (
        "text",
        lambda: table({"k": "a\x00b"}).text("k"),
        'p.toml: [target] k: expected text without control characters, found "a\\u0000b" (contains "\\u0000")',
        CONTROL_HINT,
    ),
    (
        "texts",
        lambda: table({"k": ["a", "b\nc"]}).texts("k"),
        'p.toml: [target] k[1]: expected text without control characters, found "b\\nc" (contains "\\n")',
        CONTROL_HINT,
    ),
    (
        "table",
        lambda: table({"k": [1]}).table("k"),
        "p.toml: [target] k: expected a table, found an array",
        None,
    ),
    (
        "unknown-close",
        lambda: table({"hots": 1}, "host").finish(),
        "p.toml: [target] hots: unknown key",
        "did you mean `host`?",
    ),
    (
        "unknown-far",
        lambda: table({"zzz": 1}, "port", "host").finish(),
        "p.toml: [target] zzz: unknown key",
        "known keys: host, port",
    ),
    (
        "unknown-alone",
        lambda: table({"zzz": 1}).finish(),
        "p.toml: [target] zzz: unknown key",
        None,
    ),
]


@pytest.mark.parametrize(
    ("call", "message", "hint"), [c[1:] for c in TABLE_FAILURES], ids=[c[0] for c in TABLE_FAILURES]
)
def test_each_table_failure_in_full(
    call: Callable[[], object], message: str, hint: str | None
) -> None:
    with pytest.raises(ProfileError) as info:
        call()
    assert (info.value.message, info.value.hint) == (message, hint)


def test_typed_values_and_defaults_pass_through() -> None:
    t = table({"a": "x", "b": 2, "c": True, "d": ["x"], "e": {"z": 1}})
    assert (t.string("a"), t.text("a"), t.integer("b", minimum=2), t.boolean("c")) == (
        "x",
        "x",
        2,
        True,
    )
    assert (t.strings("d"), t.texts("d")) == (["x"], ["x"])
    sub = t.table("e")
    assert sub is not None and (sub.path, sub.name, sub.data) == ("p.toml", "target.e", {"z": 1})
    assert t.table("absent") is None
    assert (t.string("q", "default"), t.strings("q", None), t.texts("q", None)) == (
        "default",
        None,
        None,
    )
    assert t.integer("q", None, minimum=1) is None
    assert (t.has("a"), t.has("q")) == (True, False)
    assert t.seen == {"a", "b", "c", "d", "e", "q", "absent"}
    t.finish()  # every key was asked for
    # bool is wanted here, so a boolean passes where the kind includes it
    assert table({"k": True}).typed("k", (int, bool), "x", object()) is True


@pytest.mark.parametrize(
    ("a", "b", "distance"),
    [
        ("", "abc", 3),
        ("abc", "", 3),
        ("host", "host", 0),
        ("ab", "ba", 1),
        ("abc", "acb", 1),
        ("abcd", "badc", 2),
        ("kitten", "sitting", 3),
        ("host", "hots", 1),
        ("backend", "bakcedn", 2),
    ],
)
def test_typo_distance(a: str, b: str, distance: int) -> None:
    assert _typo_distance(a, b) == distance


# -- the ssh target's settings: values ssh would misread are refused, in full --------------

NO_OPTION_HINT = 'no spaces, and no leading "-" (ssh would read it as an option)'
INSECURE_HINT = (
    "remove it, or set `allow-insecure-ssh = true` in [target] if this profile is meant to do that"
)
SSH_REFUSALS: list[tuple[dict[str, Any], str, str | None]] = [
    (
        {"host": "-oProxyCommand=x"},
        'p.toml: [target] host: expected a host name or ssh alias, found "-oProxyCommand=x"',
        NO_OPTION_HINT,
    ),
    (
        {"host": ""},
        'p.toml: [target] host: expected a host name or ssh alias, found ""',
        NO_OPTION_HINT,
    ),
    (
        {"host": " "},
        'p.toml: [target] host: expected a host name or ssh alias, found " "',
        NO_OPTION_HINT,
    ),
    (
        {"host": "a b"},
        'p.toml: [target] host: expected a host name or ssh alias, found "a b"',
        NO_OPTION_HINT,
    ),
    (
        {"host": "a\u00a0b"},
        'p.toml: [target] host: expected a host name or ssh alias, found "a\u00a0b"',
        NO_OPTION_HINT,
    ),
    (
        {"host": "a\tb"},
        'p.toml: [target] host: expected text without control characters, found "a\\tb" (contains "\\t")',
        CONTROL_HINT,
    ),
    (
        {"host": "h", "user": ""},
        'p.toml: [target] user: expected a login name, found ""',
        NO_OPTION_HINT,
    ),
    (
        {"host": "h", "user": "-x"},
        'p.toml: [target] user: expected a login name, found "-x"',
        NO_OPTION_HINT,
    ),
    (
        {"host": "h", "user": "a b"},
        'p.toml: [target] user: expected a login name, found "a b"',
        NO_OPTION_HINT,
    ),
    ({"host": "h", "port": 0}, "p.toml: [target] port: expected an integer >= 1, found 0", None),
    (
        {"host": "h", "port": 65536},
        "p.toml: [target] port: expected a TCP port (1-65535), found 65536",
        None,
    ),
    (
        {"host": "h", "ssh-options": ["ServerAliveInterval=5", "ProxyCommand=nc %h"]},
        "p.toml: [target] ssh-options[1]: expected an ssh option that keeps host-key checking on "
        'and runs no local command, found "ProxyCommand=nc %h": it runs a local command to '
        "connect; for a jump host use ProxyJump=HOST",
        INSECURE_HINT,
    ),
    (
        {"host": "h", "ssh-options": ["StrictHostKeyChecking=no"], "allow-insecure-ssh": False},
        "p.toml: [target] ssh-options[0]: expected an ssh option that keeps host-key checking on "
        'and runs no local command, found "StrictHostKeyChecking=no": it disables host-key checking',
        INSECURE_HINT,
    ),
    (
        {"host": "h", "ssh-options": ["bad"]},
        'p.toml: [target] ssh-options[0]: expected "Name=value", found "bad"',
        None,
    ),
    (
        {"host": "h", "ssh-options": ["1x=2"]},
        'p.toml: [target] ssh-options[0]: expected "Name=value", found "1x=2"',
        None,
    ),
]


def ssh_settings(data: dict[str, Any]) -> SshSettings:
    return read_ssh_settings(Table("p.toml", "target", data), lambda path: "/abs/" + path)


@pytest.mark.parametrize(("data", "message", "hint"), SSH_REFUSALS)
def test_each_ssh_setting_refusal_in_full(
    data: dict[str, Any], message: str, hint: str | None
) -> None:
    with pytest.raises(ProfileError) as info:
        ssh_settings(data)
    assert (info.value.message, info.value.hint) == (message, hint)


def test_ssh_settings_read_whole() -> None:
    assert ssh_settings({"host": "h"}) == SshSettings("h")
    assert ssh_settings(
        {
            "host": "gpu-1.example",
            "user": "ml",
            "port": 65535,
            "identity-file": "keys/id",
            "ssh-options": ["ServerAliveInterval=5", "StrictHostKeyChecking=yes"],
        }
    ) == SshSettings(
        "gpu-1.example",
        user="ml",
        port=65535,
        identity_file="/abs/keys/id",
        ssh_options=("ServerAliveInterval=5", "StrictHostKeyChecking=yes"),
    )
    # allowed when the profile says so, and said so
    assert ssh_settings(
        {
            "host": "h",
            "port": 1,
            "ssh-options": ["ProxyCommand=nc %h %p"],
            "allow-insecure-ssh": True,
        }
    ) == SshSettings("h", port=1, ssh_options=("ProxyCommand=nc %h %p",), allow_insecure_ssh=True)


@pytest.mark.parametrize(
    ("name", "value", "problem"),
    [
        ("stricthostkeychecking", '"No"', "disables host-key checking"),
        ("stricthostkeychecking", "off", "disables host-key checking"),
        ("stricthostkeychecking", "yes", None),
        ("userknownhostsfile", "~/.ssh/kh /dev/null", "disables host-key checking"),
        ("userknownhostsfile", "'NONE'", "disables host-key checking"),
        ("userknownhostsfile", "~/.ssh/kh", None),
        ("serveraliveinterval", "no", None),
        ("localcommand", "x", "runs a local command after connecting"),
        ("permitlocalcommand", "yes", "enables LocalCommand, which runs a local command"),
        ("knownhostscommand", "x", "runs a local command to find host keys"),
        ("pkcs11provider", "x.so", "loads a shared library into ssh"),
        ("securitykeyprovider", "x.so", "loads a shared library into ssh"),
    ],
)
def test_insecure_ssh_options(name: str, value: str, problem: str | None) -> None:
    assert insecure_ssh_option(name, value) == problem


def test_missing_called_directly_and_more_misspellings() -> None:
    with pytest.raises(ProfileError) as info:
        table({}).missing("host")
    assert info.value.message == "p.toml: [target] host: missing required key"
    # six letters take two edits, and underscores fold into dashes before counting
    for data, key, typo in [
        ({"pytxxn": 1}, "python", "pytxxn"),
        ({"Keep_Env_On_Exit": 1}, "keep-env-on-exit", "Keep_Env_On_Exit"),
    ]:
        assert table(data).misspelling_of(key) == typo
    # lower-casing folds case only: "ß" is not "ss" (upper-casing would make it so)
    assert table({"ß": 1}).misspelling_of("ss") is None
    assert insecure_ssh_option("stricthostkeychecking", "NoX") is None


@pytest.mark.parametrize(
    ("a", "b", "distance"),
    [
        ("hosts", "host", 1),
        ("ba", "ab", 1),
        ("xab", "xba", 1),
        ("abx", "bax", 1),
        ("ab", "xb", 1),
        ("ba", "bab", 1),
        ("a", "aa", 1),
        ("aaa", "a", 2),
        ("aa", "aa", 0),
    ],
)
def test_typo_distance_more(a: str, b: str, distance: int) -> None:
    assert _typo_distance(a, b) == distance


def test_transports_keep_what_they_were_given() -> None:
    plain = SshTransport("gpu1")
    assert vars(plain) == {
        "host": "gpu1",
        "user": None,
        "port": None,
        "identity_file": None,
        "options": (),
        "name": "ssh gpu1",
    }
    full = SshSettings(
        "gpu1", user="ml", port=2222, identity_file="/k", ssh_options=("A=b",)
    ).transport()
    assert vars(full) == {
        "host": "gpu1",
        "user": "ml",
        "port": 2222,
        "identity_file": "/k",
        "options": ("A=b",),
        "name": "ssh ml@gpu1:2222",
    }
    container = PctTransport(full, 101)
    assert (container.node_name, container.name, container.keep_env) == (
        "gpu1",
        "container 101 on gpu1",
        None,
    )
    assert PctTransport(full, 101, "pve1").node_name == "pve1"


def test_pct_wrap_without_keep_env_on_an_older_node() -> None:
    transport = pct()
    transport.keep_env = False  # what detect_keep_env finds on Proxmox VE < 8.2
    assert transport.wrap(["true"], None)[:5] == ["pct", "exec", "101", "--", "env"]
    transport.keep_env = True
    assert transport.wrap(["true"], None)[:6] == ["pct", "exec", "101", "--keep-env", "0", "--"]
