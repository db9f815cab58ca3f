"""A run directory's file opened by paratrain is a regular file of its own, or refused in one line.

Real files: a symbolic link, a FIFO (no reader: opening it to write failed with ENXIO, a traceback;
to read it would block) and a directory planted under a file's name are each refused with the
:class:`ConfigError` that names the path; a regular file opens and stays blocking.
"""

from __future__ import annotations

import os

import pytest

from paratrain.errors import ConfigError
from paratrain.no_follow import open_text


@pytest.mark.parametrize("mode", ["r", "a", "w"])
def test_only_a_regular_file_is_opened(tmp_path, mode):
    target = tmp_path / "victim.txt"
    target.write_text("precious\n")
    (tmp_path / "link").symlink_to(target)
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "folder").mkdir()
    with pytest.raises(ConfigError, match="link is a symbolic link .*never follows a link"):
        open_text(tmp_path / "link", mode)
    for planted in ("fifo", "folder"):
        with pytest.raises(ConfigError, match=f"{planted} is not a regular file; .*remove it"):
            open_text(tmp_path / planted, mode)
    assert target.read_text() == "precious\n"
    with open_text(target, mode) as handle:
        assert os.get_blocking(handle.fileno())
