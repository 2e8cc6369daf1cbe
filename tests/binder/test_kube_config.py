"""The binder CLI finds the Kubernetes API from --api-url or a kubeconfig file."""

from __future__ import annotations

from pathlib import Path

import yaml

from kai_stream.cli.binder import load_kube_config


async def test_api_url_and_kubeconfig_select_the_server(tmp_path: Path) -> None:
    direct = await load_kube_config("http://127.0.0.1:1234/", None)
    assert direct.host == "http://127.0.0.1:1234"
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "sim",
        "clusters": [{"name": "sim", "cluster": {"server": "http://127.0.0.1:4321"}}],
        "users": [{"name": "u", "user": {"token": "t0k3n"}}],
        "contexts": [{"name": "sim", "context": {"cluster": "sim", "user": "u"}}],
    }))
    loaded = await load_kube_config(None, kubeconfig)
    assert loaded.host == "http://127.0.0.1:4321"
    assert loaded.api_key.get("BearerToken") == "Bearer t0k3n"
