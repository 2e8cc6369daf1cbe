"""The command line's one error boundary: whatever a command raises ends as one line on stderr naming the file,
field, flag or environment variable at fault, and a non-zero exit (2 for a user's mistake, 1 otherwise);
``--debug`` (or ``KAI_STREAM_DEBUG=1``) lets the traceback through instead."""

from __future__ import annotations

import logging
import os
import sys

from pydantic import ValidationError
from pydantic_settings import BaseSettings
from rich.console import Console
from rich.markup import escape

USAGE_EXIT = 2
FAILURE_EXIT = 1


class UserError(Exception):
    """A mistake in what the user gave us (a file, a flag, a field); the message says which."""


def _env_debug() -> bool:
    return os.environ.get("KAI_STREAM_DEBUG", "") not in ("", "0")


class _State:
    debug = _env_debug()
    refusal: object = None
    """Why the last bootstrap address failed, as aiokafka logged it (its error names none of the reasons)."""


_BOOTSTRAP_FAILURES = ('Unable connect to "', 'Unable to request metadata from "')


def _not_bootstrap_noise(record: logging.LogRecord) -> bool:
    """aiokafka logs each failed bootstrap address before raising the error that names them all; the reason is
    kept for that error's line (``_unreachable``)."""
    if not str(record.msg).startswith(_BOOTSTRAP_FAILURES):
        return True
    _State.refusal = record.args[-1] if isinstance(record.args, tuple) and record.args else None
    return False


def _unreachable(exc: BaseException) -> str:
    """The line for a Kafka that could not be bootstrapped from, naming the settings a refusal points at."""
    reason, _State.refusal = _State.refusal, None
    env = "KAI_STREAM_KAFKA_"
    if reason is None:
        return f"cannot reach Kafka: {exc} (is a broker running? see --bootstrap-servers)"
    text = f"{type(reason).__name__}: {reason}" if isinstance(reason, BaseException) else str(reason)
    if "SaslAuthenticationFailed" in text or "Authentication failed" in text:
        return f"Kafka refused the SASL credentials ({text}); check {env}SASL_USERNAME and {env}SASL_PASSWORD"
    if "CERTIFICATE_VERIFY_FAILED" in text or "SSLCertVerificationError" in text:
        return f"Kafka's TLS certificate was not trusted ({text}); check {env}SSL_CAFILE"
    protocol = os.environ.get(f"{env}SECURITY_PROTOCOL", "PLAINTEXT")
    if "closed" in text:
        return (
            f"Kafka closed the connection before answering ({text}): does it want TLS or SASL? "
            f"{env}SECURITY_PROTOCOL is {protocol}; set it and the SASL/TLS settings as the broker expects"
        )
    return f"cannot reach Kafka: {exc}; last refusal: {text} (is a broker running? see --bootstrap-servers)"


def quiet_duplicates() -> None:
    logging.getLogger("aiokafka").addFilter(_not_bootstrap_noise)


def set_debug(on: bool) -> None:
    _State.debug = on or _env_debug()


def debug_enabled() -> bool:
    return _State.debug


def _settings_class(title: str) -> type[BaseSettings] | None:
    todo: list[type[BaseSettings]] = [BaseSettings]
    while todo:
        cls = todo.pop()
        if cls.__name__ == title:
            return cls
        todo.extend(cls.__subclasses__())
    return None


def _validation(exc: ValidationError) -> str:
    """Name each bad field; for settings read from the environment, name the environment variable."""
    settings = _settings_class(exc.title)
    prefix = str(settings.model_config.get("env_prefix", "")) if settings is not None else ""
    parts = []
    for error in exc.errors():
        field = ".".join(str(p) for p in error["loc"]) or "<root>"
        where = f"{prefix}{field}".upper() if settings is not None else f"{exc.title}.{field}"
        shown = error["type"] != "missing" and not isinstance(error["input"], dict)
        got = f" (got {error['input']!r})" if shown else ""
        parts.append(f"{where}: {error['msg']}{got}")
    return "; ".join(parts)


def describe(exc: BaseException) -> tuple[str, int]:
    """One line for ``exc`` and the exit code it deserves."""
    from aiokafka.errors import KafkaConnectionError, KafkaError
    from kubernetes_asyncio.config import ConfigException

    if isinstance(exc, UserError):
        return str(exc), USAGE_EXIT
    if isinstance(exc, ValidationError):
        return _validation(exc), USAGE_EXIT
    if isinstance(exc, KafkaConnectionError):
        return _unreachable(exc), FAILURE_EXIT
    if isinstance(exc, KafkaError):
        return f"Kafka: {type(exc).__name__}: {exc}", FAILURE_EXIT
    if isinstance(exc, ConfigException):
        return f"Kubernetes: {exc}; pass --kubeconfig or --api-url", USAGE_EXIT
    if isinstance(exc, UnicodeDecodeError):
        return f"not a text file (UTF-8 expected): {exc.reason} at byte {exc.start}", USAGE_EXIT
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"{exc.filename}: {exc.strerror or exc}", USAGE_EXIT
    if isinstance(exc, OSError | TimeoutError):
        return f"{type(exc).__name__}: {exc}", FAILURE_EXIT
    if isinstance(exc, ValueError | LookupError):
        return str(exc) if str(exc) else type(exc).__name__, USAGE_EXIT
    return f"{type(exc).__name__}: {exc} (unexpected; `kai-stream --debug ...` shows the traceback)", FAILURE_EXIT


def source_message(exc: BaseException) -> str:
    """What a command that reads a log (a history dir or a broker) prints for ``exc``: the boundary's line for bad
    Kafka settings and a refused connection (naming the setting at fault), the error's own text otherwise."""
    from aiokafka.errors import KafkaConnectionError

    return describe(exc)[0] if isinstance(exc, ValidationError | KafkaConnectionError) else str(exc)


def report(exc: BaseException) -> int:
    """Print ``exc`` as one line on stderr; the exit code to leave with."""
    message, code = describe(exc)
    line = " ".join(message.split())
    Console(stderr=True, highlight=False, soft_wrap=True).print(f"[red]error:[/] {escape(line)}")
    return code


def exit_on(exc: BaseException) -> None:
    """Leave with ``exc`` reported, or re-raise it under ``--debug``."""
    if debug_enabled():
        raise exc
    sys.exit(report(exc))
