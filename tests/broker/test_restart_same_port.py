"""A broker restarted on the same port starts at once: connections of the stopped one left in TIME-WAIT on that
port do not make it look taken."""

from __future__ import annotations

import socket
import time

from kai_stream.broker import EmbeddedBroker, free_port, port_free


def _time_wait_on(port: int) -> None:
    """Leave a server-side connection of ``port`` in TIME-WAIT (the server closes first), then stop listening."""
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen()
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = listener.accept()
        accepted.close()
        time.sleep(0.05)
        client.close()


def test_a_port_in_time_wait_is_free_but_one_listened_on_is_not() -> None:
    port = free_port()
    _time_wait_on(port)
    assert port_free("127.0.0.1", port)
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen()
        assert not port_free("127.0.0.1", port)


def test_the_embedded_broker_restarts_on_its_port_at_once() -> None:
    port = free_port()
    with EmbeddedBroker(memory=True, port=port) as first:
        assert first.port == port
    _time_wait_on(port)
    started = time.monotonic()
    with EmbeddedBroker(memory=True, port=port, startup_timeout_s=10) as second:
        assert second.port == port
    assert time.monotonic() - started < 10
