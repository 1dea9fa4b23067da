"""The target-side agent: stdlib-only modules shipped to a target and run there."""
