"""Guarded edits (`add`, `remove`): a candidate lock resolved beside the current one (guard)
and what it changes (changes)."""
