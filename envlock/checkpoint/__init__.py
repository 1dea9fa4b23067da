"""Checkpoints read as hostile data: a restricted unpickler, readers, summaries."""
