"""The site's Reference (docs/gen_reference.py) names everything the code has, and the
README and the site name only commands and options that exist.

- every command and each of its options and arguments (the click commands),
- every drift kind with its repair (envlock.base.drift_kinds.KINDS),
- every key a profile reader asks a table for (found in the readers' source, so a key added
  to a reader and not to the generator's example profiles fails here),
- every --json document kind with its schema number and fields (envlock.schema.DOCUMENTS,
  tests/json_shapes.py),
- every exit status;

and in every code block and inline command of the README and docs/: `envlock NAME` names a
command, each `--option` one of its options, and what a transcript shows under an envlock
command is a message the code can print (each line matches one of the code's strings or
f-strings; a drift row names a declared kind)."""

from __future__ import annotations

import ast
import re
import shlex
from functools import cache
from pathlib import Path
from typing import Any

import click
import pytest

from envlock import schema
from envlock.base.drift_kinds import KIND, KINDS
from envlock.cli_group import cli
from envlock.commands import COMMANDS
from tests.json_shapes import SHAPES
from tests.transcripts import (
    NOT_RUN,
    README,
    REPO,
    bare,
    code_blocks,
    commands_and_outputs,
    console_blocks,
    doc_pages,
    reference_generator,
)

PAGES = [README, *doc_pages()]
# Commands the pages misspell on purpose, to show what envlock says.
MISSPELT = {"chek"}
READERS = [
    *sorted((REPO / "envlock" / "profile").glob("*.py")),
    *sorted((REPO / "envlock" / "targets").glob("*.py")),
    REPO / "envlock" / "proxmox" / "settings.py",
    REPO / "envlock" / "docker" / "settings.py",
]
TABLE_READS = {"string", "text", "integer", "boolean", "strings", "texts", "table", "raw"}


@cache
def pages() -> dict[str, str]:
    return reference_generator().pages()


def commands() -> dict[str, click.Command]:
    ctx = click.Context(cli, info_name="envlock")
    found = {name: cli.get_command(ctx, name) for name in COMMANDS}
    return {name: command for name, command in found.items() if command is not None}


def section(page: str, heading: str) -> str:
    """The text under `## heading` up to the next `## `."""
    text = pages()[page]
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


# -- the reference names everything ----------------------------------------------------------
def test_every_command_and_option_is_in_the_reference() -> None:
    assert set(commands()) == set(COMMANDS)
    for name, command in commands().items():
        text = section("commands.md", f"`envlock {name}`")
        for param in params_of(command):
            if isinstance(param, click.Argument):
                assert f"`{param.human_readable_name}`" in text, (name, param.name)
            elif param.name != "verbose":
                for opt in [*param.opts, *param.secondary_opts]:
                    assert f"`{opt}`" in text, (name, opt)


def test_every_drift_kind_is_in_the_reference_with_its_repair() -> None:
    rows = {
        m.group(1): line
        for line in pages()["drift-kinds.md"].splitlines()
        if (m := re.match(r"\| \d+ \| `([a-z-]+)` \|", line))
    }
    assert list(rows) == [kind.name for kind in KINDS]  # the report's order too
    for kind in KINDS:
        assert f"`{kind.repair.value}`" in rows[kind.name], kind.name
        assert ("| yes |" if kind.blocks_run else "| no |") in rows[kind.name], kind.name


def keys_the_readers_ask_for() -> set[str]:
    """Every string literal passed as the key of a Table read in the readers' source."""
    keys = set()
    for path in READERS:
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            # t.text("host"), and the reader's own helper: self.path_value(t, "root", …)
            at = {**dict.fromkeys(TABLE_READS, 0), "path_value": 1}.get(node.func.attr)
            if at is None or len(node.args) <= at:
                continue
            key = node.args[at]
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                keys.add(key.value)
    return keys


def test_every_profile_key_is_in_the_reference() -> None:
    text = pages()["profile.md"]
    documented = {m.rsplit(".", 1)[-1] for m in re.findall(r"^\| `([^`]+)` \|", text, re.M)}
    from envlock.profile.read import _ProfileReader

    asked = keys_the_readers_ask_for() - set(_ProfileReader.TABLES)  # (read as tables)
    assert {"name", "api-url", "vmids", "keep-snapshots", "pass-env", "build", "dest"} <= asked
    assert asked - documented == set(), "add the key to docs/gen_reference.py's examples"
    tables = set(re.findall(r"^## `\[([a-z]+)\]`", text, re.M))
    assert tables == set(_ProfileReader.TABLES)


