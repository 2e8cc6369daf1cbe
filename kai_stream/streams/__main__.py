"""``python -m kai_stream.streams``: run the scheduler processor (a faust worker) until stopped."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from faust.worker import Worker

from kai_stream import prefork
from kai_stream.core.gcpause import freeze_heap
from kai_stream.streams import (
    agents,  # noqa: F401  (registers the agent)
    startup,
)
from kai_stream.streams.app import app, settings


def main() -> None:
    startup.reached("imported")
    freeze_heap()  # the imports, out of every collection the rebuild and the cycles trigger
    if settings.supervise:
        sys.exit(prefork.supervise("processor", _work, stop_with_parent=settings.parent_pid is not None))
    _work()


def _work() -> None:
    Path(settings.data_dir).mkdir(parents=True, exist_ok=True)  # faust creates only the last level

    logging.getLogger("faust").setLevel(settings.log_level)
    worker = Worker(app, loglevel=settings.log_level, quiet=True)
    # faust's progress spinner sets the root logger to DEBUG so that it "spins for every log message": every
    # aiokafka debug call (several per request) then builds a LogRecord. No spinner, root logger at log_level.
    worker.spinner = None
    startup.reached("worker starting")
    worker.execute_from_commandline()


if __name__ == "__main__":
    main()
