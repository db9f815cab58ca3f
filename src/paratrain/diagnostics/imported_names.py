"""What the functions a script imports from its own project are known to do, as the pitfall rules ask it.

Filled by :mod:`paratrain.diagnostics.project_facts` when ``paratrain check`` is given the script's path; empty
for a source read alone. Each fact is keyed by the callee as the script writes it (``save_model``,
``dist.data_sampler``), and holds only what the other file proves: an unknown is no entry, so the rules stay
quiet about it.
"""

from __future__ import annotations

import ast
import weakref
from dataclasses import dataclass, field

from paratrain.diagnostics.rank_argument_prints import RankArgumentPrint

_callees: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # call → callee: read once per call



@dataclass
class ImportedNames:
    read: set[str] = field(default_factory=set)  # every callee found and read in the project
    rank_tests: set[str] = field(default_factory=set)  # return a rank-0 test (`get_rank() == 0`)
    # return the global rank, whatever their name (neuraloperator's `comm.get_local_rank()` is `dist.get_rank()`)
    global_rank_getters: set[str] = field(default_factory=set)
    machine_tests: set[str] = field(default_factory=set)  # return a once-per-machine test (`rank % gpus == 0`)
    # → the DistributedSampler calls they return, in their own module (read for shuffle=/drop_last=)
    sampler_makers: dict[str, list[ast.Call]] = field(default_factory=dict)
    # → None when the logger is what they return, i: the i-th item of the tuple they return
    every_rank_loggers: dict[str, int | None] = field(default_factory=dict)  # INFO and a console handler, any rank
    # → (as every_rank_loggers, the level parameter's place and name): a console handler at the level the caller
    # passes (Uni3D's `setup_logging(path, level)`); verbose on every rank when the call passes INFO or DEBUG
    loggers_at_callers_level: dict[str, tuple[int | None, int, str]] = field(default_factory=dict)
    rank_aware_loggers: set[str] = field(default_factory=set)  # choose a level or handler by rank
    # call nothing of logging (no call named *log*), however they are named (`get_trainer_logger` making a
    # Lightning logger's config): they leave the process's loggers as they were
    logging_free: set[str] = field(default_factory=set)
    # standard-library modules bound by the script's star imports of its project's modules (`logging` → "logging")
    star_modules: dict[str, str] = field(default_factory=dict)
    # a launcher of the project imports the script after setting the root logger's level by rank (MSN's main.py)
    levels_chosen_by_importer: bool = False
    unguarded_savers: set[str] = field(default_factory=set)  # torch.save with no rank test of their own
    machine_savers: set[str] = field(default_factory=set)  # their every save under a local-rank test of their own
    # → (their positional parameters, for each save the arguments a call must pass for it to run): minimind's
    # `lm_checkpoint(cfg, model=model, …)` saves, `lm_checkpoint(cfg, weight=…)` only loads
    saver_arguments: dict[str, tuple[list[str], list[frozenset[str]]]] = field(default_factory=dict)
    # → (their positional parameters, the ones whose state_dict() they save): NVIDIA's
    # `eval_metrics(iou_acc, args, net, …)` puts `net.state_dict()` in the checkpoint's dict
    state_dict_savers: dict[str, tuple[list[str], set[str]]] = field(default_factory=dict)
    wrapper_makers: set[str] = field(default_factory=set)  # return a DistributedDataParallel/DataParallel module
    # of those, the ones that may return nn.DataParallel; and the project's objects that wrap their model in it
    # when built (`Exp(args)`) or when a method is called (`model.parallelize()`)
    data_parallel_makers: set[str] = field(default_factory=set)
    # → the torch class it derives from: a class of the project built on DataParallel or DistributedDataParallel
    wrapper_classes: dict[str, str] = field(default_factory=dict)
    joins_process_group: bool = False  # a called function calls init_process_group or wraps in DDP
    print_replaced: bool = False  # a called function replaces builtins.print (or stdout)
    print_replaced_at_import: bool = False  # an imported module's own statements do (DLRM's extend_distributed)
    print_replacers: set[str] = field(default_factory=set)  # the called functions that replace it
    # the job size above which a replacement lets every rank print (MAE's `force or get_world_size() > 8`)
    print_open_above: int | None = None
    reads_local_rank_env: bool = False  # a called function (or an imported module's import) reads LOCAL_RANK
    # → the parameter test their prints run under (`print_rank_0(msg, rank)`: `if rank <= 0: print(msg)`)
    rank_argument_prints: dict[str, RankArgumentPrint] = field(default_factory=dict)
    # parameter name → MASTER_PORT/MASTER_ADDR: a function of an imported module writes it there
    environ_parameters: dict[str, str] = field(default_factory=dict)
    attributes_read: set[str] = field(default_factory=set)  # `x.attr` a called function reads before setting it
    attributes_stored: set[str] = field(default_factory=set)  # `x.attr = …` in a called function
    # of those, the ones the same function tested before storing (`elif params.local_rank != -1: …` then
    # `params.local_rank = 0`): it decides on the value it was given
    attributes_read_then_stored: set[str] = field(default_factory=set)
    # (name the script binds, its call of a project builder, the DistributedSamplers of the loader bound there):
    # `valid_loader = build_dataloader(config, False, distributed)` (project_loaders.py)
    loader_bindings: list[tuple[str, ast.Call, list[ast.Call]]] = field(default_factory=list)
    # → the `add_argument("--local_rank", …)` call in a parser-building function the script calls (`get_args()`)
    local_rank_flags: dict[str, ast.Call] = field(default_factory=dict)
    # → (the variable, where its value is fixed): a called function writes MASTER_PORT/MASTER_ADDR from an option's
    # or a parameter's literal default, or a literal port base (project_rendezvous.py)
    fixed_rendezvous: dict[str, tuple[str, str]] = field(default_factory=dict)
    # → (the file, relative to the project's root, and line of a print it runs in every process that calls it)
    every_rank_prints: dict[str, tuple[str, int]] = field(default_factory=dict)
    # → (file, line, how it is heard) of an INFO/DEBUG logging line they run in every process, to the console:
    # "root" (through the root logger, heard where that is verbose), "level" (a logger set to INFO itself, heard
    # wherever the root logger has a console handler) or "own" (a logger verbose on its own) (project_logs.py)
    every_rank_logs: dict[str, tuple[str, int, str]] = field(default_factory=dict)
    root_verbose_at_import: bool = False  # a module of the project runs basicConfig(level=INFO) at its top
    # → (file, line) of the state_dict() they save of a DDP/DataParallel wrapper they made themselves
    wrapper_state_savers: dict[str, tuple[str, int]] = field(default_factory=dict)
    ddp_wrappers: set[str] = field(default_factory=set)  # wrap something in DistributedDataParallel (or call one that does)
    # → (file, line) of a BatchNorm layer in the model they build (`make_model(cfg)`), read only when the
    # script or a callee wraps in DDP and no module read mentions SyncBatchNorm
    batchnorm_builders: dict[str, tuple[str, int]] = field(default_factory=dict)
    # a module of the project read converts to SyncBatchNorm (syncbn_conversion.py: not in help texts, docstrings,
    # or behind a switch that is off unless passed)
    syncbn_in_project: bool = False
    off_options: set[str] = field(default_factory=set)  # argparse options of the project off unless passed

    @staticmethod
    def callee(call: ast.Call) -> str:
        """The key of a call: its function as written (``dist.data_sampler``); kept per call (every rule asks it of
        every call of the file)."""
        key = _callees.get(call)
        if key is None:
            key = _callees[call] = ast.unparse(call.func)
        return key
