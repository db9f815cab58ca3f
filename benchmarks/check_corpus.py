"""How right is ``paratrain check`` on public training scripts that nobody here wrote?

Re-runs the checker over every file named in ``check_corpus_labels.csv`` (repository,
commit, path, line, rule, verdict by hand, note) and scores its findings against those
labels, per rule:

    precision = findings labelled true / findings
    recall    = findings labelled true / pitfalls labelled true

A finding that no label covers is printed as "unlabelled" (label it, then score again);
a row with verdict ``clean`` only names a file of the corpus that has no pitfall.

``check`` reports lines of one rule and one pattern as one finding at the first of them, naming the others
in its text ("(also lines 216, 217)"). A true label on one of those other lines, for the same rule in the
same file, counts as found ("found in also-lines", a column of the per-rule table): it adds to recall, not
to the findings that precision counts (the finding is scored once, by the label of its first line):

    recall    = (findings labelled true + labels found in also-lines) / pitfalls labelled true

The scripts themselves are not kept here. ``--repos DIR`` holds one entry per repository,
named ``owner+name``: a bare git directory (or one with the git directory in ``repo/``)
read at the labelled commit (its files written once under ``--trees``, so that ``check`` reads the
script in its project and follows its imports), or a plain folder of files at their paths. ``--fetch`` first
brings every labelled commit that DIR lacks from GitHub (a shallow fetch of that commit only).

Twenty-nine corpora: ``check_corpus_labels.csv`` (the default, 25 files the rules were first fitted to),
``check_corpus_unseen_labels.csv`` (82 files from 28 repositories), ``check_corpus_fresh_labels.csv`` (41 from 15), and
one file per corpus after them, ``check_corpus_fourth`` … ``check_corpus_twentyninth_labels.csv`` (the twelfth to the
fourteenth: 54, 59 and 28 files; the fifteenth to the seventeenth: 27, 22 and 22, the seventeenth all built on
libraries; the eighteenth to the twenty-first: 58, 113, 91 and 86; the twenty-sixth: 60 files from 19 repositories, 10
of them built on Lightning, Accelerate, the HF Trainer or DeepSpeed; the twenty-seventh: 72 files from 20 repositories,
8 of them built on those libraries; the twenty-eighth: 67 files from 21 repositories, 7 on those libraries; the twenty-ninth: 71 files from 20
repositories, 10 on those libraries). Each from the fourth on was labelled by reading
before ``check`` ran on any of its files (committed first up to the twenty-fifth; the twenty-sixth's to twenty-ninth's
labels were written before their first score and committed after it); its first score is an out-of-sample figure in
docs/check_corpus.md, and the findings that fell on no label were read afterwards (rows whose note begins "read
after the held-out scoring"). The second is split by a hash of the repository's name, fixed before any file was
read: ``--half held-out`` scores only the repositories whose sha256(owner/name) is even; ``--half tuned`` the
others (``--half`` is for the second only).

    python benchmarks/check_corpus.py --repos /path/to/mirrors [--markdown]
    python benchmarks/check_corpus.py --repos DIR --fetch --labels benchmarks/check_corpus_unseen_labels.csv --half held-out
    python benchmarks/check_corpus.py --repos DIR --fetch --labels benchmarks/check_corpus_fresh_labels.csv
    python benchmarks/check_corpus.py --repos DIR --fetch --labels benchmarks/check_corpus_fourth_labels.csv
    python benchmarks/check_corpus.py --repos DIR --fetch --labels benchmarks/check_corpus_fifth_labels.csv
    python benchmarks/check_corpus.py --repos DIR --fetch --labels benchmarks/check_corpus_twentieth_labels.csv

Every run also times ``check`` on each file and names any file it raised on, or did not finish
within ``--limit-s`` seconds of CPU time (default 60; such a file counts as giving no findings).

Exit code: 0 when every finding is labelled true and no true pitfall is missed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

from paratrain.diagnostics.check import check_file

LABELS = Path(__file__).with_name("check_corpus_labels.csv")
# The files of a project that check reads beside the script: its modules, what marks its root, and where its
# launch commands are written (shell scripts, READMEs and docs, YAML job files).
_PROJECT_FILES = (b".py", b"pyproject.toml", b"setup.cfg", b".sh", b".bash", b"Makefile", b".md", b".rst",
                  b".yaml", b".yml", b".json")
_LARGEST_JSON = 256_000  # a configuration, not a dataset: check reads no larger file
_COMPLETE = " ".join(suffix.decode() for suffix in _PROJECT_FILES)  # a tree written for other files is rewritten
# Where the labelled commits' trees are written, outside the repository.
TREES = Path(tempfile.gettempdir()) / "paratrain-check-trees"
HALVES = ("all", "tuned", "held-out")


def held_out(repository: str) -> bool:
    """The split of the unseen corpus, by repository, decided before any of its files was read."""
    return int(hashlib.sha256(repository.encode()).hexdigest(), 16) % 2 == 0


@dataclass(frozen=True)
class ScriptFile:
    repository: str
    commit: str
    path: str


def read_labels(path: Path) -> dict[ScriptFile, dict[tuple[int, str], bool]]:
    """Every file of the corpus → {(line, rule): the finding is right}."""
    corpus: dict[ScriptFile, dict[tuple[int, str], bool]] = defaultdict(dict)
    with path.open(newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            labels = corpus[ScriptFile(row["repository"], row["commit"], row["path"])]
            if row["verdict"] in ("true", "false"):
                labels[(int(row["line"]), row["rule"])] = row["verdict"] == "true"
            elif row["verdict"] != "clean":
                raise SystemExit(f"{path}: verdict {row['verdict']!r} for {row['path']}; use true, false or clean")
    return corpus


def script_path(repos: Path, script: ScriptFile, trees: Path) -> Path:
    """The file on disk beside the rest of its project, so that ``check`` can follow its imports and read its
    launch commands: for a git directory, the tree at the labelled commit written once under
    ``trees/owner+name@commit`` (its Python, packaging and command files, with an empty ``.git`` marking the
    root as a checkout's would; rewritten when it was written for other files); a plain folder as it lies."""
    base = repos / script.repository.replace("/", "+")
    for git_dir in (base / "repo", base, base / ".git", base / "repo" / ".git"):  # bare, or a checkout's
        if (git_dir / "HEAD").is_file() and (git_dir / "objects").is_dir():
            tree = trees / f"{base.name}@{script.commit}"
            marker = tree / ".complete"
            if not marker.is_file() or marker.read_text() != _COMPLETE:
                _write_tree(git_dir, script.commit, tree)
            path = tree / script.path
            if not path.is_file():
                raise SystemExit(f"{git_dir}: no {script.path} at {script.commit[:12]}")
            return path
    plain = base / script.path
    if not plain.is_file():
        raise SystemExit(f"{plain} not found; fetch {script.repository} into {repos} first")
    return plain


def _write_tree(git_dir: Path, commit: str, tree: Path) -> None:
    """The commit's Python, packaging and command files (``git ls-tree``, then their blobs through one
    ``git cat-file --batch``), written under ``tree``."""
    git = ["git", f"--git-dir={git_dir}"]
    listed = subprocess.run([*git, "ls-tree", "-r", "-l", "-z", commit], capture_output=True, check=False)
    if listed.returncode != 0:
        raise SystemExit(f"{git_dir}: cannot list {commit[:12]}: {listed.stderr.decode().strip()}")
    wanted = []  # (blob, path)
    for entry in listed.stdout.split(b"\0"):
        meta, _, name = entry.partition(b"\t")
        parts = meta.split()  # mode, type, blob, size
        if (len(parts) == 4 and parts[1] == b"blob" and name.endswith(_PROJECT_FILES)
                and not (name.endswith(b".json") and not (parts[3].isdigit() and int(parts[3]) <= _LARGEST_JSON))):
            wanted.append((parts[2].decode(), name.decode("utf-8", "surrogateescape")))
    blobs = subprocess.run([*git, "cat-file", "--batch"], input="".join(f"{blob}\n" for blob, _ in wanted).encode(),
                           capture_output=True, check=True).stdout
    offset = 0
    for _, name in wanted:
        header_end = blobs.index(b"\n", offset)
        size = int(blobs[offset:header_end].split()[2])
        target = tree / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(blobs[header_end + 1:header_end + 1 + size])
        offset = header_end + 1 + size + 1  # the blob, then a newline
    (tree / ".git").mkdir(parents=True, exist_ok=True)
    (tree / ".complete").write_text(_COMPLETE)


def fetch(repos: Path, scripts: list[ScriptFile]) -> None:
    """A bare git directory per repository under ``repos`` holding every labelled commit (shallow)."""
    for repository, commit in sorted({(s.repository, s.commit) for s in scripts}):
        git_dir = repos / repository.replace("/", "+") / "repo"
        if (git_dir / "HEAD").is_file() and subprocess.run(
                ["git", f"--git-dir={git_dir}", "cat-file", "-e", f"{commit}^{{commit}}"],
                capture_output=True, check=False).returncode == 0:
            continue
        if not (git_dir / "HEAD").is_file():
            subprocess.run(["git", "init", "-q", "--bare", str(git_dir)], check=True)
        print(f"fetching {repository} {commit[:12]}", file=sys.stderr)
        subprocess.run(["git", f"--git-dir={git_dir}", "fetch", "-q", "--depth=1",
                        f"https://github.com/{repository}.git", commit], check=True)


class CheckTooSlow(Exception):
    """``check`` ran past the per-file CPU limit."""


_ALSO_LINES = re.compile(r"\(also lines ([\d, ]+)\)")


def also_lines(problem: str) -> set[int]:
    """The other lines a grouped finding names in its text: "… (also lines 216, 217)" → {216, 217}."""
    match = _ALSO_LINES.search(problem)
    return {int(number) for number in match.group(1).split(",") if number.strip()} if match else set()


def _check_within(path: Path, limit_s: float) -> dict[tuple[int, str], set[int]]:
    """The findings of ``check`` on one file, each (line, rule) with the other lines it names; raises
    CheckTooSlow past ``limit_s`` seconds of CPU time (a rule that never finishes is a result to report,
    not a reason to stop scoring)."""
    def too_slow(*_: object) -> None:
        raise CheckTooSlow(f"no result within {limit_s:g} s of CPU time")

    previous = signal.signal(signal.SIGVTALRM, too_slow)
    signal.setitimer(signal.ITIMER_VIRTUAL, limit_s)
    try:
        return {(f.line, f.rule): also_lines(f.problem) for f in check_file(path)}
    finally:
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        signal.signal(signal.SIGVTALRM, previous)


@dataclass
class Timing:
    """The slowest ``check`` of the run and the files it raised on. Both clocks: on a shared machine the
    wall clock counts the other processes' turns, the CPU time (what ``--limit-s`` bounds) does not."""

    slowest_s: float = 0.0
    slowest: str = ""
    slowest_cpu_s: float = 0.0
    slowest_cpu: str = ""
    crashed: list[str] | None = None


def score(repos: Path, labels_path: Path, half: str = "all", get: bool = False,
          timing: Timing | None = None, limit_s: float = 60.0, trees: Path = TREES) -> tuple[list[tuple[ScriptFile, list[str]]], dict[str, Counter]]:
    """Per file the findings with their verdicts; per rule the counts tp / fp / fn / unlabelled, and ``also``:
    true labels found in the also-lines of a finding of that rule.
    ``timing`` (when given) collects the slowest file and the files ``check`` raised on or did not
    finish within ``limit_s`` seconds of CPU time."""
    per_rule: dict[str, Counter] = defaultdict(Counter)
    timing = timing if timing is not None else Timing()
    timing.crashed = []
    rows = []
    corpus = {script: labels for script, labels in read_labels(labels_path).items()
              if half == "all" or held_out(script.repository) == (half == "held-out")}
    if get:
        fetch(repos, list(corpus))
    for script, labels in corpus.items():
        path = script_path(repos, script, trees)
        started, started_cpu = time.perf_counter(), time.process_time()
        try:
            findings = _check_within(path, limit_s)
        except Exception as exc:  # a crash is a result here: name the file, keep scoring the others
            timing.crashed.append(f"{script.repository} {script.path}: {type(exc).__name__}: {exc}")
            findings = {}
        elapsed, elapsed_cpu = time.perf_counter() - started, time.process_time() - started_cpu
        if elapsed > timing.slowest_s:
            timing.slowest_s, timing.slowest = elapsed, f"{script.repository} {script.path}"
        if elapsed_cpu > timing.slowest_cpu_s:
            timing.slowest_cpu_s, timing.slowest_cpu = elapsed_cpu, f"{script.repository} {script.path}"
        marks = []
        for line, rule in sorted(findings):
            verdict = labels.get((line, rule))
            kind = {True: "tp", False: "fp", None: "unlabelled"}[verdict]
            per_rule[rule][kind] += 1
            marks.append(f"{rule}:{line} " + {True: "✓", False: "✗", None: "? unlabelled"}[verdict])
        for (line, rule), right in sorted(labels.items()):
            if not right or (line, rule) in findings:
                continue
            grouped = [first for (first, found_rule), others in sorted(findings.items())
                       if found_rule == rule and line in others]
            if grouped:
                per_rule[rule]["also"] += 1
                marks.append(f"{rule}:{line} found in also-lines of {grouped[0]}")
            else:
                per_rule[rule]["fn"] += 1
                marks.append(f"{rule}:{line} missed")
        rows.append((script, marks))
    return rows, per_rule


def _ratio(part: int, whole: int) -> str:
    return f"{part / whole:.2f}" if whole else "–"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repos", type=Path, required=True, help="folder with one owner+name entry per repository")
    parser.add_argument("--labels", type=Path, default=LABELS, help="labels CSV (default: %(default)s)")
    parser.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    parser.add_argument("--half", choices=HALVES, default="all",
                        help="the unseen corpus's tuned or held-out repositories (default: %(default)s)")
    parser.add_argument("--fetch", action="store_true", help="fetch the labelled commits missing from --repos first")
    parser.add_argument("--limit-s", type=float, default=60.0,
                        help="CPU seconds check may take on one file before it counts as a crash (default: %(default)s)")
    parser.add_argument("--trees", type=Path, default=TREES,
                        help="where each labelled commit's files are written once, for check to read the script's "
                             "project beside it (default: %(default)s)")
    args = parser.parse_args()
    timing = Timing()
    rows, per_rule = score(args.repos, args.labels, args.half, args.fetch, timing, args.limit_s, args.trees)
    sep = " | " if args.markdown else "  "
    print(f"| repository | path | findings (✓ right, ✗ wrong) |\n|---|---|---|" if args.markdown else "findings per file:")
    for script, marks in rows:
        cells = [script.repository, script.path, ", ".join(marks) or "none"]
        print(("| " + sep.join(cells) + " |") if args.markdown else sep.join(cells))
    print()
    print("| rule | findings | right | wrong | found in also-lines | missed | precision | recall |\n"
          "|---|---|---|---|---|---|---|---|"
          if args.markdown else "per rule: findings right wrong found-in-also-lines missed precision recall")
    total: Counter = Counter()
    for rule in sorted(per_rule):
        counts = per_rule[rule]
        total.update(counts)
        found = counts["tp"] + counts["fp"] + counts["unlabelled"]
        hits = counts["tp"] + counts["also"]
        cells = [rule, str(found), str(counts["tp"]), str(counts["fp"] + counts["unlabelled"]), str(counts["also"]),
                 str(counts["fn"]), _ratio(counts["tp"], found), _ratio(hits, hits + counts["fn"])]
        print(("| " + sep.join(cells) + " |") if args.markdown else sep.join(cells))
    found = total["tp"] + total["fp"] + total["unlabelled"]
    hits = total["tp"] + total["also"]
    print(f"\n{len(rows)} files, {found} findings: precision {_ratio(total['tp'], found)}, "
          f"recall {_ratio(hits, hits + total['fn'])} ({total['also']} found in also-lines), "
          f"{total['unlabelled']} unlabelled")
    print(f"slowest check: {timing.slowest_s:.2f} s ({timing.slowest}), {timing.slowest_cpu_s:.2f} s of CPU "
          f"({timing.slowest_cpu}); crashed on {len(timing.crashed)} files"
          + "".join(f"\n  {crash}" for crash in timing.crashed))
    return 0 if found == total["tp"] and not total["fn"] and not timing.crashed else 1


if __name__ == "__main__":
    sys.exit(main())
