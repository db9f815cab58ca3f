"""Strategy names, options and one-process behaviour (no process group needed)."""

from __future__ import annotations

import importlib.util
import sys

import pytest
import torch

import paratrain as pt
from paratrain.errors import ConfigError, MissingDependencyError
from paratrain.strategy import STRATEGIES
from paratrain.strategy.unused_parameters import (
    reducer_parameter_names,
    unused_parameters_message,
)
from paratrain.strategy.weights import _checksum
from tests.strategy.recipes import BATCH, Net, run_single, sgd, train


def test_unknown_strategy_lists_the_valid_names():
    with pytest.raises(pt.ConfigError) as info:
        pt.Runtime(strategy="horovod")
    message = str(info.value)
    assert "'horovod'" in message
    for name in ("auto", "single", "dp", "ddp", "fsdp", "deepspeed"):
        assert name in message


def test_auto_is_single_for_one_process():
    assert pt.Runtime().strategy.name == "single"


def test_an_option_the_strategy_does_not_take_is_refused():
    with pytest.raises(pt.ConfigError) as info:
        pt.Runtime(strategy="ddp", find_unused_parameter=True)
    assert "find_unused_parameter" in str(info.value) and "find_unused_parameters" in str(info.value)


def test_deepspeed_without_the_package_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "deepspeed", None)  # what an environment without it sees
    with pytest.raises(MissingDependencyError) as info:
        pt.Runtime(strategy="deepspeed", zero_stage=2)
    assert "pip install 'paratrain[deepspeed]'" in str(info.value)


def test_fsdp_with_one_process_is_refused():
    with pytest.raises(pt.ConfigError) as info:
        pt.Runtime(strategy="fsdp")
    assert "nproc-per-node" in str(info.value) and "strategy='single'" in str(info.value)


def test_only_sharded_strategies_declare_sharded_state():
    from paratrain.strategy.fsdp import FSDPStrategy

    sharded = {name for name, cls in STRATEGIES.items() if issubclass(cls, FSDPStrategy)}  # fsdp and its kind (hsdp)
    sharded |= {"ft-fsdp"} & set(STRATEGIES)  # FSDP2 inside each replica group
    assert {name for name, cls in STRATEGIES.items() if cls.sharded_state} == sharded >= {"fsdp"}
    assert not STRATEGIES["deepspeed"].sharded_state  # deepspeed checkpoints gather whole tensors


def test_dp_trains_like_single():
    # Without CUDA, DataParallel runs the module as is; the numbers must not change.
    want = run_single(batch=2 * BATCH)
    rt = pt.Runtime(strategy="dp", seed=1234)
    model = Net()
    optimizer = sgd(model.parameters())
    model, optimizer = rt.setup(model, optimizer)
    assert isinstance(model, torch.nn.DataParallel)
    got = train(rt, model, optimizer, batch=2 * BATCH)
    assert got["losses"] == want["losses"]
    assert rt.unwrap(model).state_dict().keys() == Net().state_dict().keys()  # no "module." prefix


def test_ddp_with_one_process_runs_unwrapped():
    rt = pt.Runtime(strategy="ddp", seed=1234)
    model = rt.setup(Net())
    assert type(model) is Net
    got = train(rt, model, sgd(model.parameters()), batch=2 * BATCH, steps=3)
    assert got["losses"] == run_single(batch=2 * BATCH, steps=3)["losses"]


def test_accumulate_counts_micro_steps_and_steps_on_the_last():
    rt = pt.Runtime(strategy="single", seed=0)
    model = rt.setup(torch.nn.Linear(2, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    stepped = []
    for _ in range(8):
        before = model.weight.detach().clone()
        with rt.accumulate(model, steps=4):
            rt.backward(model(torch.ones(1, 2)).sum())
            rt.step(optimizer)
        stepped.append(not torch.equal(before, model.weight))
    assert stepped == [False, False, False, True] * 2
    with pytest.raises(pt.ConfigError), rt.accumulate(model, steps=0):
        pass
    with pytest.raises(pt.ConfigError, match="nested"), rt.accumulate(model, steps=2), rt.accumulate(model, steps=2):
        pass


def test_unused_parameter_indices_map_to_names_in_ddp_order():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2), torch.nn.Linear(2, 1))
    model[0].requires_grad_(False)  # frozen parameters are not in DDP's list
    assert reducer_parameter_names(model) == ["1.weight", "1.bias", "2.weight", "2.bias"]
    error = RuntimeError(
        "Expected to have finished reduction in the prior iteration before starting a new one. ...\n"
        "Parameter indices which did not receive grad for rank 1: 2 3\n In addition, ..."
    )
    message = unused_parameters_message(model, error)
    assert "rank 1" in message and "2.weight, 2.bias" in message and "find_unused_parameters=True" in message
    assert unused_parameters_message(model, RuntimeError("CUDA out of memory")) is None


