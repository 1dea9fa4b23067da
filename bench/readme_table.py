"""Regenerate the speed table of the site's Benchmarks page from bench/results/*.json
(`make bench` runs this last).

    python bench/readme_table.py [--check]

The table sits between the markers below in docs/benchmarks.md (it was the README's, hence
the name); everything else there is prose.
--check exits 1 when the page's table is not what the results say (nothing written).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
README = REPO / "docs" / "benchmarks.md"  # the page the table is on
START = "<!-- bench:speed:start (bench/readme_table.py writes this table) -->"
END = "<!-- bench:speed:end -->"


def load(name: str) -> dict[str, Any] | None:
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def extra_rows() -> list[dict[str, Any]]:
    """Rows the other benchmarks measure, held to the same issue's goals."""
    rows = []
    remote = load("remote")
    if remote and "check_warm_s" in remote:
        rows.append(
            {
                "operation": "remote check, warm ssh master (proxmox-lxc, loopback)",
                "envlock": f"{remote['check_warm_s']:.3f} s",
                "baseline": "`ssh … pct exec … uv pip freeze` "
                f"{remote['hand_written_freeze_s']:.3f} s",
                "ratio": f"{remote['check_warm_s'] / remote['hand_written_freeze_s']:.2f}×",
                "goal": "≤ 0.35 s",
                "met": remote["check_warm_s"] <= 0.35,
            }
        )
    if remote and "run_warm_s" in remote:
        by_hand = remote["hand_written_python_s"]
        rows.append(
            {
                "operation": "remote `run -- python -c pass`, warm ssh master (proxmox-lxc)",
                "envlock": f"{remote['run_warm_s']:.3f} s, "
                f"{remote['run_warm_round_trips']:.0f} round trip(s)",
                "baseline": f"`ssh … 'pct exec … -- /opt/venv/bin/python -c pass'` {by_hand:.3f} s",
                "ratio": f"{remote['ratio_run_vs_python']:.2f}×",
                "goal": "1 round trip, ≤ 1.3×",
                "met": remote["run_warm_round_trips"] == 1 and remote["ratio_run_vs_python"] <= 1.3,
            }
        )
        rows.append(
            {
                "operation": "remote check, warm ssh master, beside the same baseline",
                "envlock": f"{remote['check_paired_s']:.3f} s",
                "baseline": f"`ssh … 'pct exec … -- /opt/venv/bin/python -c pass'` {by_hand:.3f} s",
                "ratio": f"{remote['ratio_check_vs_python']:.2f}×",
                "goal": "≤ 1.2×",
                "met": remote["ratio_check_vs_python"] <= 1.2,
            }
        )
    fleet = load("fleet")
    if fleet and "slowest_alone_warm_s" in fleet:
        rows.append(
            {
                "operation": "fleet check, 3 containers on 2 nodes, `--jobs 3`, warm masters",
                "envlock": f"{fleet['fleet_jobs3_warm_s']:.3f} s",
                "baseline": "its slowest member checked alone (a profile of its own) "
                f"{fleet['slowest_alone_warm_s']:.3f} s",
                "ratio": f"{fleet['ratio_fleet_vs_slowest_alone']:.2f}×",
                "goal": "≤ 1.5×",
                "met": fleet["ratio_fleet_vs_slowest_alone"] <= 1.5,
            }
        )
    snapshot = load("snapshot")
    if snapshot and "api_s" in snapshot:
        rows.append(
            {
                "operation": "`envlock.snapshot()` in a training process",
                "envlock": f"{snapshot['api_s']:.3f} s",
                "baseline": f"`uv pip freeze` {snapshot['uv_pip_freeze_s']:.3f} s",
                "ratio": f"{snapshot['api_s'] / snapshot['uv_pip_freeze_s']:.1f}×",
                "goal": "≤ 0.10 s",
                "met": snapshot["api_s"] <= 0.10,
            }
        )
    data = load("data")
    if data and "fingerprint_s" in data:
        rows.append(
            {
                "operation": f"dataset fingerprint, {data['files']:,} files",
                "envlock": f"{data['fingerprint_s']:.3f} s",
                "baseline": f"`find -printf '%s %T@ %p'` {data['find_s']:.3f} s",
                "ratio": f"{data['fingerprint_vs_find']:.2f}×",
                "goal": "≤ 1.5×",
                "met": data["fingerprint_vs_find"] <= 1.5,
            }
        )
        rows.append(
            {
                "operation": "`envlock data --deep` throughput",
                "envlock": f"{data['deep_mb_s']:.0f} MB/s",
                "baseline": f"`sha256sum` {data['sha256sum_mb_s']:.0f} MB/s",
                "ratio": f"{data['deep_vs_sha256sum_throughput']:.2f}×",
                "goal": "≥ 1×",
                "met": data["deep_vs_sha256sum_throughput"] >= 1,
            }
        )
    weights = load("weights")
    if weights and "weights_vs_sha256sum" in weights:
        sha = weights["results"]["sha256sum"]["seconds"]
        rows.append(
            {
                "operation": "`diff --weights` of two "
                f"{weights['checkpoint_bytes'] / 1e6:.0f} MB checkpoints",
                "envlock": f"{weights['results']['envlock diff --weights']['seconds']:.2f} s",
                "baseline": f"`sha256sum` of the same files {sha:.2f} s",
                "ratio": f"{weights['weights_vs_sha256sum']:.2f}×",
                "goal": f"≤ {weights['goal_ratio_max']}×",
                "met": weights["met"],
            }
        )
    config = load("config")
    if config and "rss_vs_torch" in config:
        ours = config["results"]["envlock diff"]
        torch = config["results"]["torch.load + dict compare"]
        rows.append(
            {
                "operation": f"`diff` of two configs of {config['keys']:,} keys "
                f"({config['file_bytes'] / 1e6:.1f} MB files), naming the changed key",
                "envlock": f"{ours['seconds']:.2f} s, {ours['peak_rss_mb']:.0f} MB",
                "baseline": f"`torch.load` both + dict compare {torch['seconds']:.2f} s, "
                f"{torch['peak_rss_mb']:.0f} MB",
                "ratio": f"{1 / torch['time_vs_envlock']:.2f}× time, "
                f"{config['rss_vs_torch']:.2f}× RSS",
                "goal": f"≤ {config['goals']['seconds_max']:.0f} s, RSS ≤ torch's",
                "met": config["goals"]["met"],
            }
        )
    durable = load("durability")
    if durable and "writer_envlock_s" in durable:
        rows.append(durability_row(durable))
    return rows


