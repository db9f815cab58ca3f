"""A tiny ``pt.fit`` run for the diagnostics tests, started by ``paratrain run``.

    fit_script.py OUT [--stall-rank R --stall-step S] [--lr-on-rank-1 LR] [--steps N] [--step-sleep S]
                      [--log-every N]

``--stall-rank/--stall-step`` is the test hook: that rank sleeps for good after that step.
``--step-sleep`` paces every step (a run that lasts while nodes leave and join).
``--crash-rank/--crash-step``: that rank raises after that step, in the first attempt only.
"""

import argparse
import os
import time

import torch

import paratrain as pt


class SleepForever(pt.Callback):
    """The stall under test: one rank stops after a chosen step, in a frame the report must show."""

    def __init__(self, rank, step):
        self.rank, self.step = rank, step

    def on_step_end(self, trainer, step, loss):
        if trainer.runtime.rank == self.rank and step == self.step:
            print(f"STALL BEGINS {time.time()}", flush=True)
            while True:
                time.sleep(3600)


class CrashOnce(pt.Callback):
    def __init__(self, rank, step):
        self.rank, self.step = rank, step

    def on_step_end(self, trainer, step, loss):
        first_attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
        if trainer.runtime.rank == self.rank and step == self.step and first_attempt:
            raise RuntimeError(f"crash at step {step}")


class Pace(pt.Callback):
    def __init__(self, seconds):
        self.seconds = seconds

    def on_step_end(self, trainer, step, loss):
        time.sleep(self.seconds)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--stall-rank", type=int)
    parser.add_argument("--stall-step", type=int)
    parser.add_argument("--lr-on-rank-1", type=float)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--step-sleep", type=float, default=0.0)
    parser.add_argument("--crash-rank", type=int)
    parser.add_argument("--crash-step", type=int)
    parser.add_argument("--log-every", type=int, default=2)
    args = parser.parse_args()
    torch.manual_seed(0)  # the same initial weights in every run (pt.fit broadcasts rank 0's)
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(96, 6, generator=generator)
    data = torch.utils.data.TensorDataset(inputs, (inputs.sum(1) > 0).long())
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    lr = args.lr_on_rank_1 if args.lr_on_rank_1 and os.environ.get("RANK") == "1" else 0.05
    callbacks = [SleepForever(args.stall_rank, args.stall_step)] if args.stall_rank is not None else []
    callbacks += [Pace(args.step_sleep)] if args.step_sleep else []
    callbacks += [CrashOnce(args.crash_rank, args.crash_step)] if args.crash_rank is not None else []
    pt.fit(model, data, data, max_steps=args.steps, batch_size=8, lr=lr, out_dir=args.out, log_every=args.log_every,
           callbacks=callbacks, progress=False, tensorboard=False)


if __name__ == "__main__":
    main()
