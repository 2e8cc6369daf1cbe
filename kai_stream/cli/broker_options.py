"""The embedded broker's command-line options, shared by `kai-stream broker` and `kai-stream run`."""

from __future__ import annotations

from typing import Annotated

import typer

from kai_stream.engines import Engine

EngineOption = Annotated[
    Engine, typer.Option(help="tansu (starts in ms) or kafka (Apache Kafka, JVM; jars fetched once with Maven)")
]
SecureOption = Annotated[
    bool,
    typer.Option(
        "--secure",
        help="SASL_SSL client listener with a SCRAM-SHA-512 user and a throwaway CA, which every component of this "
        "command connects through (--engine kafka only)",
    ),
]
