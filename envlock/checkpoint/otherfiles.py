"""Every other file of a checkpoint directory, accounted for by a digest of its bytes.

A reader parses the weights (formats.py) and the run files (runfiles.py: config.json,
adapter_config.json, training_args.bin, ...); any other file beside them (a tokenizer's
vocabulary, Lightning's hparams.yaml, a framework's own sidecar) is compared by the sha256
of its bytes, streamed through the untrusted-bytes gate, so two runs whose sidecars differ
are never "identical". What passes the bounds (MAX_FILES, MAX_FILE_BYTES) is listed as not
compared, with why. YAML is digested, not parsed: envlock carries no YAML reader.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from envlock.base.limits import MiB, printable
from envlock.base.untrusted import open_untrusted

MAX_FILES = 1_000  # other files digested per directory
MAX_FILE_BYTES = 256 * MiB  # bytes of them digested per directory, all together
NAMED_SKIPPED = 10  # files not compared named one by one; the rest counted
MAX_LEVELS = 3  # folders below the directory looked into (Lightning's version_0/checkpoints/)


def other_files(
    directory: Path, read: set[Path], follow_links: bool
) -> tuple[dict[str, str], tuple[tuple[str, str], ...]]:
    """`{relative name: sha256}` of each file under `directory` that no reader read, and
    `(name, why)` of those not compared."""
    digests: dict[str, str] = {}
    skipped: list[tuple[str, str]] = []
    left = MAX_FILE_BYTES
    for path in _files(directory, read):
        name = printable(str(path.relative_to(directory)), 300)
        if len(digests) >= MAX_FILES:
            skipped.append((name, f"past {MAX_FILES:,} other files"))
            continue
        size = path.lstat().st_size
        if size > left:
            skipped.append((name, f"past {MAX_FILE_BYTES // MiB} MiB of other files digested"))
            continue
        left -= size
        digests[name] = _sha256(path, directory, follow_links)
    if len(skipped) > NAMED_SKIPPED:  # named up to a few, the rest counted
        rest = len(skipped) - NAMED_SKIPPED
        skipped = [*skipped[:NAMED_SKIPPED], (f"{rest:,} more files", skipped[-1][1])]
    return digests, tuple(skipped)


def _files(directory: Path, read: set[Path]) -> list[Path]:
    found: list[Path] = []
    level = [directory]
    for _ in range(MAX_LEVELS + 1):
        below: list[Path] = []
        for folder in level:
            for child in sorted(folder.iterdir()):
                if child.resolve() in read or child in read:
                    continue
                if child.is_dir() and not child.is_symlink():
                    below.append(child)
                elif os.path.lexists(child):
                    found.append(child)
        level = below
    return found


def _sha256(path: Path, directory: Path, follow_links: bool) -> str:
    digest = hashlib.sha256()
    with open_untrusted(path, "checkpoint", within=directory, follow_links=follow_links) as f:
        while chunk := f.read(MiB):
            digest.update(chunk)
    return digest.hexdigest()
