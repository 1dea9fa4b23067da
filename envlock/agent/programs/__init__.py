"""Programs that run alone on a target, each in an isolated interpreter (`python -I -S -c`,
envlock/base/pythons.py): the agent's bootstrap, the launcher of interactive runs and the
startup set's installer. Each is a module here plus the agent modules it names; what ships is
built from their source text (envlock/reconcile/agentcode.py: `program`), so the code that
runs is the code ruff, mypy and the tests read. Stdlib only, Python 3.8+."""
