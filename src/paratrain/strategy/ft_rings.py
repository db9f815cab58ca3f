"""The rings of ``ft-ddp`` and ``ft-fsdp``: torchft's process groups across replica groups, set up after a roll call.

Every quorum with new members gets a new ring, set up on the quorum's store: gloo (NCCL on CUDA) waits there for
every member's address for the whole collective timeout. A replica group that asked for a quorum and died before
the quorum formed is still one of its members, one that never comes: the survivors would wait that whole timeout
(10 s) before their step is dropped (docs/fault-tolerance.md, "Outside the bound").

So before the set-up every member writes its presence in the quorum's store and waits at most
:data:`ROLL_CALL_S` for the others'. The members of a quorum reach that point together: they all waited for the
same answer from the Lighthouse (measured 0.03 s apart at a load average of 10–18), so a member still missing
after the roll call is dead or stuck. The set-up then fails at once, naming the missing ring ranks; torchft's
Manager records the error, the step is dropped as it would have been after the timeout, and the next quorum —
without the dead group once its heartbeats are a heartbeat timeout old — forms a ring of the living. A live member
that really came later than the roll call costs the same: one dropped step.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from paratrain.errors import DistributedError

#: Seconds the members of a new ring wait for each other's presence before the set-up.
ROLL_CALL_S = 2.0
_KEY = "paratrain/ring/present/{}"


def ring(device_type: str, timeout: timedelta) -> Any:
    """torchft's ring process group for ``device_type`` (NCCL on ``"cuda"``, else gloo) with ``timeout`` for its
    set-up and collectives, whose set-up first takes the roll call (:func:`roll_call`)."""
    from torchft import ProcessGroupGloo, ProcessGroupNCCL

    base = ProcessGroupNCCL if device_type == "cuda" else ProcessGroupGloo

    class RollCalledRing(base):  # type: ignore[misc, valid-type]
        def _create_pg(self, store: Any, rank: int, world_size: int) -> Any:
            roll_call(store, rank, world_size, min(ROLL_CALL_S, self._timeout.total_seconds()))
            return super()._create_pg(store, rank, world_size)

    return RollCalledRing(timeout=timeout)


def roll_call(store: Any, rank: int, world_size: int, timeout_s: float) -> None:
    """Say ``rank`` is here in ``store`` (one quorum's, from torchft), then wait up to ``timeout_s`` for every other
    rank of the ring. Collective over the ring's ``world_size`` ranks.

    Raises:
        DistributedError: ring ranks missing after ``timeout_s`` (named).
    """
    store.set(_KEY.format(rank), b"1")
    try:
        store.wait([_KEY.format(other) for other in range(world_size)], timedelta(seconds=timeout_s))
    except Exception:  # torch's DistStoreError (a RuntimeError): the keys did not all come in time
        missing = [other for other in range(world_size) if not store.check([_KEY.format(other)])]
        raise DistributedError(f"ring rank(s) {missing} of this quorum did not come within {timeout_s:g} s (a replica "
                               "group that died after it asked for the quorum); this step is dropped and the next "
                               "quorum forms without it") from None
