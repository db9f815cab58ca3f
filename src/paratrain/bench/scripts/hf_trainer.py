"""transformers ``Trainer`` + ``TrainingArguments`` (under ``torchrun`` for several processes).

The task's loss goes in through ``compute_loss`` (the documented way to train a
model whose forward does not return a loss the Trainer knows); the Trainer's own
defaults that would change the training are set to the bench's recipe: constant
learning rate, no gradient clipping, the data in the given order.
"""

from __future__ import annotations

import os

import torch
from transformers import Trainer, TrainerCallback, TrainingArguments

from paratrain.bench.workload import Workload


class TaskTrainer(Trainer):
    def __init__(self, *args, workload: Workload, **kwargs):
        super().__init__(*args, **kwargs)
        self.workload = workload
        self.last_loss = None

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        loss, scores = self.workload.task.forward(model, inputs)
        self.last_loss = loss.detach()
        return (loss, scores) if return_outputs else loss


class RecordSteps(TrainerCallback):
    def __init__(self, recorder):
        self.recorder = recorder
        self.trainer: TaskTrainer | None = None

    def on_step_end(self, args, state, control, **kwargs):
        self.recorder.step(self.trainer.last_loss)


def main() -> None:
    wl = Workload.from_argv()
    args = TrainingArguments(
        output_dir=str(wl.spec.work_dir) + "/hf",
        per_device_train_batch_size=wl.batch_size(int(os.environ.get("WORLD_SIZE", "1"))),
        max_steps=wl.steps,
        learning_rate=wl.spec.lr,
        weight_decay=wl.spec.weight_decay,
        lr_scheduler_type="constant",
        max_grad_norm=0.0,
        train_sampling_strategy="sequential",
        bf16=wl.precision == "bf16-mixed",
        fp16=wl.precision == "fp16-mixed",
        use_cpu=not torch.cuda.is_available(),
        seed=wl.spec.seed,
        save_strategy="no",
        eval_strategy="no",
        report_to="none",
        logging_strategy="no",
        disable_tqdm=True,
        remove_unused_columns=False,
        dataloader_num_workers=0,
    )
    model = wl.model()
    trainer = TaskTrainer(
        model=model, args=args, train_dataset=wl.train_set, data_collator=wl.task.collate,
        optimizers=(wl.optimizer(model), None), workload=wl,
    )
    recorder = wl.recorder(args.process_index, args.world_size, args.device)
    callback = RecordSteps(recorder)
    callback.trainer = trainer
    trainer.add_callback(callback)
    trainer.train()
    recorder.finish(trainer.model.state_dict() if trainer.is_world_process_zero() else None)


if __name__ == "__main__":
    main()
