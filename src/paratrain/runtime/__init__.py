"""Inside each worker: process group, device, seeds, and the user-facing Runtime."""