def test_weight_checksum_is_exact_and_sees_permutations():
    weights = torch.randn(1000)
    assert torch.equal(_checksum(weights), _checksum(weights.clone()))
    assert not torch.equal(_checksum(weights), _checksum(weights.flip(0)))
    nudged = weights.clone()
    nudged[500] = torch.nextafter(nudged[500], torch.tensor(10.0))
    assert not torch.equal(_checksum(weights), _checksum(nudged))


# ---- a strategy owns its options; objects, and what registers ---------------------------------------------


def test_a_built_strategy_or_precision_object_stands_for_its_name_and_options():
    given = pt.DDP(find_unused_parameters=True)
    rt = pt.Runtime(strategy=given, precision=pt.BF16Mixed())
    assert rt.strategy is not given and rt.strategy.name == "ddp"  # the Runtime connects a copy of its own
    assert rt.strategy.options.find_unused_parameters is True and rt.precision.name == "bf16-mixed"
    rt.close()
    with pytest.raises(pt.ConfigError, match="give the options to the strategy object"):
        pt.Runtime(strategy=given, bucket_cap_mb=1)
    with pytest.raises(pt.ConfigError, match="find_unused_parameters must be bool, got 'yes'"):
        pt.DDP(find_unused_parameters="yes")
    with pytest.raises(pt.ConfigError, match="strategy 'fsdp' does not take grad_compression; it accepts: wrap_modules"):
        pt.FSDP(grad_compression="bf16")


def test_the_options_dataclass_is_where_the_checks_come_from():
    assert pt.DDP.option_names() == tuple(f.name for f in __import__("dataclasses").fields(pt.DDP.Options))
    assert set(pt.FSDP.option_names()) < set(pt.HSDP.option_names())  # hsdp: fsdp's and the mesh's
    with pytest.raises(pt.ConfigError, match="must be 1, 2 or 3, got 4"):
        pt.DeepSpeed.parse_options({"zero_stage": 4})


def test_a_registered_strategy_is_a_name_everywhere(monkeypatch):
    from dataclasses import dataclass

    from paratrain.arguments import option_field
    from paratrain.runtime.resolve import resolve

    monkeypatch.setattr("paratrain.strategy.STRATEGIES", dict(STRATEGIES))  # undone after the test

    @pt.register_strategy
    class LoggingDDP(pt.DDP):
        name = "logging-ddp"

        @dataclass(frozen=True)
        class Options(pt.DDP.Options):
            every: int = option_field(10, "log the gradient norm every N steps", metavar="N")

    from paratrain import strategy

    assert strategy.STRATEGIES["logging-ddp"] is LoggingDDP and "logging-ddp" in strategy.strategy_names()
    assert resolve("logging-ddp", world_size=2, strategy_options={"every": 5}).strategy_class is LoggingDDP
    with pytest.raises(pt.ConfigError, match="'every' must be|every must be int"):
        resolve("logging-ddp", world_size=2, strategy_options={"every": "often"})
    with pytest.raises(pt.ConfigError, match="register_strategy takes a Strategy subclass"):
        pt.register_strategy(object)


def test_a_registered_precision_is_a_name(monkeypatch):
    from paratrain import precision

    monkeypatch.setattr("paratrain.precision.PRECISIONS", dict(precision.PRECISIONS))

    @pt.register_precision
    class LoudFP32(pt.FP32):
        name = "32-loud"

    assert pt.Runtime(precision="32-loud").precision.name == "32-loud"
    assert pt.Runtime(precision=LoudFP32()).precision.name == "32-loud"


def test_a_registered_environment_gives_workers_their_place_and_launchers_their_node_flags():
    from paratrain.env import ENVIRONMENTS, ProcessInfo, detect
    from paratrain.launch.env_defaults import environment_defaults

    class Grid(pt.ClusterEnvironment):
        name = "grid"

        def detected(self, environ):
            return "GRID_TASK" in environ

        def read(self, environ):
            return ProcessInfo(rank=int(environ["GRID_TASK"]), local_rank=0, world_size=2, local_world_size=1,
                               node_rank=int(environ["GRID_TASK"]), num_nodes=2, master_addr="10.0.0.1",
                               master_port=2999, source=self.name)

        def launch_defaults(self, environ):
            info = self.read(environ)
            return {"nnodes": 2, "node_rank": info.node_rank, "master_addr": "10.0.0.1", "master_port": 2999}

    before = list(ENVIRONMENTS)
    try:
        pt.register_environment(Grid())
        assert [e.name for e in ENVIRONMENTS][:2] == ["torchrun", "grid"]  # torchrun's still describe its workers
        assert detect({"GRID_TASK": "1"}).source == "grid" and detect({"GRID_TASK": "1"}).rank == 1
        assert environment_defaults({"GRID_TASK": "1"}) == {"nnodes": 2, "node_rank": 1, "master_addr": "10.0.0.1",
                                                            "master_port": 2999}
        assert environment_defaults({}) is None  # one plain process says nothing
    finally:
        ENVIRONMENTS[:] = before


