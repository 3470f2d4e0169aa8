"""`runwright server`: the API of a shared deployment, with the controller beside it."""

from pathlib import Path

import typer

from runwright.cli.options import RootOption, StoreOption
from runwright.cli.render import guarded

app = typer.Typer()


@app.command()
@guarded
def server(
    host: str = typer.Option(
        "127.0.0.1",
        "--host",
        help="Address to bind. Anything but loopback needs --tls-cert/--tls-key or "
        "--behind-tls-proxy.",
    ),
    port: int = typer.Option(8080, "--port", min=1, max=65535, help="Port to bind."),
    tls_cert: Path | None = typer.Option(None, "--tls-cert", help="TLS certificate (PEM)."),
    tls_key: Path | None = typer.Option(None, "--tls-key", help="TLS private key (PEM)."),
    behind_tls_proxy: bool = typer.Option(
        False,
        "--behind-tls-proxy",
        help="A proxy in front terminates TLS: serve plain HTTP on a non-loopback address and "
        "trust its X-Forwarded-* headers.",
    ),
    controller: bool = typer.Option(
        True,
        "--controller/--no-controller",
        help="Run the controller beside the API (leave it out when another host runs one).",
    ),
    root: Path | None = RootOption,
    store: str | None = StoreOption,
) -> None:
    """Serve the API of a shared deployment and run the controller beside it.

    Every request needs an API token (`runwright token create`; the first admin's with
    `runwright token create --admin` on the store itself). OpenAPI docs at /docs."""
    from runwright.server.serve import serve

    serve(
        store=store,
        root=root,
        host=host,
        port=port,
        tls_cert=tls_cert,
        tls_key=tls_key,
        behind_tls_proxy=behind_tls_proxy,
        controller=controller,
    )
