"""Bounds on the Hugging Face hub's requests: a timeout for every wait and a deadline for every request as
a whole, so that a hub that answers slowly (headers, then a byte every few seconds) ends in one line.

huggingface_hub sends its requests through one httpx client made by a factory; install() wraps that
client's transports. Each request then has:
- a timeout for every connect and every read (ATTNVIZ_HUB_TIMEOUT seconds, default 10) where the caller
  gave none;
- a deadline for the status line and headers: ATTNVIZ_HUB_TIMEOUT seconds from the start (a watchdog shuts
  the connection's socket down when it passes, so a server that drips its headers cannot hold us);
- a deadline for the body: ATTNVIZ_HUB_TIMEOUT seconds, plus the file's size at MIN_BYTES_PER_S (a file
  must arrive at 50 kB/s on average; of unknown size, the bytes received so far count).
A request past its deadline raises HubDeadline (not an httpx error, so huggingface_hub does not retry it),
whose message is one complete line. install() also switches off Xet downloads in this process (hf_xet moves
files outside the httpx client, where no deadline reaches them): every file comes through the bounded client.
"""
from __future__ import annotations

import os
import socket
import threading
import time
from typing import Optional

MIN_BYTES_PER_S = 50_000


class HubDeadline(Exception):
    """A hub request ran past its deadline; str(e) is one line naming the file and the bound."""


def hub_timeout() -> float:
    """Seconds any one hub request may wait (connect or read), and the first part of every request's
    deadline: ATTNVIZ_HUB_TIMEOUT, default 10."""
    try:
        t = float(os.environ.get("ATTNVIZ_HUB_TIMEOUT", "10"))
    except ValueError:
        t = 10.0
    return t if 0 < t < float("inf") else 10.0


def _what(url) -> str:
    """A request's URL -> "'config.json' from http://host:port" (the file and the server)."""
    path = str(getattr(url, "path", url))
    host = f"{getattr(url, 'scheme', 'https')}://{getattr(url, 'netloc', b'').decode('ascii', 'replace')}"
    return f"'{path.rsplit('/', 1)[-1] or path}' from {host}"


def _bytes(n: int) -> str:
    return f"{n:,} byte{'' if n == 1 else 's'}"


def _shut(sock) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)  # wakes a recv() blocked in another thread; close() would not
    except OSError:
        pass


class _Watchdog:
    """Shuts down the sockets a request opened once `seconds` have passed (unless cancelled first)."""

    def __init__(self, seconds: float):
        self.fired = False
        self.socks = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def watch(self, sock) -> None:
        with self._lock:
            if sock is not None:
                self.socks.append(sock)
                if self.fired:
                    _shut(sock)

    def _fire(self) -> None:
        with self._lock:
            self.fired = True
            for s in self.socks:
                _shut(s)

    def cancel(self) -> None:
        self._timer.cancel()


class _DeadlineStream:
    """A response body that raises HubDeadline once it arrives slower than the deadline allows."""

    def __init__(self, inner, url, started: float, size: Optional[int], sock):
        self.inner, self.url, self.started, self.size, self.sock = inner, url, started, size, sock
        self.got = 0

    def _allowed(self) -> float:
        return hub_timeout() + max(self.size or 0, self.got) / MIN_BYTES_PER_S

    def __iter__(self):
        dog = _Watchdog(self._allowed())  # a body that stalls between reads is the read timeout's
        dog.watch(self.sock)
        try:
            for chunk in self.inner:
                self.got += len(chunk)
                if time.monotonic() - self.started > self._allowed():
                    self.close()
                    raise HubDeadline(self._message())
                yield chunk
        except HubDeadline:
            raise
        except Exception:
            if dog.fired:
                raise HubDeadline(self._message()) from None
            raise
        finally:
            dog.cancel()

    def _message(self) -> str:
        size = _bytes(self.size) if self.size else "its bytes"
        return (f"the Hugging Face hub sent only {_bytes(self.got)} of {_what(self.url)} in "
                f"{time.monotonic() - self.started:.0f} s, past the deadline ({hub_timeout():g} s "
                f"(ATTNVIZ_HUB_TIMEOUT) plus {size} at {MIN_BYTES_PER_S // 1000} kB/s)")

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if close is not None:
            close()


class DeadlineTransport:
    """An httpx transport around another one: every request bounded as a whole (module docstring)."""

    def __init__(self, inner):
        self.inner = inner

    def handle_request(self, request):
        t = hub_timeout()
        given = dict(request.extensions.get("timeout") or {})
        request.extensions["timeout"] = {k: t if given.get(k) is None else given[k]
                                         for k in ("connect", "read", "write", "pool")}
        started = time.monotonic()
        dog = _Watchdog(t)
        outer = request.extensions.get("trace")

        def trace(event, info):  # httpcore's trace extension: the socket of each new connection
            if event.endswith((".connect_tcp.complete", ".start_tls.complete")):
                stream = info.get("return_value")
                if stream is not None:
                    dog.watch(stream.get_extra_info("socket"))
            if outer is not None:
                outer(event, info)

        request.extensions["trace"] = trace
        try:
            response = self.inner.handle_request(request)
        except Exception:
            if dog.fired:
                raise HubDeadline(f"the Hugging Face hub did not send the headers of {_what(request.url)} within "
                                  f"{t:g} s (ATTNVIZ_HUB_TIMEOUT)") from None
            raise
        finally:
            dog.cancel()
        try:
            size = int(response.headers.get("content-length"))
        except (TypeError, ValueError):
            size = None
        stream = response.extensions.get("network_stream")
        sock = stream.get_extra_info("socket") if stream is not None else None
        response.stream = _wrap_stream(response.stream, request.url, started, size, sock)
        return response

    def close(self) -> None:
        self.inner.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _wrap_stream(inner, url, started, size, sock):
    """The body stream as an httpx SyncByteStream (iterable, closable) with the deadline."""
    import httpx2

    class Stream(_DeadlineStream, httpx2.SyncByteStream):
        pass

    return Stream(inner, url, started, size, sock)


def wrap_client(client):
    """An httpx client -> the same client with every transport (the default one and the proxies') bounded."""
    inner = getattr(client, "_transport", None)
    if inner is not None and not isinstance(inner, DeadlineTransport):
        client._transport = DeadlineTransport(inner)
    mounts = getattr(client, "_mounts", None)
    if isinstance(mounts, dict):
        for k, tr in list(mounts.items()):
            if tr is not None and not isinstance(tr, DeadlineTransport):
                mounts[k] = DeadlineTransport(tr)
    return client


def install() -> None:
    """Make huggingface_hub's default client bounded (module docstring); a client someone else installed
    is left alone."""
    try:
        from huggingface_hub.utils import _http as h
    except ImportError:
        return
    if getattr(h, "_GLOBAL_CLIENT_FACTORY", None) is not getattr(h, "default_client_factory", object()):
        return  # ours already, the default is gone, or someone installed their own client: leave it

    def factory():
        return wrap_client(h.default_client_factory())

    try:
        h.set_client_factory(factory)
        from huggingface_hub import constants

        constants.HF_HUB_DISABLE_XET = True  # read at each download: files come over HTTP, through the client
    except Exception:  # noqa: BLE001 - an API change costs the bound only
        pass


def deadline_in(e: BaseException) -> Optional[HubDeadline]:
    """The HubDeadline behind an exception (transformers and huggingface_hub may wrap it), or None."""
    seen = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, HubDeadline):
            return e
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return None
