"""text-cls through the real CLI on two processes, then `paratrain predict` on what it saved."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from paratrain.cli.main import main
from tests.support import paratrain_cmd

TEXTS = ["质量很好，物超所值，下次还会再来买", "太差了，根本不能用，退货"]


def _run(cli_env, *words: str) -> subprocess.CompletedProcess:
    result = subprocess.run(paratrain_cmd(*words), env=cli_env, capture_output=True, text=True, timeout=240, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def _predict(capsys, out: Path, *flags: str) -> str:
    """``paratrain predict`` in this process: a fresh read of what the training processes saved
    (the console script's own start is tests/cli/test_own_task.py's)."""
    capsys.readouterr()
    assert main(["predict", *flags, str(out), *TEXTS]) == 0
    return capsys.readouterr().out


def _predict_json(capsys, out: Path) -> list[dict]:
    return [json.loads(line) for line in _predict(capsys, out, "--json").splitlines()]


def test_text_cls_slice_on_two_processes_reports_and_predict_labels_texts(tmp_path, cli_env, capsys):
    out = tmp_path / "text"
    train = _run(cli_env, "train", "text-cls", "--nproc-per-node", "2", "--limit-train", "384", "--limit-eval", "64",
                 "--epochs", "1", "--batch-size", "16", "--log-every", "4", "--out", str(out), "--no-tensorboard")
    assert "precision    recall" in train.stdout and "negative" in train.stdout and "positive" in train.stdout
    assert "epoch 1/1 step 4/12 loss" in train.stdout  # 384 / (2 × 16) = 12 steps
    summary = json.loads((out / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["best_metrics"]["samples"] == 64
    assert (out / "vocab.json").exists() and json.loads((out / "task.json").read_text())["task"] == "text-cls"

    shown = _predict(capsys, out)
    for text in TEXTS:
        assert f"text:        {text}" in shown
    assert shown.count("label:       ") == 2 and shown.count("probability: ") == 2
    predictions = _predict_json(capsys, out)
    assert [p["text"] for p in predictions] == TEXTS
    for prediction in predictions:
        assert prediction["label"] in ("negative", "positive")
        assert 0.5 <= prediction["probability"] <= 1.0
        assert abs(sum(prediction["scores"].values()) - 1.0) < 1e-5


def _tiny_bert(directory: Path) -> Path:
    """A 1-layer, 32-wide BERT and a character WordPiece tokenizer, saved as a pretrained model would be."""
    from transformers import (
        BertConfig,
        BertForSequenceClassification,
        BertTokenizerFast,
    )

    from paratrain.tasks.review_corpus import read_reviews

    chars = sorted({char for text, _ in read_reviews()[:3000] for char in text if not char.isspace()})
    vocab = directory / "vocab.txt"
    directory.mkdir()
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *chars]) + "\n", encoding="utf-8")
    tokenizer = BertTokenizerFast(vocab_file=str(vocab))
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=128, num_labels=2)
    BertForSequenceClassification(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def test_model_path_trains_a_local_pretrained_bert_and_predicts_with_its_tokenizer(tmp_path, cli_env, capsys):
    model_dir = _tiny_bert(tmp_path / "tiny-bert")
    out = tmp_path / "run"
    _run(cli_env, "train", "text-cls", "--model-path", str(model_dir), "--nproc-per-node", "2", "--limit-train", "128",
         "--limit-eval", "32", "--max-steps", "4", "--batch-size", "8", "--out", str(out), "--no-tensorboard")
    record = json.loads((out / "task.json").read_text())
    assert record["options"]["model_path"] == str(model_dir)
    assert record["artifacts"]["tokenizer"]["kind"] == "pretrained"
    assert record["artifacts"]["bert_config"]["hidden_size"] == 32
    assert (out / "tokenizer" / "tokenizer.json").exists()
    predictions = _predict_json(capsys, out)
    assert [p["label"] in ("negative", "positive") for p in predictions] == [True, True]


def test_predict_refuses_bad_input(capsys, tmp_path):
    assert main(["predict", str(tmp_path), "好"]) == 2
    assert "holds no task.json; pass the --out directory of a `paratrain train` run" in capsys.readouterr().err
    assert main(["predict", str(tmp_path)]) == 2
    assert "no inputs; give texts after CKPT" in capsys.readouterr().err
