"""Accuracy and the classification report against scikit-learn on a fixed prediction set."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from sklearn.metrics import classification_report as sk_report

import paratrain as pt
from paratrain.errors import MissingDependencyError

# A fixed 4-class set with an unbalanced support and a class that is never predicted (3).
TARGETS = [0, 0, 0, 1, 1, 2, 2, 2, 2, 3, 3, 0, 1, 2, 0, 3]
PREDS = [0, 1, 0, 1, 2, 2, 2, 0, 2, 0, 1, 0, 1, 2, 2, 1]
NAMES = ["sport", "news", "tech", "food"]


def test_report_numbers_and_text_equal_sklearn():
    report = pt.classification_report(torch.tensor(PREDS), torch.tensor(TARGETS), target_names=NAMES, digits=4)
    expected = sk_report(TARGETS, PREDS, target_names=NAMES, output_dict=True, zero_division=0)
    assert report.accuracy == expected["accuracy"] == 9 / 16
    for name in NAMES:
        scores, want = report.classes[name], expected[name]
        assert (scores.precision, scores.recall, scores.f1, scores.support) == (
            want["precision"], want["recall"], want["f1-score"], want["support"])
    assert report.classes["food"].precision == 0.0  # never predicted: 0, not a warning
    for ours, key in ((report.macro, "macro avg"), (report.weighted, "weighted avg")):
        want = expected[key]
        assert (ours.precision, ours.recall, ours.f1, ours.support) == (
            want["precision"], want["recall"], want["f1-score"], want["support"])
    assert str(report) == sk_report(TARGETS, PREDS, target_names=NAMES, digits=4, zero_division=0)


def test_scores_are_argmaxed_and_absent_classes_keep_their_row():
    scores = np.eye(3)[[0, 1, 1]]  # 2-D scores for classes 0, 1, 1
    report = pt.classification_report(scores, [0, 1, 0], target_names=["a", "b", "c"])
    assert list(report.classes) == ["a", "b", "c"] and report.classes["c"].support == 0
    assert pt.accuracy(torch.tensor(scores), torch.tensor([0, 1, 0])) == 2 / 3


def test_bf16_logits_are_scored():
    # Logits computed under bf16 autocast are bfloat16, which NumPy has no type for.
    logits = torch.tensor([[2.0, 0.5], [0.1, 3.0], [1.0, 0.0]], dtype=torch.bfloat16)
    assert pt.accuracy(logits, torch.tensor([0, 1, 1])) == 2 / 3


def test_accuracy_is_an_exact_fraction():
    assert pt.accuracy(PREDS, TARGETS) == 9 / 16
    assert pt.accuracy([1] * 101, [1] * 50 + [0] * 51) == 50 / 101


def test_bad_inputs():
    with pytest.raises(pt.DataError, match="3 predictions for 2 targets"):
        pt.accuracy([0, 1, 1], [0, 1])
    with pytest.raises(pt.DataError, match="no predictions"):
        pt.classification_report([], [])
    with pytest.raises(pt.DataError, match="shape"):
        pt.accuracy(torch.zeros(2, 2, 2), [0, 1])


def test_missing_scikit_learn_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn.metrics", None)  # makes the import fail
    with pytest.raises(MissingDependencyError, match=r"paratrain\[metrics\]"):
        pt.classification_report(PREDS, TARGETS)


def test_macro_f1_equals_sklearn_on_random_sets_with_absent_classes():
    from sklearn.metrics import f1_score

    from paratrain.metrics import macro_f1

    generator = np.random.default_rng(0)
    for trial in range(200):
        n, classes = int(generator.integers(1, 40)), int(generator.integers(2, 7))
        preds, targets = generator.integers(0, classes, n), generator.integers(0, classes - 1, n)  # one class absent
        labels = list(range(classes)) if trial % 2 else None
        want = f1_score(targets, preds, labels=labels, average="macro", zero_division=0)
        assert macro_f1(torch.tensor(preds), torch.tensor(targets), labels) == pytest.approx(want, rel=1e-12, abs=1e-15)


def test_the_fit_loops_evaluation_formats_its_report_only_when_shown():
    """Ranks that never print the report never import scikit-learn (1-4 s of CPU per process)."""
    import subprocess

    code = (
        "import sys, torch\n"
        "from paratrain.tasks.classification import ClassificationEvaluator\n"
        "e = ClassificationEvaluator(['neg', 'pos'])\n"
        "e.update(torch.tensor([[2.0, 1.0], [0.0, 3.0], [1.0, 0.0]]), {'labels': torch.tensor([0, 1, 1])})\n"
        "result = e.compute()\n"
        "print('sklearn' in sys.modules, result.metrics['macro_f1'])\n"
        "print('neg' in result.report and 'sklearn' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "False 0.6666666666666666" and out[1] == "True"
