"""The digits task's data: scikit-learn's bundled digits, read without importing scikit-learn."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
from sklearn.datasets import load_digits as sklearn_load_digits

from paratrain.tasks import digits
from tests.support import clean_env


def test_the_arrays_are_scikit_learns_and_a_worker_never_imports_it(monkeypatch):
    expected = sklearn_load_digits()
    images, labels = digits.load_digits()
    assert images.shape == (1797, 8, 8) and images.dtype == expected.images.dtype
    assert np.array_equal(images, expected.images) and np.array_equal(labels, expected.target)
    assert labels.dtype == expected.target.dtype
    # Where scikit-learn keeps no such file: its own load_digits, the same arrays.
    monkeypatch.setattr(digits.importlib.util, "find_spec", lambda name: None)
    fallback_images, fallback_labels = digits.load_digits()
    assert np.array_equal(fallback_images, images) and np.array_equal(fallback_labels, labels)
    monkeypatch.undo()
    code = ("import sys; from paratrain.tasks import create_task; create_task('digits').datasets(); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('sklearn', 'scipy')))")
    done = subprocess.run([sys.executable, "-c", code], env=clean_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
