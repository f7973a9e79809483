"""One value per query parameter, for every surface (the agent API, its long-poll and sockets,
the approver's pages): a parameter given more than once is refused, since which of its values
counts would be a guess. Each surface words the refusal its own way.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import parse_qsl

from django.http import QueryDict


class ParameterRepeated(ValueError):
    """Parameters given more than once; ``names`` in the order asked for."""

    def __init__(self, names: Iterable[str]) -> None:
        self.names = tuple(names)
        super().__init__(", ".join(f"{name} is given more than once" for name in self.names))


def query_values(query: QueryDict, names: Iterable[str]) -> dict[str, str]:
    """The named parameters that are given, each with its one value."""
    given = {name: query.getlist(name) for name in names}
    repeated = [name for name, values in given.items() if len(values) > 1]
    if repeated:
        raise ParameterRepeated(repeated)
    return {name: values[0] for name, values in given.items() if values}


def query_value(query: QueryDict, name: str) -> str | None:
    """The parameter's one value; None when it is absent."""
    return query_values(query, [name]).get(name)


def scope_query(query_string: bytes) -> QueryDict:
    """An ASGI scope's query string, for the apps outside Django's handler (the long-poll,
    the sockets). Not ``QueryDict(query_string)``: that refuses more parameters than
    ``DATA_UPLOAD_MAX_NUMBER_FIELDS`` with an error these apps do not answer."""
    query = QueryDict(mutable=True)
    for name, value in parse_qsl(query_string.decode("latin-1"), keep_blank_values=True):
        query.appendlist(name, value)
    return query