def test_every_json_document_is_in_the_reference() -> None:
    assert set(SHAPES) == set(schema.DOCUMENTS)
    for kind, number in schema.DOCUMENTS.items():
        text = section("json.md", f"`{kind}`")
        assert f'`"schema": {number}`' in text, kind
        required, optional = SHAPES[kind]
        for name in [*required, *optional]:
            assert f"| `{name}` |" in text, (kind, name)


def test_every_exit_status_is_in_the_reference() -> None:
    text = pages()["exit-codes.md"]
    documented = {int(code) for code in re.findall(r"^\| (\d+) \|", text, re.M)}
    assert documented == set(reference_generator().exit_codes())
    assert {0, 1, 2, 3, 126, 127, 130} <= documented


# -- the pages name only what exists ----------------------------------------------------------
def envlock_lines() -> list[tuple[Path, str]]:
    """Every `envlock …` command line of the pages' code blocks and inline code."""
    found = []
    for page in PAGES:
        for lang, lines in code_blocks(page):
            if lang in ("python", "toml", "json"):
                continue
            for line in lines:
                line = line.removeprefix("$ ").strip()
                if line.startswith("envlock "):
                    found.append((page, line))
        text = re.sub(r"^( *)```.*?^\1```", "", page.read_text(), flags=re.M | re.S)
        found += [(page, m) for m in re.findall(r"`(envlock [^`]+)`", text)]
    return found


def words_of(line: str) -> list[str]:
    """The command's own words: no comment, nothing after `--` or a pipe, no placeholders'
    brackets (`[--to N]`)."""
    line = re.sub(r"\s+#.*$", "", line)
    line = re.split(r"\s(?:--|\||>|&&)(?:\s|$)", line)[0]
    try:
        words = shlex.split(line)
    except ValueError:
        words = line.split()
    return [w.strip("[]()…,;") for w in words]


def options_of(command: click.Command) -> set[str]:
    return {opt for p in params_of(command) for opt in [*p.opts, *p.secondary_opts]}


def params_of(command: click.Command) -> list[click.Parameter]:
    """What `envlock NAME --help` lists: a command may add its own (init's target options)."""
    ctx = click.Context(command, info_name=command.name)
    return [p for p in command.get_params(ctx) if p.name != "help"]


def unknown_names(lines: list[tuple[str, str]]) -> tuple[list[str], int]:
    """What the command lines (each with the page it is on) name that envlock does not
    have, and how many lines were checked."""
    known = commands()
    group_options = options_of(cli) | {"--version"}
    unknown, checked = [], 0
    for where, line in lines:
        words = words_of(line)[1:]
        while words and words[0] in group_options:
            words = words[1:]
        if not words or not re.fullmatch(r"[a-z]+", words[0]) or words[0] in MISSPELT:
            continue  # `envlock --version`, or prose such as `envlock … PROFILE`
        if words[0] not in known:
            unknown.append(f"{where}: `{line}`: no command {words[0]!r}")
            continue
        allowed = options_of(known[words[0]]) | group_options
        for word in words[1:]:
            option = word.split("=", 1)[0]
            if re.fullmatch(r"--?[a-zA-Z][\w-]*", option) and option not in allowed:
                unknown.append(f"{where}: `{line}`: {words[0]} has no {option}")
        checked += 1
    return unknown, checked


def test_the_pages_name_only_commands_and_options_that_exist() -> None:
    lines = [(str(page.relative_to(REPO)), line) for page, line in envlock_lines()]
    unknown, checked = unknown_names(lines)
    assert unknown == []
    assert checked > 100  # the pages' commands were found


def test_the_name_check_finds_what_does_not_exist() -> None:
    planted = [
        "envlock chekc train.toml",
        "envlock check --stricter train.toml",
        "envlock rollback PROFILE [--to N] [--resync [--deep]]",
        "envlock run train.toml --allow-drift -- python train.py --lr 3e-4",
    ]
    unknown, checked = unknown_names([("p.md", line) for line in planted])
    assert unknown == [
        "p.md: `envlock chekc train.toml`: no command 'chekc'",
        "p.md: `envlock check --stricter train.toml`: check has no --stricter",
    ]
    assert checked == 3


