"""The HTTP server: uvicorn (HTTP/1.1 with keep-alive) serving the application of :mod:`.app` on a socket
bound before the model loads, with a deadline for every wait: idle keep-alive connections, request headers,
request bodies, and the shutdown itself."""
from __future__ import annotations

import asyncio
import functools
import logging
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from ..core.errors import ConfigError
from .app import BODY_TIMEOUT_S, MAX_BODY_BYTES, ServiceState, create_app
from .service import RerankService

log = logging.getLogger("pipeline.serve")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000


@dataclass(frozen=True)
class Limits:
    """Every bound the server puts on a client, and on its own shutdown.

    Attributes:
        max_body_bytes: request bodies above this are 413.
        body_timeout: seconds a request body may take to arrive once its headers have (then 408, closed).
        header_timeout: seconds a connection may take to send a request's headers, from its opening or from
            the end of its last answer (then it is closed).
        keep_alive: seconds an idle HTTP/1.1 connection is kept open between requests.
        max_header_bytes: request line and headers above this are refused (400) by the HTTP parser.
        shutdown_timeout: seconds SIGTERM (or :meth:`RerankServer.close`) waits for the requests in flight;
            then they are cancelled. The process ends within ``shutdown_timeout + STOP_MARGIN_S``.
    """

    max_body_bytes: int = MAX_BODY_BYTES
    body_timeout: float = BODY_TIMEOUT_S
    header_timeout: float = 10.0
    keep_alive: float = 5.0
    max_header_bytes: int = 64 * 1024
    shutdown_timeout: float = 10.0


#: seconds beyond ``shutdown_timeout`` that stopping may take: the scoring worker's last batch, the server
#: thread's exit
STOP_MARGIN_S = 5.0


class _QuietCancellation(logging.Filter):
    """Drops uvicorn's traceback of a request task cancelled at the shutdown deadline: uvicorn has already
    said ``Cancel N running task(s), timeout graceful shutdown exceeded``, and the cancellation is the
    deadline working, not a fault."""

    def filter(self, record: logging.LogRecord) -> bool:  # noqa: A003 - logging's interface
        """Keep every record but a cancelled task's traceback."""
        error = record.exc_info[1] if record.exc_info else None
        return not isinstance(error, asyncio.CancelledError)


logging.getLogger("uvicorn.error").addFilter(_QuietCancellation())


class HeaderTimeoutProtocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol with a deadline on request headers: uvicorn times out idle keep-alive
    connections, but a client that sends part of a request line and then stalls (or trickles headers)
    would hold its connection forever."""

    def __init__(self, *args: Any, header_timeout: float = 10.0, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.header_timeout = header_timeout
        self._header_timer: Any = None

    def connection_made(self, transport: Any) -> None:  # noqa: D102 - asyncio's protocol interface
        super().connection_made(transport)
        self._arm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:  # noqa: D102
        self._disarm_header_timer()
        super().connection_lost(exc)

    def handle_events(self) -> None:  # noqa: D102
        super().handle_events()
        if self.cycle is not None and not self.cycle.response_complete:
            self._disarm_header_timer()  # a request's headers are in: its body has its own deadline

    def on_response_complete(self) -> None:  # noqa: D102
        super().on_response_complete()
        if not self.transport.is_closing() and (self.cycle is None or self.cycle.response_complete):
            self._arm_header_timer()

    def _arm_header_timer(self) -> None:
        self._disarm_header_timer()
        self._header_timer = self.loop.call_later(self.header_timeout, self._headers_too_slow)

    def _disarm_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if (self.cycle is None or self.cycle.response_complete) and not self.transport.is_closing():
            log.debug("closing a connection whose request headers did not arrive within %g s", self.header_timeout)
            self.transport.close()


class RerankServer:
    """Serves a :class:`RerankService` over HTTP from a background thread (uvicorn's event loop).

    The socket is bound and listening when the object is made, before any model is loaded: ``/health`` and
    ``/ready`` answer at once, the scoring routes 503 until :meth:`attach` gives the service.

    Args:
        service: the service, or ``None`` to :meth:`attach` it later.
        host: address to listen on.
        port: port (0 picks a free one; :attr:`url` tells which).
        limits: the timeouts and sizes of :class:`Limits`.

    Raises:
        ConfigError: the address cannot be listened on (in use, not local).

    Example:
        >>> with RerankServer(RerankService(model), "127.0.0.1", 0).start_background() as server:
        ...     print(server.url)
        http://127.0.0.1:54321
    """

    def __init__(self, service: RerankService | None, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
                 limits: Limits = Limits()):
        self.limits = limits
        self.state = ServiceState(service)
        try:
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            # IPPROTO_TCP named explicitly: asyncio disables Nagle's algorithm only on sockets whose proto says
            # TCP, and a socket made with proto 0 passes that on to every accepted connection; with Nagle on,
            # an answer's body waits for the client's delayed ACK of its headers (40 ms per keep-alive request)
            self._socket = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
            self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._socket.bind((host, port))
            self._socket.listen(2048)
        except OSError as error:
            self._socket.close()
            raise ConfigError(f"--host {host} --port {port}: cannot listen there ({error.strerror or error})") from None
        except OverflowError as error:
            self._socket.close()
            raise ConfigError(f"--port {port}: {error}") from None
        self.app = create_app(self.state, limits.max_body_bytes, limits.body_timeout)
        config = uvicorn.Config(
            self.app, loop="asyncio", lifespan="off", ws="none", log_config=None, access_log=False,
            http=functools.partial(HeaderTimeoutProtocol, header_timeout=limits.header_timeout),
            timeout_keep_alive=limits.keep_alive, timeout_graceful_shutdown=limits.shutdown_timeout,
            h11_max_incomplete_event_size=limits.max_header_bytes, server_header=False)
        self._uvicorn = uvicorn.Server(config)
        self._thread: threading.Thread | None = None
        self._closed = False

    @property
    def server_address(self) -> tuple[str, int]:
        """``(host, port)`` of the bound socket."""
        return self._socket.getsockname()[:2]

    @property
    def url(self) -> str:
        """``http://host:port`` of the bound socket (the port picked by the system for ``--port 0``)."""
        host, port = self.server_address
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    @property
    def service(self) -> RerankService | None:
        """The service answering, ``None`` while the model loads."""
        return self.state.service

    def attach(self, service: RerankService) -> None:
        """Answer with ``service`` from now on (``/ready`` turns 200)."""
        self.state.service = service

    def start_background(self, timeout: float = 30.0) -> "RerankServer":
        """Start serving from a background thread; return once the server accepts connections.

        Args:
            timeout: seconds to wait for the server to start.

        Returns:
            this server.
        """
        self._thread = threading.Thread(target=self._uvicorn.run, kwargs={"sockets": [self._socket]},
                                        name="rerank-server", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._uvicorn.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise ConfigError(f"the HTTP server did not start on {self.url}")
            time.sleep(0.01)
        return self

    def running(self) -> bool:
        """Whether the server thread is serving."""
        return self._thread is not None and self._thread.is_alive()

    def close(self) -> bool:
        """Stop: no new connections, the requests in flight answered within ``limits.shutdown_timeout`` (then
        cancelled), then the service's worker stopped; all within ``shutdown_timeout + STOP_MARGIN_S``.

        Returns:
            whether everything stopped in time (a thread left behind is a daemon: the process still ends).
        """
        if self._closed:
            return True
        self._closed = True
        deadline = time.monotonic() + self.limits.shutdown_timeout + STOP_MARGIN_S
        finished = True
        if self._thread is not None:
            self._uvicorn.should_exit = True
            self._thread.join(max(0.0, deadline - time.monotonic() - 1.0))
            finished = not self._thread.is_alive()
            if not finished:
                log.warning("the HTTP server did not stop within %g s", self.limits.shutdown_timeout)
        self._socket.close()
        if self.state.service is not None:
            finished = self.state.service.close(max(0.5, deadline - time.monotonic())) and finished
        return finished

    def __enter__(self) -> "RerankServer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
