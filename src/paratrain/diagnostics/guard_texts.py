"""The texts of rank tests: which names, comparisons and decorators limit a block to one process or one machine.

Patterns and small readers of one test's own text (``rank == 0``, ``local_rank in [-1, 0]``, ``rank % ngpus == 0``,
``"LOCAL_RANK" in os.environ``, ``@rank_zero_only``), with no knowledge of the file around it;
:class:`~paratrain.diagnostics.rank_guards.RankGuards` puts them together with a file's assignments and calls.
"""

from __future__ import annotations

import ast
import re

# An `if` that limits a block to one process: the global rank (by any name but a machine's: `world_rank`,
# `ddp_rank`, `global_rank`; not `node_rank`, `group_rank`), or a main-process helper.
GLOBAL_GUARD = re.compile(
    r"(?<![\w.])(?:\w+\.)*(?:(?:(?!node_|group_|local_)[a-z]\w*_)?rank|get_rank|RANK|is_main\w*|is_master\w*|master_process|is_rank_zero"
    r"|is_primary\w*|is_root\w*|is_global_zero|is_world_process_zero|main_process|rank_?0|rank_zero\w*)\b"
    r"|(?<![\w.])(?:\w+\.)*(?:trainer\.args|self\.args|training_args)\.should_save\b")
# A question about the rank's device (`torch.cuda.get_device_properties(rank).total_memory > 14e9`,
# `torch.cuda.memory_allocated(local_rank)`): the rank only says which device; every rank asks it of its own, so
# neither a test on the answer nor a line showing it tells the processes apart.
_DEVICE_QUERY = re.compile(r"\b((?:torch\.)?cuda\.\w+)\([^()]*\)")


def device_query(call: ast.Call) -> bool:
    """``call`` is one of :data:`_DEVICE_QUERY`'s (``torch.cuda.memory_allocated(rank)``)."""
    return re.fullmatch(r"(?:torch\.)?cuda\.\w+", ast.unparse(call.func)) is not None


def without_device_queries(text: str) -> str:
    """``text`` with the arguments of its ``torch.cuda`` calls left out (:data:`_DEVICE_QUERY`)."""
    return _DEVICE_QUERY.sub(r"\1()", text)


# A comparison with rank 0 (not `local_rank > -1`, which only picks a device), or a library's
# main-process predicate (`trainer.is_world_process_zero()`, `accelerator.is_main_process`, the HF Trainer's
# `trainer.args.should_save`: true on the process that saves, process 0 unless `save_on_each_node`; a script's own
# `args.should_save` is whatever the script sets it to, read as any flag).
RANK_ZERO_TEST = re.compile(
    r"(?:==|!=)\s*0\b|\bin\s*[\[(]\s*-1\s*,\s*0\s*[\])]"
    r"|(?<![\w])(?:\w+\.)*(?:is_world_process_zero|is_global_zero|is_main_process|is_local_main_process)\b"
    r"|(?<![\w.])(?:\w+\.)*(?:trainer\.args|self\.args|training_args)\.should_save\b")
LOCAL_GUARD = re.compile(r"local_rank|LOCAL_RANK|local_process_index|is_local_\w*")
# An `if` that tells a multi-process run from a single-process one: its `else:` runs on one process.
# llama-recipes' `train_config.enable_fsdp` is its one switch to several processes (no DDP mode beside it).
# Any case: a YACS config spells its keys in capitals (HigherHRNet's `cfg.MULTIPROCESSING_DISTRIBUTED`).
DISTRIBUTED_TEST = re.compile(
    r"^(?:\w+\.)*(?:ddp|distributed|is_distributed|use_ddp|multiprocessing_distributed|is_initialized\(\)"
    r"|is_dist_avail_and_initialized\(\)|enable_fsdp|multi_gpu|use_multi_gpu)$|world_size\s*>\s*1$", re.IGNORECASE)
# The device index a process was started on (`gpu`, `gpu_id`, `device_id`): `mp.spawn` hands each
# process its rank on the one machine, so the tutorials (pytorch/examples' ddp-tutorial-series) test
# it as their rank 0; read as a global guard unless the file assigns it from LOCAL_RANK.
DEVICE_GUARD = re.compile(r"(?<![\w])(?:\w+\.)*(?:gpu|gpu_id|device_id)\s*(?:==|!=)\s*0\b")
# A test that is true only in a single-process run: beside a rank test in an `or`, it still limits
# the block to one process (`if world_size == 1 or rank == 0:`).
ONE_PROCESS_TEST = re.compile(
    r"^(?:\w+\.)*(?:world_size|get_world_size\(\))\s*(?:==|<=)\s*1$"
    # `local_rank == -1`: no launcher passed a local rank, so one process (`local_rank == -1 or get_rank() == 0`)
    r"|^(?:\w+\.)*local_rank\s*==\s*-1$")
