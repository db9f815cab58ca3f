"""The README's library example, as printed, run twice on 2 real processes: the second run
resumes a finished run, so it trains nothing and overwrites nothing."""

from __future__ import annotations

import hashlib
import re
import subprocess

from tests.support import ROOT, clean_env, paratrain_cmd


def readme_example() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Library API"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def snapshot(directory) -> dict[str, tuple[str, int]]:
    return {
        str(path.relative_to(directory)): (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns)
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


def test_readme_library_example_resumes_a_finished_run(tmp_path):
    (tmp_path / "train.py").write_text(readme_example(), encoding="utf-8")

    def run() -> str:
        done = subprocess.run(paratrain_cmd("run", "--nproc-per-node", "2", "train.py"), cwd=tmp_path,
                              env=clean_env(), capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    first = run()
    assert re.findall(r"^(?:\[rank0\]:)?epoch (\d) loss", first, re.M) == ["0", "1", "2"]  # printed once (rank 0)
    saved = snapshot(tmp_path / "runs" / "exp")
    assert any("epoch-0002" in name for name in saved)
    second = run()
    assert "epoch " not in second  # nothing trained
    assert snapshot(tmp_path / "runs" / "exp") == saved  # nothing rewritten: same bytes, same times
