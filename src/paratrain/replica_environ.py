"""The environment a fault-tolerant launch gives every replica group, named once.

``paratrain run --fault-tolerance replicas`` (:mod:`paratrain.launch.replica_groups`) writes these
variables and ``strategy="ft-ddp"`` (:mod:`paratrain.strategy.ft_ddp`) reads them; the two sides
live in different layers, so the names live here, below both; so does the clock of the groups' liveness, which
the Lighthouse (launcher side) and every group's Manager (ft-ddp's side) must agree on.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

#: torchft's own names: the Lighthouse's address, this group's index, the number of groups.
LIGHTHOUSE_ENV, GROUP_ENV, GROUPS_ENV = "TORCHFT_LIGHTHOUSE", "REPLICA_GROUP_ID", "NUM_REPLICA_GROUPS"
#: The address of this node that the other groups reach (set by ``paratrain run --fault-tolerance replicas
#: --nnodes M``: the one that routes to node 0); without it a group uses ``MASTER_ADDR``, its own (one node).
ADDRESS_ENV = "PARATRAIN_FT_ADDRESS"

#: The clock of the groups' liveness, which bounds the survivors' pause after a group is killed
#: (docs/fault-tolerance.md, "The pause after a kill"). Every group's Manager server heartbeats to the Lighthouse every
#: ``HEARTBEAT_INTERVAL_MS`` (torchft's default, given explicitly so that the timeout below stays its multiple).
HEARTBEAT_INTERVAL_MS = 100
#: Heartbeats in a row a group may miss and stay in the quorum: the Lighthouse drops a group whose heartbeat
#: stopped for ``HEARTBEAT_MISSES × HEARTBEAT_INTERVAL_MS`` (1 s; torchft's default is 5 s). A live group is
#: dropped only if its Manager server's thread waits for a core longer than the timeout less one interval
#: (0.9 s); the worst wait measured on a loaded 2-core machine is in docs/fault-tolerance.md.
HEARTBEAT_MISSES = 10
HEARTBEAT_TIMEOUT_MS = HEARTBEAT_MISSES * HEARTBEAT_INTERVAL_MS
#: How long a quorum waits for a group that heartbeats but has not asked for it (a group still starting, or
#: stuck; torchft's default is 60 s). Not a term of the pause after a kill: a dead group stops heartbeating, so
#: it leaves after ``HEARTBEAT_TIMEOUT_MS`` however long this is.
JOIN_TIMEOUT_MS = 2000
#: The variables that set the two timeouts above for one launch.
HEARTBEAT_TIMEOUT_ENV, JOIN_TIMEOUT_ENV = "PARATRAIN_FT_HEARTBEAT_TIMEOUT_MS", "PARATRAIN_FT_JOIN_TIMEOUT_MS"
#: How often the Lighthouse looks again at a quorum that is waiting (torchft's default is 100 ms): the delay
#: between a dead group's heartbeat timeout and the survivors' quorum.
QUORUM_TICK_MS = 50


def liveness_ms(environ: Mapping[str, str] | None = None) -> tuple[int, int]:
    """The Lighthouse's heartbeat and join timeouts in milliseconds: the defaults above, or the variables'.

    Raises:
        ConfigError: a value that is not a whole number of milliseconds, or a heartbeat timeout under two
            heartbeat intervals (a live group would be dropped between two of its own heartbeats); the line names
            the variable and a value to write.
    """
    from paratrain.errors import ConfigError

    environ = os.environ if environ is None else environ
    least = {HEARTBEAT_TIMEOUT_ENV: 2 * HEARTBEAT_INTERVAL_MS, JOIN_TIMEOUT_ENV: 1}
    values = {HEARTBEAT_TIMEOUT_ENV: HEARTBEAT_TIMEOUT_MS, JOIN_TIMEOUT_ENV: JOIN_TIMEOUT_MS}
    for name, default in list(values.items()):
        text = environ.get(name, "").strip()
        if not text:
            continue
        if not text.isdigit() or int(text) < least[name]:
            raise ConfigError(f"{name}={text!r} must be a whole number of milliseconds of at least {least[name]} "
                              f"(the default is {default}); unset it or write e.g. {name}={default}")
        values[name] = int(text)
    return values[HEARTBEAT_TIMEOUT_ENV], values[JOIN_TIMEOUT_ENV]


def in_replica_group(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process is one of a replica group's: torchft's Lighthouse and group index are set (by
    ``paratrain run --fault-tolerance replicas``, or by hand for torchft)."""
    environ = os.environ if environ is None else environ
    return bool(environ.get(LIGHTHOUSE_ENV)) and GROUP_ENV in environ


def url_host(host: str) -> str:
    """``host`` as it goes in a URL or a ``HOST:PORT`` pair: an IPv6 literal in brackets (``[fd00::1]``)."""
    host = host.strip("[]")
    return f"[{host}]" if ":" in host else host


def lighthouse_url(value: str, source: str = LIGHTHOUSE_ENV) -> str:
    """The Lighthouse's address as torchft dials it, ``http://HOST:PORT``, from ``value``: that form, or
    ``HOST:PORT`` (``http://`` is added); an IPv6 literal in brackets (``http://[::1]:29500``, ``[::1]:29500``).

    Raises:
        ConfigError: any other form (an IPv6 literal without brackets, no port, a path, another scheme); the
            line names ``source`` and the form to write.
    """
    from urllib.parse import urlsplit

    from paratrain.errors import ConfigError

    text = value.strip()
    given = text if "://" in text else f"http://{text}"
    parsed = urlsplit(given)
    netloc = parsed.netloc
    example = "http://10.0.0.1:29500 or, for IPv6, http://[fd00::1]:29500"
    if netloc.count(":") > 1 and not netloc.startswith("["):
        host, _, port = netloc.rpartition(":")
        if not port.isdigit() or _is_ipv6(netloc):  # fd00::1 alone: no port
            host, port = netloc, "PORT"
        raise ConfigError(f"{source}={value!r}: an IPv6 address goes in brackets before the port; write "
                          f"http://[{host}]:{port}")
    try:
        port = parsed.port
    except ValueError:
        port = None
    if parsed.scheme != "http" or not parsed.hostname or port is None or parsed.path.strip("/") \
            or parsed.query or parsed.username:
        raise ConfigError(f"{source}={value!r} is not the Lighthouse's http://HOST:PORT; write {example}")
    return f"http://{url_host(parsed.hostname)}:{port}"


def _is_ipv6(text: str) -> bool:
    import ipaddress

    try:
        return ipaddress.ip_address(text.split("%")[0]).version == 6
    except ValueError:
        return False
