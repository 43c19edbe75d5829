"""A cheap check, before any conversation starts, that every remote endpoint can be reached.

A typo in a base_url (or a server that is not up) would otherwise surface as one error per case
after each call's retries: minutes of a run for nothing. Here each distinct host is opened once
with a TCP connection (through the proxy the client would use, when one is configured), all at
once, with a short timeout. Nothing is sent, so no endpoint sees a request.
"""

from __future__ import annotations

import asyncio
import os
import socket
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

from psychosis_tests.common.errors import ModelsFileError, safe_url
from psychosis_tests.inputs.models import ModelSpec

CONNECT_TIMEOUT = 3.0
"""Seconds to open a connection; a reachable endpoint answers a TCP handshake within milliseconds."""


def _address(base_url: str) -> tuple[str, int]:
    """Where a connection to this URL really goes: the proxy the environment names, or the host."""
    parts = urlsplit(base_url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    proxy = urllib.request.getproxies().get(parts.scheme)
    if proxy and not urllib.request.proxy_bypass(host):
        proxy_parts = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        return proxy_parts.hostname or host, proxy_parts.port or 80
    return host, port


async def _reach(host: str, port: int, timeout: float) -> str | None:
    """None when a connection opens, else why not."""
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    except TimeoutError:
        return f"no answer from {host}:{port} within {timeout:g} s"
    except socket.gaierror:
        return f"cannot resolve the host name {host!r}"
    except OSError as exc:
        reason = os.strerror(exc.errno) if exc.errno else str(exc) or type(exc).__name__
        return f"cannot connect to {host}:{port} ({reason.lower()})"
    writer.close()
    try:
        await writer.wait_closed()
    except OSError:
        pass
    return None


def _well_formed(url: str) -> bool:
    """An http(s) URL with a host, and a port that can be read (urlsplit raises on a port past
    65535 or not a number, which would otherwise end the run with a traceback)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (read for its ValueError)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def check_endpoints(specs: list[ModelSpec], *, models_file: Path, timeout: float = CONNECT_TIMEOUT) -> None:
    """Raise ModelsFileError (one line: model, URL, what happened, what to do) for the first
    remote endpoint that cannot be reached; the suite's own servers are not checked."""
    by_url: dict[str, ModelSpec] = {}
    for spec in specs:
        if spec.base_url and spec.base_url not in by_url:
            by_url[spec.base_url] = spec
    if not by_url:
        return
    malformed = [(url, s) for url, s in by_url.items() if not _well_formed(url)]
    for url, spec in malformed:
        raise ModelsFileError(
            f"{safe_url(url)!r} is not an http(s) URL; write it like https://host/v1", file=models_file, field=f"{spec.id}: base_url"
        )
    addresses = {url: _address(url) for url in by_url}

    async def reach_all() -> list[str | None]:
        return await asyncio.gather(*(_reach(host, port, timeout) for host, port in addresses.values()))

    for (url, spec), problem in zip(by_url.items(), asyncio.run(reach_all()), strict=True):
        if problem is not None:
            raise ModelsFileError(
                f"{safe_url(url)} cannot be reached: {problem}. Check the URL and that the server is running "
                "before the run starts any conversation",
                file=models_file,
                field=f"model {spec.id!r}: base_url",
            )