# `local_rank >= 0`, `local_rank != -1`: a launcher passed a local rank, so every process of a distributed run.
EVERY_RANK_OF_A_RUN = re.compile(r"(?:\w+\.)*local_rank\s*(?:>=\s*0|>\s*-1|!=\s*-1)")
# `rank % gpus_per_node == 0`: the first process of each machine, i.e. local rank 0.
PER_MACHINE = re.compile(r"\brank\s*%\s*[\w.]+\s*==\s*0")
# The main-process test of the Hugging Face and YOLO scripts: `RANK in {-1, 0}`, `args.local_rank in [-1, 0]`
# (a list, tuple or set), -1 for a run without a launcher, 0 for the first process. It is read as the test of
# the name it tests: `RANK in …` once per job, `local_rank in …` once per machine (the same file written by the
# first process of every machine). Invariant: leaving early when the name is `not in` those values
# (`if rank not in (-1, 0): return`) limits what follows as the test itself would.
_MAIN_VALUES = {-1, 0}
_RANK_NAME = re.compile(r"(?:\w+\.)*\w*rank\w*|(?:\w+\.)*(?:gpu|gpu_id|device_id)", re.IGNORECASE)
# Lightning's decorators: the function runs on global rank 0 only (`rank_zero_experiment` runs a logger's
# `experiment` on rank 0 and hands the other ranks a DummyExperiment).
# Others of the same contract under other names: habitat's `@rank0_only`, mmcv's and ResNeSt's `@master_only`.
RANK_ZERO_DECORATOR = re.compile(r"(?:\w+\.)*(?:rank_zero_(?:only|experiment)|rank_?0_only|master_only|main_process_only)$")


def returned_test_kind(function: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    """``"global"`` for a short function returning a rank-0 test (``def is_primary(args): return args.rank == 0``),
    ``"local"`` for one returning a once-per-machine test, else ``""``."""
    if len(function.body) > 3:
        return ""
    texts = [ast.unparse(stmt.value) for stmt in function.body if isinstance(stmt, ast.Return) and stmt.value]
    # semseg's `main_process()` returns `... args.rank % args.ngpus_per_node == 0`: the first process
    # of each machine, a local-rank test whatever the function's name says.
    if any(PER_MACHINE.search(text) for text in texts):
        return "local"
    return "global" if any(GLOBAL_GUARD.search(LOCAL_GUARD.sub("", text))
                           and re.search(r"==\s*0|\bnot\b|is_main|master|primary|zero", text) for text in texts) else ""


def environ_presence(test: ast.expr) -> bool:
    """``"LOCAL_RANK" in os.environ``: whether a launcher set the variable, not which rank this is.

    Invariant: a launcher sets its variables in every process it starts, so the test holds on all of them
    (mistral-finetune's ``if "LOCAL_RANK" in os.environ: … logger.info("Going to init comms...")``): it limits
    nothing to one rank or one machine, whatever the variable's name."""
    return (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.In, ast.NotIn))
            and isinstance(test.left, ast.Constant) and isinstance(test.left.value, str)
            and re.fullmatch(r"(?:os\.)?environ", ast.unparse(test.comparators[0])) is not None)


def turns_distribution_off(branching: ast.If | ast.IfExp, child: ast.AST) -> bool:
    """``child`` is in the ``else:`` of ``branching`` and that ``else:`` sets the run's distributed switch to False
    (MAE's ``init_distributed_mode``: ``else: print('Not using distributed mode'); args.distributed = False;
    return``, taken when no launcher set RANK, WORLD_SIZE or SLURM_PROCID): the branch of a run of one process.

    Invariant: only an ``else:`` that says so itself, in its own statements. An ``else:`` of an environment test
    alone may be an ``mp.spawn`` worker's (``else: args.rank = gpu``), which every process runs; and a block that
    merely starts with the setting (bubbliiiing's ``if __name__ == "__main__": distributed = False  # or True``)
    says what a user may switch, not which branch runs."""
    if not isinstance(branching, ast.If) or child not in branching.orelse:
        return False
    block = branching.orelse
    return any(isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Constant) and stmt.value.value is False
               and any(DISTRIBUTED_TEST.search(ast.unparse(target)) for target in stmt.targets) for stmt in block)


def not_main_membership(test: ast.expr) -> bool:
    """``rank not in (-1, 0)``: a rank name's absence from a literal list, tuple or set of exactly -1 and 0."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.NotIn)):
        return False
    values = test.comparators[0]
    if not isinstance(values, (ast.List, ast.Tuple, ast.Set)):
        return False
    numbers = {_number(item) for item in values.elts}
    return len(values.elts) == 2 and numbers == _MAIN_VALUES and bool(_RANK_NAME.fullmatch(ast.unparse(test.left)))


def _number(node: ast.expr) -> object:
    """The value of a literal (``0``, ``-1``), else None."""
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, RecursionError):
        return None
