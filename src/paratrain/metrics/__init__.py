"""metrics layer."""
