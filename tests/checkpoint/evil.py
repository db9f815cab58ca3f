"""A class whose unpickling runs code: it creates a marker file (proof that something executed)."""

from __future__ import annotations

from pathlib import Path


def touch_marker(path: str) -> str:
    Path(path).touch()
    return "code ran"


class Evil:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return touch_marker, (self.marker,)
