"""Fault-tolerant data parallelism per step (torchft): replica groups that come and go while the
survivors keep training.

A replica group is one torchrun agent of ``paratrain run --fault-tolerance replicas``: ``K``
processes (``--nproc-per-node K``) joined by their own process group, the *group*. Each of them
runs a torchft ``Manager``; group rank 0's also runs the group's Manager server, which speaks for
the group to the Lighthouse. Every step the Lighthouse says which groups are alive (the
*quorum*) and each group rank ``i`` joins a process group of its own over rank ``i`` of every
group of the quorum, its *ring* (torchft's layout: store prefix ``…/<quorum>/<group rank>``). A
group that joins (a fresh start or a relaunch after a crash) first receives, rank ``i`` from rank
``i`` of a live group, the weights, optimizer state and data cursor over HTTP (*healing*).

The gradients are reduced in two levels, as HSDP's are (:mod:`paratrain.strategy.ft_gradients`):
inside the group, an all-reduce (a plain process group: its members live and die together); across
groups, group rank ``i`` all-reduces only the ``i``-th of ``K`` chunks of each gradient bucket over its
ring; a second all-reduce inside the group hands every rank the chunks of the others. Each rank sends
``1/K`` of the gradients across groups, the slow links of a job of many nodes. A ring whose peer died fails that rank's all-reduce; it is
reported to the rank's Manager instead of raised, the group's commit vote (every rank must say
yes) drops the step in the whole group, the optimizer does not step, and the next step — one
quorum later, without the dead group — trains the same samples again
(:mod:`paratrain.data.committed_slices`). Survivors never restart. A group whose process died is
ended whole by its agent and started again whole by the launcher.

The step, from the user's loop::

    batch = next(loader)     # quorum (heals a joining group), then this process's part of the next slice
    rt.backward(loss)        # loss × part·P/slice; inside the group, this rank's chunk across groups, inside
    rt.step(opt)             # commit?  yes: clip, step, cursor += slice   no: drop the gradients

Bounded everywhere: the quorum waits ``quorum_timeout`` seconds, every collective, commit and
healing transfer ``collective_timeout``, a rank of the group that never reaches a quorum or a vote
is named after a barrier of ``collective_timeout``, and a group that fails ``heal_retries`` steps in a
row (it cannot heal, or its peers keep failing) stops with one line naming itself, so its launcher
restarts it instead of it stalling the others.

A model sharded inside each group: :mod:`paratrain.strategy.ft_fsdp` (``ft-fsdp``), this class with FSDP2.
"""

from __future__ import annotations

import importlib.util
import os
import socket
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import torch

from paratrain import comm
from paratrain.arguments import option, option_field
from paratrain.errors import CollectiveTimeoutError, ConfigError, DistributedError, MissingDependencyError
from paratrain.env.api import env_int
from paratrain.replica_environ import (ADDRESS_ENV, GROUP_ENV, HEARTBEAT_INTERVAL_MS, LIGHTHOUSE_ENV, lighthouse_url,
                                       url_host)
from paratrain.store_server import store_server
from paratrain.strategy import register_strategy
from paratrain.strategy.api import NOT_STEPPED, Strategy, StepResult, StrategyOptions
from paratrain.strategy.ft_gradients import reporting_ddp
from paratrain.strategy.weights import broadcast_module

_NEEDS = ("torchft", "ft", "strategy 'ft-ddp'")  # module, paratrain extra, what needs it


def group_address() -> str:
    """The address this group's store listens on and its Manager and checkpoint server advertise."""
    return os.environ.get(ADDRESS_ENV) or os.environ.get("MASTER_ADDR") or "127.0.0.1"


def replica_group() -> int:
    """This process's replica group (``REPLICA_GROUP_ID``; 0 outside a fault-tolerant launch).

    Raises:
        ConfigError: the variable is not an integer (named)."""
    return env_int(os.environ, GROUP_ENV, 0)


