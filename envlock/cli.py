"""The `envlock` command line: `main`, the one entry point (console script, `python -m`).

The click group and its error handling are in cli_group.py, loaded by `main` only after
commands/ahead.py has started the probe of a local `check` or `run`: click and the command's
modules load while the probe works (issue "Speed")."""

from __future__ import annotations

import signal
import sys
from importlib import import_module
from typing import Any

from envlock import ui
from envlock.commands import COMMANDS as COMMANDS  # the one list, read here too
from envlock.errors import EXIT_INTERRUPTED

# What cli_group.py defines, read through this module as before it was split off.
GROUP_NAMES = ("cli", "EnvlockGroup", "fail", "verbose_option")


def __getattr__(name: str) -> Any:
    if name in GROUP_NAMES:
        return getattr(import_module("envlock.cli_group"), name)
    raise AttributeError(f"module 'envlock.cli' has no attribute {name!r}")


def main() -> None:
    # A scheduler's SIGTERM stops envlock like Ctrl-C: the same message and status (130).
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        from envlock.base.inherited import decide_environment

        decide_environment()  # what envlock inherits is input (base/inherited.py)
        from envlock.commands.ahead import start_ahead

        start_ahead(sys.argv[1:])  # a local check's or run's probe, before click loads
        from envlock.cli_group import cli

        cli(prog_name="envlock")
    except KeyboardInterrupt:
        ui.error("interrupted: nothing changed")
        sys.exit(EXIT_INTERRUPTED)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
