"""What do ``rt.backward``/``rt.step`` and the whole ``pt.fit`` loop cost next to a hand-written loop?

Three loops train the same model on the same data with identical settings — same
initial weights, optimizer (AdamW, built by the task, so fused where torch can), LR
schedule, clipping, batch size, sampler order, DDP on several processes — and are timed
over the same steps after a warm-up:

* ``hand``: plain PyTorch, as the migration guides start from: ``DistributedSampler`` +
  ``DataLoader``, ``DistributedDataParallel``, ``loss.backward()``, ``clip_grad_norm_``,
  ``optimizer.step()``, ``zero_grad(set_to_none=True)``, a loss printed every 50 steps;
* ``rt``: the same loop through ``pt.Runtime`` (``rt.setup``, ``rt.loader``,
  ``rt.backward``, ``rt.step``);
* ``fit``: ``pt.fit`` (no evaluation and no output directory, since the hand loop has
  neither; its default watchdog, preemption agreement, weight-consistency checks and
  log lines stay on).

The three alternate within one job (``rounds`` times, the order rotating) so machine
noise hits all of them; the table gives the median samples/s and each loop's time per
step relative to ``hand`` (overhead = ratio − 1; the target is ≤ 1 %).

    python benchmarks/loop_overhead.py [--models mlp text-cls] [--worlds 1 2] [--rounds 5] [--steps 60]

Each process uses one thread (OMP_NUM_THREADS=1), so 2 processes fit on 2 cores.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import time
from typing import Any

import torch

import paratrain as pt
from paratrain.data.batches import move_to
from paratrain.loop.model_task import ModelTask
from paratrain.tasks.api import TaskOptions
from paratrain.tasks.registry import create_task

LOOPS = ("hand", "rt", "fit")
WARMUP = 10  # steps before the timed ones (allocator, first DDP buckets)
LOG_EVERY = 50


class MLPTask(ModelTask):
    """A 1.3 M-parameter MLP on fixed random data: a step of ~10–20 ms on one CPU thread."""

    def __init__(self, samples: int):
        generator = torch.Generator().manual_seed(0)
        inputs = torch.randn(samples, 256, generator=generator)
        labels = torch.randint(0, 10, (samples,), generator=generator)
        data = list(zip(inputs, labels))
        super().__init__(self.build_model(), data, data[:64])

    def build_model(self) -> torch.nn.Module:
        return torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
                                   torch.nn.ReLU(), torch.nn.Linear(1024, 10))


def make_task(name: str, samples: int) -> Any:
    if name == "mlp":
        return MLPTask(samples)
    task = create_task(name, TaskOptions(limit_train=samples, limit_eval=64))
    task.datasets()  # builds the vocabulary the model's shape depends on
    return task


def fresh_model(task: Any) -> torch.nn.Module:
    """The task's model with the same initial weights every time."""
    torch.manual_seed(1234)
    return task.build_model()


def lr_lambda(total: int):
    return lambda step: max(0.0, 1 - step / total)


def hand_loop(task, train, batch_size, steps, clip) -> float:
    """Seconds of the timed steps, plain PyTorch."""
    world, rank = pt.world_size(), pt.rank()
    model = fresh_model(task)
    optimizer = task.build_optimizer(model, 1e-3, 0.01)
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    sampler = torch.utils.data.DistributedSampler(train, world, rank, shuffle=True, seed=0)
    loader = torch.utils.data.DataLoader(train, batch_size=batch_size, sampler=sampler, collate_fn=task.collate)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(WARMUP + steps))
    return _timed(loader, sampler.set_epoch, steps, lambda batch: _hand_step(task, model, optimizer, scheduler, batch, clip))


def _hand_step(task, model, optimizer, scheduler, batch, clip) -> torch.Tensor:
    loss, _ = task.forward(model, batch)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    scheduler.step()
    return loss


def rt_loop(rt, task, train, batch_size, steps, clip) -> float:
    """Seconds of the timed steps, through pt.Runtime."""
    model = fresh_model(task)
    model, optimizer = rt.setup(model, task.build_optimizer(model, 1e-3, 0.01))
    loader = rt.loader(train, batch_size, shuffle=True, collate_fn=task.collate, seed=0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(WARMUP + steps))

    def step(batch):
        loss, _ = task.forward(model, move_to(batch, rt.device))
        rt.backward(loss)
        rt.step(optimizer, clip_norm=clip)
        scheduler.step()
        return loss

    return _timed(loader, loader.set_epoch, steps, step)


