"""agentstate_client: a client for ``agentstate serve`` (docs/protocol.md), standard
library only, Python >= 3.11.

- AsyncClient: asyncio; ``await AsyncClient.spawn(store=DIR)`` starts the server as a
  child process over stdin/stdout, ``await AsyncClient.connect("127.0.0.1:7400")`` uses
  TCP. Requests may be awaited concurrently; responses are matched by id.
- Client: the same methods, blocking, safe to call from many threads at once.
- errors: AgentStateError and one subclass per ``error.data.kind``.
"""

from ._protocol import MAX_LINE_BYTES, MAX_LINE_DEPTH
from .aio import AsyncClient, find_binary, parse_address
from .blocking import Client
from .errors import *  # noqa: F403 (errors.__all__ is part of this package's API)
from .errors import __all__ as _error_names

__all__ = ["AsyncClient", "Client", "find_binary", "parse_address", "MAX_LINE_BYTES",
           "MAX_LINE_DEPTH", *_error_names]
