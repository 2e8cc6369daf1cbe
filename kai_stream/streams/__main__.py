"""``python -m kai_stream.streams``: run the scheduler processor (a faust worker) until stopped."""

from __future__ import annotations

import logging

from kai_stream.streams import agents  # noqa: F401  (registers the agent)
from kai_stream.streams.app import app, settings


def main() -> None:
    from faust.worker import Worker

    logging.getLogger("faust").setLevel(settings.log_level)
    Worker(app, loglevel=settings.log_level, quiet=True).execute_from_commandline()


if __name__ == "__main__":
    main()
