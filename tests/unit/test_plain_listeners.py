"""Where ``primus server run`` may serve without TLS: loopback only."""

from __future__ import annotations

import pytest

from primus.client.hosts import is_loopback
from primus.server.command import plain_listener_refusal


@pytest.mark.parametrize("listen", ["127.0.0.1:7448", "127.1.2.3:0", "[::1]:7448",
                                    "localhost:0", "https://127.0.0.1:2379",
                                    "http://[::1]:2379"])
def test_loopback_addresses_are_loopback(listen):
    assert is_loopback(listen)


@pytest.mark.parametrize("listen", ["0.0.0.0:7448", ":7448", "[::]:0", "10.0.0.1:7448",
                                    "primus.example:7448", "localhost.example:0",
                                    "[::ffff:10.0.0.1]:0", "https://10.0.0.1:2379"])
def test_every_interface_an_address_of_a_network_or_a_name_is_not_loopback(listen):
    assert not is_loopback(listen)


def test_a_plain_listener_off_loopback_is_refused_naming_its_option_and_the_remedy():
    assert plain_listener_refusal("127.0.0.1:0", "[::1]:0", "localhost:0") is None
    assert plain_listener_refusal(None, None, None) is None
    refused = plain_listener_refusal(None, "127.0.0.1:0", "0.0.0.0:9100")
    assert refused is not None
    assert refused.startswith("--metrics-listen 0.0.0.0:9100: the metrics are plain HTTP")
    assert "--tls-cert and --tls-key" in refused