def _unreachable(url: str, timeout_s: float) -> str | None:
    """Why a TCP connection to the Lighthouse at ``url`` (``http://HOST:PORT``) fails, or None."""
    parsed = urlsplit(url)
    try:
        port = parsed.port
    except ValueError:
        port = None
    if not parsed.hostname or port is None:
        return f"{url!r} is not http://HOST:PORT"
    try:
        socket.create_connection((parsed.hostname, port), timeout=timeout_s).close()
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    return None


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]


@register_strategy
class FTDDPStrategy(Strategy):
    """Per-step fault-tolerant DDP over replica groups (``pt.Runtime(strategy="ft-ddp")``), with
    :class:`FTDDPStrategy.Options`. Needs ``pip install 'paratrain[ft]'`` and a Lighthouse
    (``paratrain run --fault-tolerance replicas`` starts one)."""

    name = "ft-ddp"
    joins_replica_groups = True
    refuses_skipped_steps = "ft-ddp's commit decides whether a step's update is applied"
    refuses_fit_loop = ("its data follows the committed steps of the replica groups; train in an own loop with "
                        "pt.Runtime, rt.loader and rt.step (docs/fault-tolerance.md)")

    @dataclass(frozen=True)
    class Options(StrategyOptions):
        min_replicas: int = option_field(1, "fewest replica groups a step may commit with", metavar="N")
        quorum_timeout: float = option_field(30.0, "seconds a step waits for the Lighthouse's quorum",
                                             metavar="SECONDS")
        collective_timeout: float = option_field(
            10.0, "seconds for each all-reduce, commit vote and healing transfer", metavar="SECONDS")
        heal_retries: int = option_field(5, "steps in a row a replica group may fail to commit (cannot heal, "
                                         "peers failing) before it stops so its launcher restarts it", metavar="N")

        def __post_init__(self) -> None:
            """Raises:
            ConfigError: a value of the wrong type, or not positive.
            """
            super().__post_init__()
            for name in ("min_replicas", "quorum_timeout", "collective_timeout", "heal_retries"):
                if getattr(self, name) <= 0:
                    raise ConfigError(f"ft-ddp {option(name)} must be positive, got {getattr(self, name)!r}")

    @classmethod
    def check(cls, world_size, options, sync_batchnorm=False, compile=False) -> None:
        """Any number of processes per replica group (``world_size`` is the group's).

        Raises:
            MissingDependencyError: torchft is not installed.
        """
        if importlib.util.find_spec(_NEEDS[0]) is None:
            raise MissingDependencyError(*_NEEDS)

    def connect(self, process, device, precision, sync_batchnorm=False, compile=False) -> FTDDPStrategy:
        """Also starts this rank's torchft ``Manager``; group rank 0's runs the group's Manager server,
        which registers with the Lighthouse named by ``TORCHFT_LIGHTHOUSE``. Collective over the group.

        Raises:
            ConfigError: ``TORCHFT_LIGHTHOUSE`` is not set or not ``http://HOST:PORT`` (an IPv6 literal in
                brackets: ``http://[::1]:29500``; ``HOST:PORT`` alone is taken too), or the group's address (:func:`group_address`) is
                not one of this machine (on every rank of the group).
            DistributedError: the Lighthouse cannot be reached within ``collective_timeout`` (on every
                rank of the group).
            CollectiveTimeoutError: a rank of the group did not reach the Manager's start in time (names it).
        """
        super().connect(process, device, precision, sync_batchnorm, compile)
        lighthouse = os.environ.get(LIGHTHOUSE_ENV)
        if not lighthouse:
            raise ConfigError(f"strategy 'ft-ddp' needs a Lighthouse: set {LIGHTHOUSE_ENV}=http://HOST:PORT, or start "
                              "the job with paratrain run --fault-tolerance replicas --replica-groups N")
        o = self.options
        self.group = replica_group()
        self.lighthouse = lighthouse_url(lighthouse)  # http://HOST:PORT, an IPv6 literal in brackets
        self.group_rank, self.group_size = process.rank, process.world_size
        self._store = None
        self.manager = None
        # Group rank 0 first: its Manager server writes its address into the group's store, where the
        # other ranks' Managers read it. They wait in a barrier bounded by the server's own connect
        # timeout, and learn the port — or rank 0's refusal, to raise the same line — from it.
        failure, port = None, None
        if self.group_rank == 0:
            try:
                port = self._start_manager(None)
            except (ConfigError, DistributedError) as exc:
                failure = (type(exc) is ConfigError, str(exc))
        comm.barrier(timeout=2 * o.collective_timeout + 5, name=f"replica group {self.group}: the start of its Manager")
        failure, port = comm.broadcast_object((failure, port))
        if failure is not None:
            config, message = failure
            raise (ConfigError if config else DistributedError)(message)
        if self.group_rank != 0:
            self._start_manager(port)
        self.loss_weight = 1.0
        self._members: tuple[int, ...] = ()  # the groups of the last quorum
        self._slices = None  # the data cursor of the training loader, moved on commit
        return self

    def _start_manager(self, store_port: int | None) -> int:
        """This rank's Manager on the group's store; returns the store's port. Group rank 0 (``store_port``
        None) first checks that the Lighthouse answers, then makes the store.

        Raises:
            ConfigError: the store cannot listen on the group's address (:func:`group_address`).
            DistributedError: the Lighthouse cannot be reached.
        """
        from torchft import Manager

        from paratrain.strategy.ft_rings import ring as new_ring

        o = self.options
        timeout = timedelta(seconds=o.collective_timeout)
        # The group's own store: the rings of a quorum whose primary this group is rendezvous on it.
        # It listens on the group's address only (127.0.0.1 on one machine; on several, the address of
        # this node that routes to node 0), and the Manager and checkpoint servers advertise the same
        # address: torchft's default, the host name, may not resolve where the other groups run.
        host = group_address()
        if store_port is None:
            # Asked before torchft's Manager starts: its server binds every address first and, when the
            # Lighthouse then cannot be reached, stays listening in this process.
            unreachable = _unreachable(self.lighthouse, o.collective_timeout)
            if unreachable:
                raise self._lighthouse_error(unreachable)
            try:
                self._store = store_server(host, 0, o.collective_timeout)  # on the group's address only
            except OSError as exc:
                variable = ADDRESS_ENV if os.environ.get(ADDRESS_ENV) else "MASTER_ADDR"
                raise ConfigError(f"replica group {self.group} cannot listen on {variable}={host} ({exc.strerror}); "
                                  f"set {variable} to an address of this machine") from None
            store_port = self._store.port
        ring = new_ring(self.device.type, timeout)  # its set-up waits ROLL_CALL_S, not `timeout`, for a dead member
        try:
            self.manager = Manager(
                pg=ring, load_state_dict=None, state_dict=None, min_replica_size=o.min_replicas,
                # The quorum is known before the forward: the data split needs the groups of this step,
                # and a joining group heals before it trains (it then takes part in the same step).
                use_async_quorum=False,
                timeout=timeout, quorum_timeout=timedelta(seconds=o.quorum_timeout), connect_timeout=timeout,
                rank=self.group_rank, world_size=self.group_size, store_addr=host, store_port=store_port,
                lighthouse_addr=self.lighthouse, replica_id=f"group{self.group}", max_retries=o.heal_retries,
                heartbeat_interval=timedelta(milliseconds=HEARTBEAT_INTERVAL_MS),  # the Lighthouse's timeout: × 10
                # torchft's Manager server advertises http://{hostname}:{port}: an IPv6 literal needs brackets.
                hostname=url_host(host), checkpoint_transport=_advertising_transport(host, timeout),
            )
        except RuntimeError as exc:  # torchft's Rust client: "failed to connect to … within timeout"
            self._store = None  # a refused start leaves nothing listening in the process
            raise self._lighthouse_error(_first_line(exc)[:120]) from exc
        return store_port

    def _lighthouse_error(self, reason: str) -> DistributedError:
        return DistributedError(
            f"replica group {self.group} cannot reach the Lighthouse at {self.lighthouse} within "
            f"{self.options.collective_timeout:g} s ({reason}); check {LIGHTHOUSE_ENV}, or start the job "
            "with paratrain run --fault-tolerance replicas")

    # ---- what a healing group receives ----------------------------------------------------------
    def heal_with(self, key: str, stateful: Any) -> None:
        """Send ``stateful``'s ``state_dict()`` to groups that heal from this one, and load what this
        group receives when it heals. Register before the first step."""
        self.manager.register_state_dict_fn(key, stateful.load_state_dict, stateful.state_dict)

    def wrap(self, module: torch.nn.Module, optimizers: list[torch.optim.Optimizer]) -> torch.nn.Module:
        if not any(p.requires_grad for p in module.parameters()):
            raise ConfigError("strategy 'ft-ddp' needs a model with trainable parameters; this one has none")
        self.heal_with("model", module)
        for index, optimizer in enumerate(optimizers):
            self.heal_with(f"optimizer{index}", optimizer)
        self.heal_with("precision", self.precision)
        broadcast_module(module)  # the group starts from group rank 0's weights (the rings then agree at step 0)
        return reporting_ddp()(self.manager, module)

    def training_loader(self, dataset: Any, batch_size: int, seed: int | None, options: dict[str, Any]) -> Any:
        """A loader whose every batch is this group's part of the next committed slice
        (:class:`FTLoader`); ``batch_size`` is the global batch over all groups."""
        from paratrain.strategy.ft_loader import FTLoader

        options = dict(options)
        seed = options.pop("seed", None) or seed or 0  # rt.loader(seed=…) over the Runtime's
        loader = FTLoader(self, dataset, batch_size, seed=seed, **options)
        self._slices = loader.slices
        self.heal_with("data", loader.slices)
        return loader

    # ---- one step ---------------------------------------------------------------------------------
    def begin_step(self) -> tuple[int, int]:
        """Wait for this step's quorum (a joining group heals here); returns ``(part, parts)``: which
        of the step's ``groups × group size`` parts of the data this rank trains (group-major: the
        parts of one group are next to each other).

        Raises:
            DistributedError: no quorum within ``quorum_timeout`` (names this group and the Lighthouse).
            CollectiveTimeoutError: no quorum because ranks of this group did not ask for it (names them).
        """
        try:
            self.manager.start_quorum()
            rank, world = self.manager.participating_rank(), self.manager.num_participants()
        except Exception as exc:  # torchft raises plain RuntimeErrors from its Rust client
            self._name_late_ranks("the quorum", exc)
            raise DistributedError(
                f"replica group {self.group}: no quorum from the Lighthouse at {self.lighthouse} within "
                f"{self.options.quorum_timeout:g} s ({_first_line(exc)}); is the Lighthouse alive?") from exc
        if rank is None:  # FIXED_WITH_SPARES is not used: every group of the quorum takes part
            raise DistributedError(f"replica group {self.group} is not part of the quorum of step "
                                   f"{self.manager.current_step()}")
        self._say_who_left()
        return rank * self.group_size + self.group_rank, world * self.group_size

    def _say_who_left(self) -> None:
        """One line when groups leave the quorum (dead, or stuck: not at the step within the Lighthouse's
        join timeout) and when they join. The members are the group indices torchft gave the quorum's
        ring (``replica_id`` ``group<g>`` → global rank ``g × group size + group rank``)."""
        ranks = getattr(self.manager._pg, "_global_ranks", None) or ()
        members = tuple((rank - self.group_rank) // self.group_size for rank in ranks)
        before, self._members = self._members, members
        if not before or members == before or self.group_rank != 0:
            return
        step = self.manager.current_step()
        left, joined = sorted(set(before) - set(members)), sorted(set(members) - set(before))
        if left:
            comm.get_logger().warning(
                f"replica group {self.group}: group(s) {', '.join(map(str, left))} left the quorum at step {step} "
                f"(dead, or stuck and not at the step in time); training goes on with {len(members)} group(s)")
        if joined:
            comm.get_logger().info(f"replica group(s) {', '.join(map(str, joined))} joined the quorum at step {step}")

    def backward(self, loss: torch.Tensor, model: torch.nn.Module | None = None) -> None:
        """``loss × part·P/slice`` backward (``P`` processes in the step): the mean of the gradients over
        the processes of every group is then the slice's mean gradient, however unevenly it split."""
        self.guard.check_backward()
        self.precision.backward(loss * self.loss_weight if self.loss_weight != 1.0 else loss)

    def step(self, optimizer: torch.optim.Optimizer, clip_norm: float | None = None,
             model: torch.nn.Module | None = None) -> StepResult:
        """Ask every group of the quorum whether the step succeeded; step the optimizer and move
        the data cursor only if it did, else drop the gradients (the next step retrains the slice).

        Raises:
            DistributedError: this group failed ``heal_retries`` steps in a row (names it and the last error).
            CollectiveTimeoutError: ranks of this group did not vote within ``collective_timeout`` (names them).
        """
        if not self.accumulation.should_step:
            return NOT_STEPPED
        try:
            committed = self.manager.should_commit()
        except Exception as exc:
            self._name_late_ranks("the commit vote", exc)
            error = self.manager.errored()
            raise DistributedError(
                f"replica group {self.group} failed {self.options.heal_retries + 1} steps in a row at step "
                f"{self.manager.current_step()} (last error: {_first_line(error or exc)}); it stops so that its "
                "launcher restarts it and it heals from a live group") from exc
        if not committed:
            optimizer.zero_grad(set_to_none=True)
            self.accumulation.take_pending()
            return NOT_STEPPED
        result = super().step(optimizer, clip_norm=clip_norm, model=model)
        if self._slices is not None:
            self._slices.commit()
        return result

    def _name_late_ranks(self, what: str, exc: BaseException) -> None:
        """After the group's Manager server gave up on ``what`` (it waits for every rank of the group):
        raise naming the ranks of the group that are not there, found by a barrier bounded by
        ``collective_timeout``; return when they all are (the cause was elsewhere)."""
        if self.group_size == 1:
            return
        try:
            comm.barrier(timeout=self.options.collective_timeout, name=f"replica group {self.group}: {what}")
        except CollectiveTimeoutError as late:
            raise CollectiveTimeoutError(
                f"replica group {self.group} at step {self.manager.current_step()}: {what} did not complete "
                f"({_first_line(exc)[:120]}); {late}", late_ranks=late.late_ranks) from exc

    @property
    def committed_steps(self) -> int:
        """Steps this job committed (the same on every live group; travels with healing)."""
        return self.manager.current_step()

    def unwrap_wrapper(self, model: torch.nn.Module) -> torch.nn.Module:
        return getattr(model, "module", model)

    def state_dict(self) -> dict[str, Any]:
        """The Manager's step count, for disk checkpoints: a job restarted from disk continues the count."""
        return {"manager": self.manager.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.manager.load_state_dict(state["manager"])

    def close(self) -> None:
        """Stop this rank's Manager (group rank 0's server with it: the peers see the group leave at the next
        quorum)."""
        manager, self.manager = getattr(self, "manager", None), None
        if manager is not None:
            manager.shutdown(wait=False)


def _advertising_transport(host: str, timeout: timedelta) -> Any:
    """torchft's HTTP checkpoint transport (what a healing group fetches the weights from), advertising
    ``host``: torchft 0.2.0's names ``socket.gethostname()``, which another node (or network namespace)
    may not resolve to this one. It listens on every address, as torchft's does."""
    from torchft.checkpointing.http_transport import HTTPTransport

    shown = url_host(host)

    class AdvertisingHTTPTransport(HTTPTransport):
        def address(self) -> str:
            return f"http://{shown}:{self._server.socket.getsockname()[1]}/checkpoint/"

    return AdvertisingHTTPTransport(timeout=timeout, num_chunks=0)
