"""Health/metrics servers are safe by default: loopback only, and each component on its own port, so three
components on one host all start."""

from __future__ import annotations

import pytest
from aiohttp import ClientSession, web

from kai_stream import observability
from kai_stream.broker import free_port
from kai_stream.observability import DEFAULT_HEALTH_PORTS, Health, HealthSettings, serve_health


def test_defaults_are_loopback_and_one_port_per_component(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("KAI_STREAM_HEALTH_HOST", "KAI_STREAM_HEALTH_PORT"):
        monkeypatch.delenv(name, raising=False)
    settings = HealthSettings()
    assert settings.host == "127.0.0.1"
    ports = [settings.port_for(c) for c in ("connector", "processor", "binder", "gpu-agent", "history-sink")]
    assert len(set(ports)) == len(ports)
    assert HealthSettings(port=9999).port_for("binder") == 9999


async def test_three_components_on_one_host_start_with_the_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("KAI_STREAM_HEALTH_HOST", "KAI_STREAM_HEALTH_PORT"):
        monkeypatch.delenv(name, raising=False)
    components = ("connector", "processor", "binder")
    monkeypatch.setattr(observability, "DEFAULT_HEALTH_PORTS", {c: free_port() for c in components})
    runners: list[web.AppRunner] = []
    try:
        for component in components:
            runners.append(await serve_health(Health(component), HealthSettings()))
        async with ClientSession() as http:
            for component, runner in zip(components, runners, strict=True):
                [site] = runner.sites
                server = getattr(site, "_server", None)
                assert server is not None
                host, port = server.sockets[0].getsockname()[:2]
                assert host == "127.0.0.1" and port == observability.DEFAULT_HEALTH_PORTS[component]
                async with http.get(f"http://127.0.0.1:{port}/healthz") as resp:
                    assert (await resp.json())["component"] == component
    finally:
        for runner in runners:
            await runner.cleanup()
    assert DEFAULT_HEALTH_PORTS["processor"] != DEFAULT_HEALTH_PORTS["binder"]
