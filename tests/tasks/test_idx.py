"""IDX reading for the mnist task: raw and gzipped files load; every malformed file is named."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from paratrain.errors import ConfigError, DataError
from paratrain.tasks import TaskOptions, create_task
from paratrain.tasks.idx import find_idx, read_idx, read_pair
from tests.tasks.idx_files import digit_images, idx_bytes, write_idx, write_mnist


def test_raw_and_gzipped_files_hold_the_same_arrays(tmp_path):
    images, _ = digit_images(7, seed=3)
    write_idx(tmp_path / "raw-images", images)
    write_idx(tmp_path / "gz-images.gz", images)
    assert np.array_equal(read_idx(tmp_path / "raw-images", 3), images)
    assert np.array_equal(read_idx(tmp_path / "gz-images.gz", 3), images)
    assert find_idx(tmp_path, "gz-images").name == "gz-images.gz"


def test_mnist_task_reads_raw_train_and_gzipped_test_files(tmp_path):
    write_mnist(tmp_path, train=30, test=12, gz_train=False, gz_test=True)
    task = create_task("mnist", TaskOptions(data=str(tmp_path), limit_eval=10))
    task.check()
    train, test = task.datasets()
    assert (len(train), len(test)) == (30, 10)
    image, label = train[0]
    assert image.shape == (1, 28, 28) and image.dtype.is_floating_point
    expected = digit_images(30, seed=1)[1][0]
    assert int(label) == int(expected)
    model = task.build_model()
    loss, scores = task.forward(model, task.collate([train[i] for i in range(4)]))
    assert scores.shape == (4, 10) and loss.item() > 0


@pytest.mark.parametrize(
    "payload, needle",
    [
        (b"\x00\x00\x08\x01" + b"\x00" * 8, "magic number 0x00000801, expected 0x00000803"),
        (b"\x00\x00", "too short for an IDX header"),
        (idx_bytes(np.zeros((2, 28, 28), np.uint8))[:-5], "truncated or corrupt"),
        (b"\x00\x00\x08\x03\x00\x00", "ends inside its header"),
    ],
)
def test_malformed_image_file_is_named_with_what_was_expected(tmp_path, payload, needle):
    path = tmp_path / "train-images-idx3-ubyte"
    path.write_bytes(payload)
    with pytest.raises(DataError, match=needle) as info:
        read_idx(path, 3)
    assert str(path) in str(info.value)


def test_gz_name_that_is_not_gzip(tmp_path):
    path = tmp_path / "t10k-labels-idx1-ubyte.gz"
    path.write_bytes(idx_bytes(np.zeros(3, np.uint8)))
    with pytest.raises(DataError, match="cannot be read as gzip") as info:
        read_idx(path, 1)
    assert str(path) in str(info.value)


def test_pairs_must_match_in_size_count_and_labels(tmp_path):
    write_idx(tmp_path / "a-images", np.zeros((3, 20, 20), np.uint8))
    write_idx(tmp_path / "a-labels", np.zeros(3, np.uint8))
    with pytest.raises(DataError, match="holds 20x20 images, expected 28x28"):
        read_pair(tmp_path, "a-images", "a-labels", 28, 28, 10)
    write_idx(tmp_path / "b-images", np.zeros((3, 28, 28), np.uint8))
    write_idx(tmp_path / "b-labels", np.zeros(4, np.uint8))
    with pytest.raises(DataError, match="has 3 images but .*b-labels has 4 labels"):
        read_pair(tmp_path, "b-images", "b-labels", 28, 28, 10)
    write_idx(tmp_path / "c-images", np.zeros((2, 28, 28), np.uint8))
    (tmp_path / "c-labels.gz").write_bytes(gzip.compress(idx_bytes(np.array([1, 12], np.uint8))))
    with pytest.raises(DataError, match="holds label 12, expected 0..9"):
        read_pair(tmp_path, "c-images", "c-labels", 28, 28, 10)


def test_missing_data_directory_or_files(tmp_path):
    with pytest.raises(ConfigError, match="mnist task needs data='DIR' holding train-images-idx3-ubyte"):
        create_task("mnist").check()
    with pytest.raises(DataError, match="is not a directory"):
        create_task("mnist", TaskOptions(data=str(tmp_path / "nowhere"))).check()
    with pytest.raises(DataError, match=r"has no train-images-idx3-ubyte or train-images-idx3-ubyte\.gz"):
        create_task("mnist", TaskOptions(data=str(tmp_path))).check()