def durability_row(durable: dict[str, Any]) -> dict[str, Any]:
    """syncfs() against syncing only the generation's own files, while another process
    writes `writer_gb` GB to the same file system (issue 41: the one faster there is kept)."""
    gb = f"{durable['writer_gb']:g} GB"
    return {
        "operation": f"making a {durable['files']:,}-file generation durable, another "
        f"process writing {gb} meanwhile (idle in brackets)",
        "envlock": f"syncfs {durable['writer_envlock_s'] * 1000:.0f} ms "
        f"({durable['idle_envlock_s'] * 1000:.0f} ms)",
        "baseline": f"its own files only (fdatasync, dirs) {durable['writer_own_data_s']:.2f} s "
        f"({durable['idle_own_data_s']:.2f} s); fsync of each "
        f"{durable['writer_fsync_each_s']:.2f} s ({durable['idle_fsync_each_s']:.2f} s)",
        "ratio": f"{fastest_own_files(durable):.3f}×",
        "goal": "≤ 1× the fastest way of syncing only its files, under the writer",
        "met": fastest_own_files(durable) <= 1,
    }


def fastest_own_files(durable: dict[str, Any]) -> float:
    """envlock's time under the writer over the fastest way that syncs only the tree."""
    alone = min(durable["writer_own_data_s"], durable["writer_fsync_each_s"])
    return float(durable["writer_envlock_s"] / alone)


def table() -> str:
    reconcile = load("reconcile")
    rows = list(reconcile["rows"]) if reconcile and "rows" in reconcile else []
    rows += extra_rows()
    lines = [
        "| operation | envlock | baseline (same run) | ratio | goal |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        verdict = "**met**" if row["met"] else "missed"
        lines.append(
            f"| {row['operation']} | {row['envlock']} | {row['baseline']} | {row['ratio']} "
            f"| {row['goal']}: {verdict} |"
        )
    return "\n".join(lines)


def main() -> int:
    text = README.read_text()
    if START not in text or END not in text:
        print(f"{README.relative_to(REPO)} has no {START} … {END} block", file=sys.stderr)
        return 1
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    updated = f"{head}{START}\n{table()}\n{END}{tail}"
    if "--check" in sys.argv[1:]:
        return 0 if updated == text else 1
    README.write_text(updated)
    return 0


if __name__ == "__main__":
    sys.exit(main())
