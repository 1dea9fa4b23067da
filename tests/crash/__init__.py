"""Crashes, power cuts (LazyFS), interrupts and concurrent operations."""
