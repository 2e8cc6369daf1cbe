"""The processor's start milestones: each logged once, with its wall clock and CPU, those reached before logging
was set up held until it is."""

from __future__ import annotations

import logging
import re

import pytest

from kai_stream.streams import startup


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(startup, "_reached", {})
    monkeypatch.setattr(startup, "_pending", [])


def test_a_milestone_is_logged_once_with_its_clock_and_cpu(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger=startup.__name__):
        startup.reached("imported")
        startup.reached("imported")
    lines = [r.getMessage() for r in caplog.records if r.name == startup.__name__]
    assert len(lines) == 1
    assert re.fullmatch(r"processor start: imported at \d+\.\d{3} \(cpu \d+\.\d\ds\)", lines[0])


def test_milestones_before_logging_is_set_up_are_held_until_it_is(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = logging.getLogger()
    handlers = list(root.handlers)
    monkeypatch.setattr(root, "handlers", [])
    with caplog.at_level(logging.INFO, logger=startup.__name__):
        startup.reached("imported")
        assert not [r for r in caplog.records if r.name == startup.__name__]
        monkeypatch.setattr(root, "handlers", handlers)
        startup.reached("app started")
    lines = [r.getMessage().split(" at ")[0] for r in caplog.records if r.name == startup.__name__]
    assert lines == ["processor start: imported", "processor start: app started"]
