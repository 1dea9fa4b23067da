"""Tokenised-shard loading for the drafter run (envlock example script)."""

import glob


def shards(pattern: str = "/workspace/data/shard-*.bin") -> list[str]:
    return sorted(glob.glob(pattern))
