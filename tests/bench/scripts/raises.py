"""A method that crashes at once (before importing torch, so it is quick even on a loaded machine)."""

raise RuntimeError("boom: this method always fails")