@cache
def message_patterns() -> tuple[re.Pattern[str], ...]:
    """Every line of every string and f-string of envlock's source as a pattern (an
    f-string's values as `.+?`; rich's markup left out)."""
    patterns: dict[str, None] = {}

    def add(parts: list[str], words: str) -> None:
        # Not `f"{a} {b}"`, which matches anything; `f"{a} → {b}"` is a change's shape.
        if len(re.sub(r"\s", "", words)) >= 2 or "→" in words:
            patterns["".join(parts)] = None

    for path in sorted((REPO / "envlock").rglob("*.py")):
        tree = ast.parse(path.read_text())
        inner: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.JoinedStr):
                parts: list[str] = []
                words = ""
                for value in node.values:
                    inner.add(id(value))
                    if not isinstance(value, ast.Constant):
                        parts.append(".+?")
                        continue
                    *done, last = unmarked(value.value).split("\n")
                    for piece in done:  # a line ends inside the literal
                        add([*parts, re.escape(piece)], words + piece)
                        parts, words = [], ""
                    parts.append(re.escape(last))
                    words += last
                add(parts, words)
        for node in ast.walk(tree):
            plain = isinstance(node, ast.Constant) and isinstance(node.value, str)
            if plain and id(node) not in inner:
                for piece in unmarked(node.value).split("\n"):
                    patterns[re.escape(piece)] = None
    return tuple(re.compile(p) for p in patterns)


STYLE = re.compile(r"\[/\]|\[/?(?:(?:bold|dim|italic|red|green|yellow|cyan|blue|magenta) ?)+\]")


def unmarked(text: str) -> str:
    """Without rich's style markup (`[green]`, `[/]`), which never reaches a pipe."""
    return STYLE.sub("", text)


def printable(line: str) -> bool:
    """A line envlock can print: one of its messages, as is or after ui's prefix
    (`✓ `, `error: `, `warning: `, envlock/ui.py), a plan's numbering (`  2. `,
    envlock/commands/common.py) or a question's ` [y/N]: n` (click's, with the answer)."""
    variants = {line.rstrip(), line.strip()}
    variants |= {re.sub(r"^(✓|error:|warning:|\d+\.) ", "", v) for v in variants}
    variants |= {re.sub(r" \[y/N\]: [yn]?$", "", v) for v in variants}  # click's question
    return any(p.fullmatch(v) for p in message_patterns() for v in variants)


def transcript_outputs(only_not_run: bool = False) -> list[tuple[str, str, str]]:
    """(command, the line it printed, "") for every envlock command of the console
    transcripts (but `run`, which prints what its command prints); `only_not_run`: of those
    that no test runs (NOT_RUN), whose lines no run compares."""
    found = []
    for block in console_blocks(*PAGES):
        if only_not_run and bare(block[0]) not in NOT_RUN:
            continue
        for command, output in commands_and_outputs(block):
            if command.startswith("envlock ") and not command.startswith("envlock run "):
                found += [(command, line, "") for line in output]
    return found


def test_transcripts_show_messages_the_code_prints() -> None:
    assert transcript_outputs(only_not_run=True)
    for command, line, _ in transcript_outputs(only_not_run=True):
        text = line.strip()
        if text in ("", "…", "…the same report…"):
            continue
        assert printable(line), f"$ {command}\n{line}\nis no message of envlock's code"


def test_the_message_check_refuses_a_made_up_line() -> None:
    assert printable("✗ 2 drift item(s)")
    assert not printable("all good, nothing drifted at all")


def test_drift_rows_name_declared_kinds() -> None:
    rows = 0
    for command, line, _ in transcript_outputs():
        if not re.match(r"envlock check\b", command):
            continue
        match = re.match(r"([a-z][a-z0-9]*(?:-[a-z0-9]+)*)\s{2,}\S", line)
        if match:
            assert match.group(1) in KIND, f"$ {command}\n{line}: no such drift kind"
            rows += 1
    assert rows >= 7


@pytest.mark.parametrize("name", ["commands.md", "drift-kinds.md", "profile.md", "json.md"])
def test_the_reference_pages_say_they_are_generated(name: str) -> None:
    text: Any = pages()[name]
    assert text.startswith(reference_generator().GENERATED)