def test_the_fit_loop_hands_its_clip_norm_to_a_strategy_whose_engine_clips():
    from paratrain.loop.config import FitConfig

    by_name = FitConfig(strategy="deepspeed", clip_norm=1.0).with_options(zero_stage=3)
    assert by_name.strategy_arguments() == {"strategy": "deepspeed", "zero_stage": 3, "gradient_clipping": 1.0}
    built = FitConfig(strategy=pt.DeepSpeed(zero_stage=3), clip_norm=1.0)  # an object is kept as its name and options
    assert (built.strategy, built.strategy_options) == ("deepspeed", {"zero_stage": 3})
    assert built.strategy_arguments() == by_name.strategy_arguments()
    assert FitConfig(strategy="ddp", clip_norm=1.0).strategy_arguments() == {"strategy": "ddp"}  # it clips in step


def test_the_strategies_page_lists_every_registered_strategy_and_option():
    from pathlib import Path

    page = (Path(__file__).parents[2] / "docs" / "strategies.md").read_text()
    rows: dict[str, str] = {}
    for line in page.splitlines():
        if line.startswith("| `"):
            rows.setdefault(line.split("|")[1].strip(" `"), line)  # the first table: names and options
    for name, cls in STRATEGIES.items():
        assert name in rows, f"docs/strategies.md has no row for {name!r}"
        inherited = {option for base in cls.__mro__[1:] if base in STRATEGIES.values() and f"`{base.name}`'s" in rows[name]
                     for option in base.option_names()}
        for option in set(cls.option_names()) - inherited:
            assert f"`{option}`" in rows[name], f"docs/strategies.md: {name}'s option {option!r} is missing"


def test_whether_the_loop_may_drop_a_step_is_the_strategys_to_say():
    from types import SimpleNamespace

    from paratrain.loop.config import FitConfig
    from paratrain.loop.preflight import check_options

    task = SimpleNamespace(name="t", metric_names=())
    with pytest.raises(pt.ConfigError, match=r"on_nonfinite='skip' does not work with strategy='deepspeed' \(its engine"):
        check_options(task, FitConfig(strategy="deepspeed", on_nonfinite="skip"))
    for name in ("ddp", "fsdp", "hsdp"):
        check_options(task, FitConfig(strategy=name, on_nonfinite="skip"))


def test_in_a_replica_group_only_a_strategy_that_joins_its_steps_is_taken(monkeypatch):
    """Inside a replica group (torchft's variables set) a strategy that would train the group alone is refused in one
    line that names what works: ft-ddp, and for a sharded one ft-fsdp."""
    from paratrain.strategy import STRATEGIES, choose_strategy

    monkeypatch.setenv("TORCHFT_LIGHTHOUSE", "http://127.0.0.1:29500")
    monkeypatch.setenv("REPLICA_GROUP_ID", "0")
    if importlib.util.find_spec("torchft") is not None:
        assert choose_strategy("ft-ddp", 2)[0] is STRATEGIES["ft-ddp"]
        assert choose_strategy("ft-fsdp", 2)[0] is STRATEGIES["ft-fsdp"]
    for name in ("auto", "ddp", "fsdp", "hsdp"):
        with pytest.raises(ConfigError) as refused:
            choose_strategy(name, 2)
        message = str(refused.value)
        shown = "ddp" if name == "auto" else name
        assert "\n" not in message and message.startswith(f"strategy '{shown}' runs here in a replica group"), message
        assert "only 'ft-ddp' and 'ft-fsdp' join the groups' steps" in message, message
        assert ("use strategy='ft-fsdp' to shard the model" in message) == (name in ("fsdp", "hsdp")), message
    monkeypatch.delenv("REPLICA_GROUP_ID")
    assert choose_strategy("ddp", 2)[0] is STRATEGIES["ddp"]  # a Lighthouse address alone is no replica group
