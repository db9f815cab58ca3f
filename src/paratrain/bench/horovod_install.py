"""``paratrain bench --install-horovod``: build Horovod 0.28.1 against the installed torch.

Horovod's last release has no wheel, and its CMake files ask for C++14 while the
headers of torch 2.x need C++17, so ``pip install horovod`` fails against current
torch. This downloads the release's sdist with pip, raises ``CMAKE_CXX_STANDARD``
to 17 in the top-level and ``horovod/torch`` CMakeLists, and builds it with gloo
(no MPI, TensorFlow or MXNet) into the current environment with
``pip install --no-build-isolation`` (so it compiles against *this* torch).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path

from paratrain.errors import ConfigError, LaunchError

VERSION = "0.28.1"
PATCHED_CMAKE_FILES = ("CMakeLists.txt", "horovod/torch/CMakeLists.txt")
BUILD_ENV = {
    "HOROVOD_WITH_PYTORCH": "1",
    "HOROVOD_WITH_GLOO": "1",
    "HOROVOD_WITHOUT_MPI": "1",
    "HOROVOD_WITHOUT_TENSORFLOW": "1",
    "HOROVOD_WITHOUT_MXNET": "1",
}
_BUILD_PERCENT = re.compile(r"\[\s*\d+%\]")
_CXX_STANDARD = re.compile(r"(set\s*\(\s*CMAKE_CXX_STANDARD\s+)14(\s*\))")


def check_build_tools() -> None:
    """Check that the tools a horovod build needs (cmake, a C++ compiler) are on PATH.

    Raises:
        ConfigError: naming what is missing and how to get it.
    """
    missing = [tool for tool, names in (("cmake", ("cmake",)), ("g++", ("g++", "c++"))) if not any(map(shutil.which, names))]
    if missing:
        raise ConfigError(
            f"building horovod needs {' and '.join(missing)}, not found on PATH; "
            "install them (e.g. apt-get install cmake g++) and run paratrain bench --install-horovod again"
        )


def raise_cxx_standard(source: Path) -> list[Path]:
    """Set ``CMAKE_CXX_STANDARD 17`` where the sdist says 14; returns the files changed.

    Raises:
        LaunchError: a file to patch is missing or holds no C++14 setting (another release).
    """
    changed = []
    for name in PATCHED_CMAKE_FILES:
        path = source / name
        text = path.read_text(encoding="utf-8") if path.is_file() else ""
        patched, count = _CXX_STANDARD.subn(r"\g<1>17\g<2>", text)
        if count == 0:
            raise LaunchError(f"{path} sets no CMAKE_CXX_STANDARD 14 to raise; is this horovod {VERSION}'s sdist?")
        path.write_text(patched, encoding="utf-8")
        changed.append(path)
    return changed


def install_horovod(log_path: Path | None = None, stream=sys.stderr) -> Path:
    """Download, patch and build horovod into this Python environment; returns the build log.

    Raises:
        ConfigError: cmake or a C++ compiler is missing.
        LaunchError: the download or the build failed (the last line of pip's output and the log path).
    """
    check_build_tools()
    work = Path(tempfile.mkdtemp(prefix="paratrain-horovod-"))
    log_path = Path(log_path or work / "build.log")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    with log_path.open("w", encoding="utf-8") as log:
        _run([*pip, "download", "--no-deps", "--no-binary", ":all:", f"horovod=={VERSION}", "-d", str(work)],
             "download", log, log_path, stream)
        (sdist,) = work.glob(f"horovod-{VERSION}.tar.gz")
        with tarfile.open(sdist) as archive:
            archive.extractall(work, filter="data")
        source = work / f"horovod-{VERSION}"
        raise_cxx_standard(source)
        env = {**os.environ, **BUILD_ENV}
        _run([*pip, "install", "-v", "--no-build-isolation", "--no-deps", str(source)], "build", log, log_path, stream, env)
    shutil.rmtree(source, ignore_errors=True)
    return log_path


def _run(argv: list[str], phase: str, log, log_path: Path, stream, env: dict[str, str] | None = None) -> None:
    """Run ``argv``, copy its output to ``log``, show one progress line; raise LaunchError on failure."""
    start = time.monotonic()
    last = [""]
    percent = [""]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                               errors="replace")

    def show() -> None:
        while process.poll() is None:
            _progress(stream, f"horovod {VERSION}: {phase} {time.monotonic() - start:4.0f}s {percent[0]} {last[0][:80]}")
            time.sleep(1.0)

    ticker = threading.Thread(target=show, daemon=True)
    ticker.start()
    for line in process.stdout:
        log.write(line)
        if line.strip():
            last[0] = line.strip()
        done = _BUILD_PERCENT.search(line)
        if done:
            percent[0] = done.group(0)  # cmake's "[ 42%]"
    code = process.wait()
    ticker.join()
    log.flush()
    _progress(stream, f"horovod {VERSION}: {phase} {'done' if code == 0 else 'failed'} in {time.monotonic() - start:.0f}s", end=True)
    if code != 0:
        raise LaunchError(f"horovod {phase} failed: {last[0]} (full log: {log_path})")


def _progress(stream, text: str, end: bool = False) -> None:
    if stream.isatty():
        stream.write("\r\033[K" + text + ("\n" if end else ""))
    elif end or int(time.monotonic()) % 15 == 0:
        stream.write(text + "\n")
    stream.flush()
