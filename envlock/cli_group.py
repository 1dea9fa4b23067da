"""The `envlock` click group (cli.py's `main` loads it after starting a local check's or
run's probe: commands/ahead.py); each command lives in envlock/commands/."""

from __future__ import annotations

import sys
from importlib import import_module
from typing import NoReturn

import click

from envlock import __version__, ui
from envlock.base.tomlread import suggest
from envlock.commands import COMMANDS
from envlock.errors import EXIT_INTERRUPTED, INTERRUPTED, EnvlockError


class EnvlockGroup(click.Group):
    """Loads commands lazily (fast start-up) and turns EnvlockError into exit codes (and,
    under --json, into the error document)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        module_name = COMMANDS.get(name)
        if module_name is None:
            return None
        module = import_module(f"envlock.commands.{module_name}")
        command: click.Command = getattr(module, "command", None) or getattr(
            module, f"{module_name}_cmd"
        )
        if not any(param.name == "verbose" for param in command.params):
            command.params.append(verbose_option())  # `-v` after the command works too
        return command

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # --json anywhere in the command's own arguments (not in a `run` command's, after
        # `--`): known before the command parses them, so even its usage errors are JSON.
        own = args[: args.index("--")] if "--" in args else args
        ui.JSON.asked, ui.JSON.emitted, ui.JSON.last_error = "--json" in own, False, None
        return super().parse_args(ctx, args)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else ""
        if name and not name.startswith("-") and name not in COMMANDS:
            # click's own suggestion sees only eagerly registered commands: none here.
            close = suggest(name, COMMANDS, what="commands") or ""
            ctx.fail(f"No such command {name!r}: {close.replace('`', '')}")
        return super().resolve_command(ctx, args)

    def invoke(self, ctx: click.Context) -> object:
        """Every error ends here, once: the message on stderr (always, for the person
        watching) and, under --json, one document on stdout with the same exit code."""
        try:
            return super().invoke(ctx)
        except EnvlockError as exc:
            if ctx.obj and ctx.obj.get("verbose"):
                import traceback

                traceback.print_exc()  # -v shows where; the exit code stays the contract's
            ui.error(str(exc))
            fail(exc.message, exc.hint, exc.exit_code, **exc.details)
        except click.ClickException as exc:  # a usage error: click's words, envlock's form
            if not ui.JSON.asked:
                raise
            exc.show()
            where = getattr(exc, "ctx", None)
            hint = f"see `{where.command_path} --help`" if where is not None else None
            fail(exc.format_message(), hint, exc.exit_code)
        except (KeyboardInterrupt, click.Abort):
            note = ctx.meta.get(INTERRUPTED, "nothing changed")
            message = f"interrupted: {note() if callable(note) else note}"
            ui.error(message)
            fail(message, None, EXIT_INTERRUPTED)
        except SystemExit as exc:
            # A command that said its error (ui.error) and exited: the same document.
            # Any other exit is a result (drift, a `run` command's own status): re-raised.
            if not exc.code or ui.JSON.last_error is None or not isinstance(exc.code, int):
                raise
            fail(ui.JSON.last_error, None, exc.code)


def fail(message: str, hint: str | None, code: int, **details: object) -> NoReturn:
    """Exit with `code`; under --json, first the error document (unless the command's own
    document is already out: stdout holds one document)."""
    if ui.JSON.asked and not ui.JSON.emitted:
        ui.emit_error(message, hint, code, **details)
    sys.exit(code)


@click.group(cls=EnvlockGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="envlock")
@click.option("-v", "--verbose", is_flag=True, help="Show tracebacks and the commands run.")
@click.pass_context
def cli(ctx: click.Context, verbose: bool) -> None:
    """Declared, locked, verifiable Python/CUDA environments for GPU training containers."""
    ctx.ensure_object(dict)
    ctx.obj["verbose"] = verbose


def verbose_option() -> click.Option:
    """The group's -v, accepted after the command name too (`envlock plan -v P`)."""

    def remember(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
        if value:
            ctx.ensure_object(dict)["verbose"] = True  # the group's obj: the same dict

    return click.Option(
        ["-v", "--verbose"],
        is_flag=True,
        expose_value=False,
        callback=remember,
        help="Show tracebacks and the commands run.",
    )
