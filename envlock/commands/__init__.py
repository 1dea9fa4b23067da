"""The commands, one module each; COMMANDS names them for the CLI and its tests."""

# name -> module under envlock.commands defining a click command named `command`.
COMMANDS = {
    "init": "init",
    "lock": "lock",
    "plan": "plan",
    "apply": "apply",
    "check": "check",
    "run": "run",
    "rollback": "rollback",
    "generations": "generations",
    "gc": "gc",
    "snapshot": "snapshot",
    "diff": "diff",
    "inspect": "inspect",
    "data": "data",
    "cache": "cache",
    "add": "add",
    "remove": "remove",
    "bisect": "bisect",
}
