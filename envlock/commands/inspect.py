"""`envlock inspect PATH`: a checkpoint's keys, shapes, parameter counts and config, torch-free."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from envlock import ui
from envlock.base.limits import command_budget
from envlock.checkpoint.formats import advertised
from envlock.checkpoint.reader import inspect_checkpoint
from envlock.checkpoint.summary import bounded_lists, summary
from envlock.commands.common import json_option
from envlock.errors import EnvlockError

if TYPE_CHECKING:
    from rich.table import Table
    from rich.tree import Tree


KIND = "inspect"


@dataclass(frozen=True)
class InspectResult:
    """A checkpoint's bounded summary (checkpoint/summary.py builds and types its rows),
    and the --keys pattern when only the matching tensors were asked for."""

    report: dict[str, Any]
    pattern: str | None = None

    code = 0  # a checkpoint that cannot be read is an error, never a result

    def to_json(self) -> dict[str, Any]:
        return self.report


def inspect_of(path: Path, *, pattern: str | None, follow_links: bool) -> InspectResult:
    """The one producer of inspect's result: read within the command's budget, summed up."""
    with command_budget("inspect"):  # every file read shares it (limits.py's BUDGET)
        report = summary(inspect_checkpoint(path, follow_links=follow_links), pattern)
        return InspectResult(bounded_lists(report), pattern)


def render_text(result: InspectResult) -> None:
    if result.pattern is not None:  # the rows asked for, not the whole report before them
        _print_keys(result.pattern, result.report["keys"])
    else:
        render(result.report)


HELP = f"""Show a checkpoint's keys, tensor shapes, dtypes, parameter counts, sizes and config.

    PATH is {", ".join(advertised())} or a directory holding them. Nothing in the checkpoint is
    executed and torch is not needed; reading stays within fixed limits of time and memory,
    and inside the checkpoint's directory unless --follow-links is given.
    """  # the formats are formats.py's rows


@click.command("inspect", help=HELP)
@click.argument("path", type=click.Path(path_type=Path), metavar="PATH")
@json_option
@click.option(
    "--keys",
    "pattern",
    metavar="PATTERN",
    help="Detail the tensors whose dotted key matches this glob, e.g. 'model*.layers.0.*'.",
)
@click.option(
    "--follow-links",
    is_flag=True,
    help="Read symlinks and index shards that lead outside the checkpoint's directory.",
)
def command(path: Path, as_json: bool, pattern: str | None, follow_links: bool) -> None:
    result = inspect_of(path, pattern=pattern, follow_links=follow_links)
    if as_json:
        ui.emit_json(KIND, result.to_json())
    else:
        render_text(result)


inspect_cmd = command  # its name before every command's was `command`


def render(data: dict[str, Any]) -> None:
    """Print an inspect report for people: its totals, its tables, then its config,
    structure and notes."""
    _print_totals(data)
    _print_tables(data)
    _print_tail(data)


def _print_totals(data: dict[str, Any]) -> None:
    out = ui.out
    size, tensors = data["size"], data["tensors"]
    out.print(
        f"[bold]{ui.untrusted(data['path'])}[/]  ({data['format']}, {len(data['files'])} file(s))"
    )
    out.print(
        f"size {ui.size(size['total_bytes'])}: tensors {ui.size(size['tensor_bytes'])} "
        f"({_pct(size['tensor_bytes'], size['total_bytes'])}), "
        f"other {ui.size(size['other_bytes'])}"
    )
    out.print(
        f"{tensors['count']} tensors in {tensors['storages']} storages: "
        f"{_count(tensors['params'])} parameters and buffers" + _state(tensors["state"])
    )
    if data["progress"]:
        out.print("  ".join(f"{k} [bold]{v}[/]" for k, v in data["progress"].items()))
    if data["suspicious_globals"]:
        names = _listed(data["suspicious_globals"])
        out.print(f"[bold red]⚠ code-running globals, described and not executed:[/] {names}")


def _print_tables(data: dict[str, Any]) -> None:
    out = ui.out
    if data["sections"]:
        out.print(_sections_table(data["sections"], data["size"]["total_bytes"]))
    for section in data["sections"]:
        if len(section["prefixes"]) > 1:
            out.print(_prefix_table(section))
    if data["tensors"]["dtypes"]:
        out.print(_dtype_table(data["tensors"]["dtypes"]))
    for title, rows in (("first tensors", data["first"]), ("largest tensors", data["largest"])):
        if rows:
            out.print(_tensor_table(title, rows))
    if data["shared_storage"]:
        out.print(_shared_table(data["shared_storage"]))


def _print_tail(data: dict[str, Any]) -> None:
    out = ui.out
    if data["config"]:
        out.print(_config_tree(data["config"]))
    out.print(_structure_tree(data["structure"]))
    if data["stubbed_globals"]:
        names = _listed(data["stubbed_globals"])
        out.print(f"[dim]objects described, not executed: {names}[/]")
    for note in data["notes"]:
        out.print(f"[yellow]note:[/] {ui.untrusted(note)}")


_STATE_WORDS = {
    "optimizer": "optimizer-state elements",
    "rng": "RNG-state elements",
    "other": "other training-state elements",
    "duplicate": "elements in duplicate copies of the weights (not counted)",
}


def _state(state: dict[str, int]) -> str:
    """What the tensors hold besides parameters, each kind counted apart."""
    return "".join(f", {_count(n)} {_STATE_WORDS[k]}" for k, n in state.items() if n)


def _print_keys(pattern: str, rows: list[dict[str, Any]]) -> None:
    if not rows:
        ui.out.print(f"[yellow]no tensor key matches '{ui.untrusted(pattern)}'[/]")
        return
    ui.out.print(_tensor_table(ui.untrusted(f"{len(rows)} tensor(s) matching {pattern!r}"), rows))


def _table(title: str, *columns: str) -> Table:
    from rich.table import Table  # only for people: --json skips the import

    table = Table(title=title, title_justify="left", header_style="bold", box=None)
    for i, column in enumerate(columns):
        numeric = column in ("tensors", "elements", "numel", "bytes", "of total")
        table.add_column(
            column, justify="right" if numeric else "left", no_wrap=i == 0, overflow="fold"
        )
    return table


def _sections_table(sections: list[dict[str, Any]], total: int) -> Table:
    table = _table("sections", "key", "kind", "tensors", "elements", "bytes", "of total", "dtypes")
    for s in sections:
        dtypes = ui.untrusted(", ".join(f"{k}×{v}" for k, v in s["dtypes"].items()))
        table.add_row(
            ui.untrusted(s["key"] or "(top level)"),
            s["kind"],
            str(s["tensors"]),
            _count(s["numel"]),
            ui.size(s["bytes"]),
            _pct(s["bytes"], total),
            dtypes,
        )
    return table


def _prefix_table(section: dict[str, Any]) -> Table:
    table = _table(
        ui.untrusted(f"top-level prefixes of {section['key'] or '(top level)'}"),
        "prefix",
        "tensors",
        "elements",
    )
    rows = sorted(section["prefixes"], key=lambda p: -p["numel"])
    for p in rows[:20]:
        table.add_row(ui.untrusted(p["prefix"]), str(p["tensors"]), _count(p["numel"]))
    if len(rows) > 20:
        table.add_row(f"… {len(rows) - 20} more", "", "")
    return table


def _dtype_table(dtypes: dict[str, dict[str, int]]) -> Table:
    table = _table("dtypes", "dtype", "tensors", "elements", "bytes")
    for name, d in dtypes.items():
        table.add_row(ui.untrusted(name), str(d["count"]), _count(d["numel"]), ui.size(d["bytes"]))
    return table


def _tensor_table(title: str, rows: list[dict[str, Any]]) -> Table:
    table = _table(title, "key", "dtype", "shape", "numel", "bytes")
    for r in rows:
        key, dtype = ui.untrusted(r["key"]), ui.untrusted(_dtype(r))
        table.add_row(key, dtype, _shape(r["shape"]), _count(r["numel"]), ui.size(r["bytes"]))
    return table


def _dtype(tensor: dict[str, Any]) -> str:
    """A tensor's dtype, with its layout and quantization when it is not a plain one."""
    kind = [tensor[k] for k in ("layout", "qscheme") if tensor.get(k) not in (None, "strided")]
    return f"{tensor['dtype']} ({', '.join(kind)})" if kind else tensor["dtype"]


