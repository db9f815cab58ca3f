"""The BERT multi-GPU comparison's transformers Trainer script (multi-gpu-transformers-cls.py), converted.

Before:  trainer = Trainer(model=model, args=TrainingArguments(...), train_dataset=..., eval_dataset=...,
                           data_collator=collate.collate_fn, compute_metrics=compute_metrics)
         trainer.train(); trainer.evaluate()
After:   pt.fit(model, train_dataset, dev_dataset, collate_fn=..., epochs=..., lr=..., out_dir=...)
         paratrain run --nproc-per-node 2 examples/migrate/hf_trainer.py

The model is a transformers BertForSequenceClassification (tiny, built from a config:
nothing is downloaded); batches are dicts with `labels`, so its `.loss` and `.logits`
are used as the Trainer would.
"""

import argparse

import torch
from reviews import MOODS, VOCAB, make_reviews
from transformers import BertConfig, BertForSequenceClassification

import paratrain as pt


def collate(samples):
    """Like the original script's Collate.collate_fn: a dict of tensors the model takes as keywords."""
    ids = torch.stack([ids for ids, _ in samples])
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids),
            "labels": torch.stack([label for _, label in samples])}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)  # TrainingArguments(num_train_epochs=...)
    parser.add_argument("--out", default="runs/hf-trainer")  # TrainingArguments(output_dir=...)
    args = parser.parse_args()

    config = BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=32, num_labels=len(MOODS))
    rt = pt.Runtime(seed=42)  # kept open after fit, so the last line prints on rank 0 only
    result = pt.fit(
        BertForSequenceClassification(config),
        make_reviews(1200, seed=0),
        make_reviews(300, seed=1),
        collate_fn=collate,
        label_names=MOODS,
        epochs=args.epochs,
        batch_size=32,  # per process: per_device_train_batch_size
        lr=3e-3,
        out_dir=args.out,
        progress=False,
        tensorboard=False,
        runtime=rt,
    )
    pt.print(f"best dev accuracy {result.best_metrics['accuracy']:.4f} after {result.steps} steps "
             f"on {result.world_size} processes")
    rt.close()


if __name__ == "__main__":
    main()