def _timed(loader, set_epoch, steps, step) -> float:
    done, clock, epoch = 0, None, 0
    while True:
        set_epoch(epoch)
        for batch in loader:
            if done == WARMUP:
                pt.barrier()
                clock = time.perf_counter()
            loss = step(batch)
            done += 1
            if done % LOG_EVERY == 0:
                print_loss = float(loss)  # what a hand loop's log line costs  # noqa: F841
            if done == WARMUP + steps:
                pt.barrier()
                return time.perf_counter() - clock
        epoch += 1


class StepClock(pt.Callback):
    """Times pt.fit's steps WARMUP+1 … WARMUP+steps, like the other loops."""

    def __init__(self, steps: int):
        self.steps, self.start, self.seconds = steps, 0.0, 0.0

    def on_step_end(self, trainer, step, loss):
        if step == WARMUP:
            self.start = time.perf_counter()
        elif step == WARMUP + self.steps:
            self.seconds = time.perf_counter() - self.start


def fit_loop(rt, task, train, batch_size, steps, clip) -> float:
    clock = StepClock(steps)
    model = fresh_model(task)
    original = task.build_model
    task.build_model = lambda: model  # pt.fit builds the model itself: hand it the same initial weights
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # pt.fit's summary lines would bury the table
            pt.fit(task, runtime=rt, callbacks=[clock], max_steps=WARMUP + steps, batch_size=batch_size, lr=1e-3,
                   weight_decay=0.01, warmup=0.0, clip_norm=clip, eval_per_epoch=False, progress=False,
                   tensorboard=False, seed=0, group_by_length=False)  # the other loops draw batches at random
    finally:
        task.build_model = original
    return clock.seconds


def measure(model_name: str, rounds: int, steps: int, batch_size: int) -> dict[str, Any]:
    """In every worker: samples/s of each loop, alternating."""
    torch.set_num_threads(1)
    rt = pt.Runtime(strategy="ddp" if pt.world_size() > 1 else "single", seed=0)
    task = make_task(model_name, samples=batch_size * pt.world_size() * (WARMUP + steps + 5))
    train, _ = task.datasets()
    clip = 1.0
    runs = {
        "hand": lambda: hand_loop(task, train, batch_size, steps, clip),
        "rt": lambda: rt_loop(rt, task, train, batch_size, steps, clip),
        "fit": lambda: fit_loop(rt, task, train, batch_size, steps, clip),
    }
    seconds: dict[str, list[float]] = {name: [] for name in LOOPS}
    for r in range(rounds):
        for name in LOOPS[r % 3:] + LOOPS[: r % 3]:
            seconds[name].append(runs[name]())
    samples = steps * batch_size * pt.world_size()
    result = {name: samples / statistics.median(values) for name, values in seconds.items()}
    # Each loop's own ratio per round (the rounds pair the loops in time), then the median.
    result["ratios"] = {name: statistics.median(s / h for s, h in zip(seconds[name], seconds["hand"])) for name in LOOPS}
    rt.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["mlp", "text-cls"])
    parser.add_argument("--worlds", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()
    os.environ["OMP_NUM_THREADS"] = "1"
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; "
          f"{args.rounds} alternating rounds of {args.steps} steps, batch {args.batch_size} per process")
    print(f"{'model':<9} {'procs':>5} " + " ".join(f"{name + ' s/s':>10}" for name in LOOPS)
          + f" {'rt/hand':>8} {'fit/hand':>9}   (time per step; overhead = ratio - 1)")
    for model_name in args.models:
        for world in args.worlds:
            r = pt.spawn(measure, nprocs=world, args=(model_name, args.rounds, args.steps, args.batch_size))
            print(f"{model_name:<9} {world:>5} " + " ".join(f"{r[name]:>10.1f}" for name in LOOPS)
                  + f" {r['ratios']['rt']:>8.4f} {r['ratios']['fit']:>9.4f}", flush=True)


if __name__ == "__main__":
    main()
