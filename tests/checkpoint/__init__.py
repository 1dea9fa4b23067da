"""inspect and diff: checkpoints made by real libraries, hostile ones, snapshots compared."""