def _shape(shape: list[int | None]) -> str:
    # None: a dim that varies per component of a nested tensor.
    return "[" + ", ".join("*" if d is None else str(d) for d in shape) + "]"


def _shared_table(shared: list[dict[str, Any]]) -> Table:
    table = _table(
        "storages shared by several keys (tied weights or views of one tensor; elements and "
        "bytes counted once)",
        "keys",
        "bytes",
    )
    for s in shared:
        table.add_row(_listed(s["keys"]), ui.size(s["bytes"]))
    return table


def _listed(names: list[str], shown: int = 20) -> str:
    """Names from the file, escaped; a long list cut after `shown` of them."""
    text = ui.untrusted(", ".join(names[:shown]))
    return text + (f", … {len(names) - shown} more" if len(names) > shown else "")


def _config_tree(config: dict[str, Any]) -> Tree:
    from rich.tree import Tree

    tree = Tree("[bold]config[/]")
    for name, value in config.items():
        _add_plain(tree.add(ui.untrusted(name)), value)
    return tree


def _add_plain(node: Tree, value: Any) -> None:
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else None
    )
    if items is None or (
        isinstance(value, list) and all(not isinstance(v, dict | list) for v in value)
    ):
        node.label = f"{node.label} = {ui.untrusted(json.dumps(value))}"
        return
    for key, item in items:
        _add_plain(node.add(ui.untrusted(str(key))), item)


def _structure_tree(node: dict[str, Any]) -> Tree:
    from rich.tree import Tree

    tree = Tree("[bold]structure[/]")
    _add_node(tree, "(root)", node)
    return tree


def _add_node(parent: Tree, key: str, node: dict[str, Any]) -> None:
    if node["type"] == "tensor":
        dtype = ui.untrusted(_dtype(node))
        parent.add(f"{ui.untrusted(key)}: tensor {dtype} {_shape(node['shape'])}")
        return
    if "value" in node:
        value = ui.untrusted(json.dumps(node["value"]))
        parent.add(f"{ui.untrusted(key)}: {ui.untrusted(node['type'])} = {value}")
        return
    label = f"{ui.untrusted(key)}: {ui.untrusted(node['type'])}[{node['len']}]"
    if node["tensors"]:
        label += (
            f" [dim]{node['tensors']} tensors{' (state dict)' if node.get('state_dict') else ''}[/]"
        )
    branch = parent.add(label)
    for child_key, child in node.get("children", {}).items():
        _add_node(branch, child_key, child)
    if node.get("more"):
        branch.add(f"[dim]… {node['more']} more[/]")


def _count(n: int) -> str:
    return f"{n:,}"


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


def main(argv: list[str] | None = None) -> int:
    """Run `inspect` on its own (python -m envlock.commands.inspect), with the CLI's exit codes."""
    try:
        command.main(argv, prog_name="envlock inspect", standalone_mode=False)
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except EnvlockError as exc:
        ui.error(str(exc))
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
