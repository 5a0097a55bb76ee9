"""uvicorn's h11 protocol with the two guards it lacks against hostile clients: a header deadline (a
connection that has not sent a whole request head within `header_timeout` seconds is closed, so a client
sending a byte a second holds nothing for long) and a connection cap refused at once with a 503 that says
why (uvicorn's limit_concurrency answers only once the headers are in). Bodies are capped in server.py;
uvicorn already stops reading a connection whose unread body passes 64 KiB, and h11 refuses a head over
h11_max_incomplete_event_size.
"""
from __future__ import annotations

import asyncio

import h11

from uvicorn.protocols.http.h11_impl import H11Protocol

DEFAULT_HEADER_TIMEOUT_S = 10.0
DEFAULT_MAX_CONNECTIONS = 256
_REFUSAL_BODY = (b'{"error": {"message": "the server has too many open connections; retry later", '
                 b'"type": "server_error", "param": null, "code": null}}')
REFUSAL = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nconnection: close\r\n"
           b"retry-after: 1\r\ncontent-length: %d\r\n\r\n" % len(_REFUSAL_BODY)) + _REFUSAL_BODY


class GuardedH11Protocol(H11Protocol):
    """Pass as uvicorn.Config(http=functools.partial(GuardedH11Protocol, header_timeout=..., max_connections=...))."""

    def __init__(self, *args, header_timeout: float = DEFAULT_HEADER_TIMEOUT_S,
                 max_connections: int = DEFAULT_MAX_CONNECTIONS, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.header_timeout = header_timeout
        self.max_connections = max_connections
        self._head_deadline: asyncio.TimerHandle | None = None
        self._refused = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            # answer, then drain what the client sends for a moment: closing with its request unread would
            # reset the connection and the client would never read why
            self._refused = True
            transport.write(REFUSAL)
            transport.write_eof()
            self.loop.call_later(1.0, transport.close)
            return
        self._arm_header_deadline()

    def data_received(self, data: bytes) -> None:
        if not self._refused:
            super().data_received(data)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm_header_deadline()  # for the next request's head on this kept-alive connection

    def _arm_header_deadline(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
        self._head_deadline = self.loop.call_later(self.header_timeout, self._header_deadline_passed)

    def _header_deadline_passed(self) -> None:
        """Close the connection if its request's head is still incomplete (h11: the client is still IDLE)."""
        self._head_deadline = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.timeout_keep_alive_handler()  # uvicorn's own close of an idle connection

    def connection_lost(self, exc: Exception | None) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
        super().connection_lost(exc)
