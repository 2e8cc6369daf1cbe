"""``python -m kai_stream.streams``: run the scheduler processor (a faust worker) until stopped."""

from __future__ import annotations

import logging
from pathlib import Path

from kai_stream.streams import agents  # noqa: F401  (registers the agent)
from kai_stream.streams.app import app, settings


def main() -> None:
    from faust.worker import Worker

    Path(settings.data_dir).mkdir(parents=True, exist_ok=True)  # faust creates only the last level

    logging.getLogger("faust").setLevel(settings.log_level)
    worker = Worker(app, loglevel=settings.log_level, quiet=True)
    # faust's progress spinner sets the root logger to DEBUG so that it "spins for every log message": every
    # aiokafka debug call (several per request) then builds a LogRecord. No spinner, root logger at log_level.
    worker.spinner = None
    worker.execute_from_commandline()


if __name__ == "__main__":
    main()
