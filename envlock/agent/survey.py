"""The agent's survey: what an existing venv holds, read from its files alone (`init --from`).

Nothing from the environment runs: not its interpreter, not its site-packages. The
interpreter's version comes from pyvenv.cfg, distributions from their METADATA headers,
where each came from from INSTALLER and direct_url.json (PEP 610)."""

import os

if "__envlock_agent__" not in globals():  # in the repository; shipped, one namespace
    from envlock.agent.core import COMMANDS, UnsafeFile, open_untrusted, read_json
    from envlock.agent.files import canonical, site_packages
    from envlock.agent.probe import installed_distributions, torch_build

# What a survey reads of one distribution, and how much: a hostile METADATA cannot flood it.
MAX_DISTRIBUTIONS = 5000
MAX_FIELD = 400


def survey(req):
    """A venv that is not one (or too big to read) is a `problem`: the user's input, not a
    failure of the target."""
    venv = req["venv"]
    config = pyvenv_cfg(os.path.join(venv, "pyvenv.cfg"), venv)
    if config is None:
        return {"problem": f"{venv} is not a venv (no pyvenv.cfg)"}
    site = site_packages(venv)
    if site is None:
        return {"problem": f"{venv} has no lib/python*/site-packages"}
    dists = installed_distributions(site)
    if len(dists) > MAX_DISTRIBUTIONS:
        return {"problem": f"{venv} holds over {MAX_DISTRIBUTIONS} distributions"}
    origins = distribution_origins(site)
    return {
        "venv": venv,
        "real_venv": os.path.realpath(venv),
        "is_link": os.path.islink(venv),
        "managed": os.path.isfile(os.path.join(venv, ".envlock", "generation.json")),
        "python": {
            "version": config.get("version_info") or config.get("version") or "",
            "home": config.get("home", ""),
            "site": os.path.relpath(site, venv),
            **base_interpreter(config),
        },
        "torch": torch_build(dists, site),
        "distributions": {
            name: {
                "version": clip(info["version"]),
                "requires": [clip(r) for r in info["requires"][:200]],
                "installer": origins.get(name, {}).get("installer"),
                "direct_url": origins.get(name, {}).get("direct_url"),
            }
            for name, info in dists.items()
        },
    }


def gated_text(path, limit, within):
    """The text of `path` through the gate (a regular file of at most `limit` bytes inside
    `within`: a FIFO must not hang the survey, a link to /dev/zero or to a root-only file
    elsewhere must not be read), or None."""
    try:
        with open_untrusted(path, limit, within) as handle:
            return handle.read(limit).decode("utf-8", errors="replace")
    except (OSError, UnsafeFile):
        return None


def pyvenv_cfg(path, venv):
    """pyvenv.cfg's keys (`home`, `version_info` or `version`), or None when there is none."""
    text = gated_text(path, 64 * 1024, venv)
    if text is None:
        return None
    found = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            found[key.strip().lower()] = clip(value.strip())
    return found


def base_interpreter(config):
    """The venv's base interpreter (pyvenv.cfg's home + pythonX.Y) and whether this machine
    has it: a venv made elsewhere, or whose Python was removed, has not (nothing is run)."""
    version = (config.get("version_info") or config.get("version") or "").split(".")
    home = config.get("home", "")
    if not home or len(version) < 2:
        return {}
    path = os.path.join(home, f"python{version[0]}.{version[1]}")
    return {"interpreter": path, "interpreter_exists": os.path.exists(path)}


def distribution_origins(site):
    """Per distribution: its INSTALLER (pip, uv, …) and its direct_url.json when it was
    installed from a path, a URL or a VCS rather than an index."""
    found = {}
    for entry in os.listdir(site):
        if not entry.endswith(".dist-info"):
            continue
        name = canonical(entry[: -len(".dist-info")].rsplit("-", 1)[0])
        info = os.path.join(site, entry)
        installer = gated_text(os.path.join(info, "INSTALLER"), 200, site)
        installer = None if installer is None else clip(installer.strip())
        direct = read_json(os.path.join(info, "direct_url.json"), within=site)
        found[name] = {"installer": installer, "direct_url": direct_url(direct)}
    return found


def direct_url(data):
    """PEP 610's record, reduced to what `init` says: where from, and whether editable."""
    if not isinstance(data, dict) or not isinstance(data.get("url"), str):
        return None
    kind = "vcs" if "vcs_info" in data else "archive" if "archive_info" in data else "dir"
    editable = bool(isinstance(data.get("dir_info"), dict) and data["dir_info"].get("editable"))
    return {"url": clip(data["url"]), "kind": kind, "editable": editable}


def clip(text):
    text = str(text)
    return text if len(text) <= MAX_FIELD else text[:MAX_FIELD] + "…"


COMMANDS["survey"] = survey
