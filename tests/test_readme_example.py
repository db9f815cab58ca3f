"""The README's loop, as printed: its diff read back into the plain script (one process) and the
paratrain script, which runs as one process and twice on 2 real processes (the second run resumes a
finished run, so it trains nothing and overwrites nothing)."""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys

from tests.support import ROOT, clean_env, paratrain_cmd


def readme_diff() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return re.search(r"```diff\n(.*?)```", text, re.S).group(1).splitlines()


def side(lines: list[str], keep: str) -> str:
    """The script on one side of the diff: context lines and the lines marked ``keep`` (``-`` or ``+``)."""
    return "".join(line[1:] + "\n" for line in lines if line[:1] in (" ", keep) or line == "")


def snapshot(directory) -> dict[str, tuple[str, int]]:
    return {
        str(path.relative_to(directory)): (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns)
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


def _run(command, cwd) -> str:
    done = subprocess.run(command, cwd=cwd, env=clean_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_plain_side_of_the_readmes_diff_is_a_working_pytorch_script(tmp_path):
    (tmp_path / "train.py").write_text(side(readme_diff(), "-"), encoding="utf-8")
    printed = _run([sys.executable, "train.py"], tmp_path)
    assert re.findall(r"^epoch (\d) loss", printed, re.M) == ["0", "1", "2"]


def test_the_readmes_script_runs_alone_and_resumes_a_finished_run_on_two_processes(tmp_path):
    script = side(readme_diff(), "+")
    assert "import paratrain as pt" in script and "DataLoader" not in script
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / "train.py").write_text(script, encoding="utf-8")
    assert re.findall(r"^epoch (\d) loss", _run([sys.executable, "train.py"], alone), re.M) == ["0", "1", "2"]

    (tmp_path / "train.py").write_text(script, encoding="utf-8")
    first = _run(paratrain_cmd("run", "--nproc-per-node", "2", "train.py"), tmp_path)
    assert re.findall(r"^(?:\[rank0\]:)?epoch (\d) loss", first, re.M) == ["0", "1", "2"]  # printed once (rank 0)
    saved = snapshot(tmp_path / "runs" / "exp")
    assert any("epoch-0002" in name for name in saved)
    second = _run(paratrain_cmd("run", "--nproc-per-node", "2", "train.py"), tmp_path)
    assert "epoch " not in second  # nothing trained
    assert snapshot(tmp_path / "runs" / "exp") == saved  # nothing rewritten: same bytes, same times
