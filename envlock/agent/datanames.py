"""A dataset's name, as a profile's [data] and `envlock.snapshot(data=…)` allow it: one rule
for the profile's reader (profile/sources.py), the snapshot's check and its schema
(runs/snapshot_doc.py, runs/snapshot_schema.py).

Stdlib only, Python 3.8: the in-process API runs it in one namespace with
runs/snapshot_doc.py (startup/envlock_api), which the start-up set ships with the agent."""

import re

# Matched with fullmatch: "$" would also accept a value that ends in a newline.
DATA_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
