"""The reconciler: gather the target state, compute drift, plan, execute, verify."""
