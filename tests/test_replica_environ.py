"""The Lighthouse's address forms: what torchft dials, and the one-line refusals of the rest."""

from __future__ import annotations

import pytest

from paratrain.errors import ConfigError
from paratrain.replica_environ import lighthouse_url, url_host


def test_lighthouse_addresses_become_http_host_port_with_ipv6_in_brackets():
    assert lighthouse_url("http://10.0.0.1:29500") == "http://10.0.0.1:29500"
    assert lighthouse_url("node0:29500") == "http://node0:29500"
    assert lighthouse_url("http://[fd00::1]:29500/") == "http://[fd00::1]:29500"
    assert lighthouse_url("[::1]:29500") == "http://[::1]:29500"
    assert url_host("fd00::1") == url_host("[fd00::1]") == "[fd00::1]" and url_host("10.0.0.1") == "10.0.0.1"


@pytest.mark.parametrize("given, fix", [
    ("http://::1:29500", "write http://[::1]:29500"),
    ("fd00::1:29500", "write http://[fd00::1]:29500"),
    ("fd00::1", "write http://[fd00::1]:PORT"),
    ("http://[::1]", "is not the Lighthouse's http://HOST:PORT; write http://10.0.0.1:29500 or, for IPv6, "
                     "http://[fd00::1]:29500"),
    ("https://node0:29500", "is not the Lighthouse's http://HOST:PORT"),
    ("http://node0:29500/quorum", "is not the Lighthouse's http://HOST:PORT"),
])
def test_other_forms_are_refused_in_one_line_that_writes_the_fix(given, fix):
    with pytest.raises(ConfigError) as refused:
        lighthouse_url(given)
    message = str(refused.value)
    assert "\n" not in message and message.startswith(f"TORCHFT_LIGHTHOUSE={given!r}") and fix in message, message
