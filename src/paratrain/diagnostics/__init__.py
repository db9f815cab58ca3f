"""diagnostics layer."""
