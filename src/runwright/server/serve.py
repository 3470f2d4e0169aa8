"""Start the server: check the bind is safe, open and migrate the store, start the controller
beside the API, and run uvicorn until stopped."""

import ipaddress
import logging
from pathlib import Path

from runwright.errors import RunwrightError

log = logging.getLogger("runwright.server")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name other than localhost may resolve anywhere


def check_bind(
    host: str, tls_cert: Path | None, tls_key: Path | None, behind_tls_proxy: bool
) -> None:
    """Tokens travel in every request: off the loopback interface they need TLS, here or in a
    proxy in front. Refuse anything else before binding."""
    if (tls_cert is None) != (tls_key is None):
        raise RunwrightError("--tls-cert and --tls-key go together: give both, or neither")
    for given in (tls_cert, tls_key):
        if given is not None and not given.is_file():
            raise RunwrightError(f"{given} is not a file")
    if is_loopback(host) or tls_cert is not None or behind_tls_proxy:
        return
    raise RunwrightError(
        f"--host {host} is not a loopback address and no TLS is set: API tokens would cross the "
        "network in clear text. Give --tls-cert and --tls-key, or --behind-tls-proxy if a proxy "
        "in front of the server terminates TLS, or bind 127.0.0.1"
    )


def serve(
    *,
    store: str | None,
    root: Path | None,
    host: str,
    port: int,
    tls_cert: Path | None = None,
    tls_key: Path | None = None,
    behind_tls_proxy: bool = False,
    controller: bool = True,
) -> None:
    import uvicorn

    from runwright.layout import resolve_root
    from runwright.server.app import create_app
    from runwright.server.controller import start_controller
    from runwright.store import resolve_store_url

    check_bind(host, tls_cert, tls_key, behind_tls_proxy)
    resolved = resolve_root(root)
    url = resolve_store_url(store, resolved)
    # The store is opened and migrated before anything listens; the controller starts and
    # stops with the app (its lifespan), so uvicorn's own signal handling stops it too.
    app = create_app(
        url, resolved, controller=(lambda: start_controller(url, resolved)) if controller else None
    )
    scheme = "https" if tls_cert else "http"
    log.warning("runwright server on %s://%s:%d (root %s)", scheme, host, port, resolved)
    uvicorn.run(
        app,
        host=host,
        port=port,
        ssl_certfile=str(tls_cert) if tls_cert else None,
        ssl_keyfile=str(tls_key) if tls_key else None,
        proxy_headers=behind_tls_proxy,
        log_level="info",
        timeout_graceful_shutdown=5,
    )
