"""Converging targets: one target (converge) and many (fleet), on top of reconcile/."""
