"""Object names as the Kubernetes API server validates them: a namespace is an RFC 1123 label (at most 63
characters), every other kind here an RFC 1123 subdomain (at most 253); anything else is refused with 422
Invalid and the API server's message, so a name like ``../../etc`` or one of 10,000 characters never gets in."""

from __future__ import annotations

import re

from kai_stream.connectors.simcluster.errors import ApiError

_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_LABEL_RE = re.compile(rf"^{_LABEL}$")
_SUBDOMAIN_RE = re.compile(rf"^{_LABEL}(\.{_LABEL})*$")
LABEL_MAX = 63
SUBDOMAIN_MAX = 253

_LABEL_HELP = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and "
    f"end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '{_LABEL}')"
)
_SUBDOMAIN_HELP = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    f"'{_LABEL}(\\.{_LABEL})*')"
)


def name_problems(name: str, *, label: bool) -> list[str]:
    """What is wrong with ``name`` as a label (``label``) or a subdomain; [] when it is valid."""
    limit, pattern, help_text = (
        (LABEL_MAX, _LABEL_RE, _LABEL_HELP) if label else (SUBDOMAIN_MAX, _SUBDOMAIN_RE, _SUBDOMAIN_HELP)
    )
    problems = []
    if len(name) > limit:
        problems.append(f"must be no more than {limit} characters")
    if not pattern.match(name):
        problems.append(help_text)
    return problems


def validate_name(kind: str, name: str, *, label: bool, field: str = "metadata.name") -> None:
    """Raise the API server's 422 when ``name`` is not a valid object name."""
    problems = name_problems(name, label=label)
    if problems:
        shown = name if len(name) <= SUBDOMAIN_MAX else name[:SUBDOMAIN_MAX] + "..."
        raise ApiError(
            422,
            f'{kind} "{shown}" is invalid: {field}: Invalid value: "{shown}": {", ".join(problems)}',
            name=shown,
            kind=kind.lower(),
        )
