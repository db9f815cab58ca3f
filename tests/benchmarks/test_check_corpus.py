"""The corpus scorer: a label on a line that a grouped finding names among its "also lines" counts as found."""

from __future__ import annotations

from pathlib import Path

from benchmarks.check_corpus import also_lines, score

_SCRIPT = """\
import torch.distributed as dist

dist.init_process_group("gloo")
print("starting")
print("still starting")
"""


def test_a_label_on_an_also_line_of_the_same_rule_is_found_not_missed(tmp_path: Path) -> None:
    (tmp_path / "repos" / "someone+project").mkdir(parents=True)
    (tmp_path / "repos" / "someone+project" / "train.py").write_text(_SCRIPT)
    labels = tmp_path / "labels.csv"
    labels.write_text(
        "repository,commit,path,line,rule,verdict,note\n"
        "someone/project,0,train.py,4,print-on-every-rank,true,first print\n"
        "someone/project,0,train.py,5,print-on-every-rank,true,second print: in the finding's also lines\n"
        "someone/project,0,train.py,3,save-on-every-rank,true,another rule: an also line does not cover it\n")
    rows, per_rule = score(tmp_path / "repos", labels, trees=tmp_path / "trees")
    assert per_rule["print-on-every-rank"]["tp"] == 1
    assert per_rule["print-on-every-rank"]["also"] == 1
    assert per_rule["print-on-every-rank"]["fn"] == 0
    assert per_rule["save-on-every-rank"]["fn"] == 1
    assert "print-on-every-rank:5 found in also-lines of 4" in rows[0][1]


def test_also_lines_are_read_from_the_findings_text() -> None:
    assert also_lines("print runs on every rank (also lines 216, 217, 1040)") == {216, 217, 1040}
    assert also_lines("print runs on every rank") == set()
