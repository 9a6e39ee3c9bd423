"""``leaseq dashboard``: serve the web dashboard (``leaseq.dashboard``) with uvicorn."""

from __future__ import annotations

import click

from leaseq.errors import ConfigurationError

TOKEN_ENV = "LEASEQ_DASHBOARD_TOKEN"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    import ipaddress  # only `leaseq dashboard` asks

    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name other than localhost may resolve anywhere


def clean_base_path(value: str) -> str:
    value = value.strip()
    if not value or value == "/":
        return ""
    if not value.startswith("/") or "//" in value or any(c in value for c in "?#\\ "):
        raise click.BadParameter(f"{value!r} is not a path like /leaseq")
    return value.rstrip("/")


@click.command()
@click.option("--url", envvar="LEASEQ_URL", default="sqlite:///leaseq.db", show_default=True,
              help="Database URL (or set LEASEQ_URL).")
@click.option("--table-prefix", default="leaseq_", show_default=True,
              help="Prefix of leaseq's table names.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Interface to listen on; anything but loopback needs --token.")
@click.option("--port", type=click.IntRange(0, 65535), default=8787, show_default=True)
@click.option("--token", envvar=TOKEN_ENV, default=None,
              help=f"Require this token on every request (or set {TOKEN_ENV}).")
@click.option("--read-only", is_flag=True, help="Show everything, refuse every action.")
@click.option("--base-path", default="", metavar="PATH",
              help="Serve under this path, e.g. /leaseq behind a proxy.")
@click.option("--refresh", type=click.FloatRange(0.2), default=2.0, show_default=True,
              help="Seconds between the pages' live updates.")
@click.option("--log-level", default="info", show_default=True)
def dashboard(url: str, table_prefix: str, host: str, port: int, token: str | None,
              read_only: bool, base_path: str, refresh: float, log_level: str) -> None:
    """Serve the web dashboard: queues, jobs, dead letters and their actions."""
    prefix = clean_base_path(base_path)
    if not token and not is_loopback(host):
        raise click.UsageError(
            f"--host {host} is not loopback: a token is needed to serve the dashboard "
            f"there; pass --token or set {TOKEN_ENV}"
        )
    try:
        import uvicorn
        from starlette.applications import Starlette
        from starlette.routing import Mount

        from leaseq.dashboard import create_app, redact_url
    except ImportError as exc:
        raise ConfigurationError(
            f"the dashboard needs the 'dashboard' extra: pip install 'leaseq[dashboard]' "
            f"({exc.name} is missing)"
        ) from None
    app = create_app(url, token=token, read_only=read_only, table_prefix=table_prefix,
                     refresh=refresh)
    if prefix:
        app = Starlette(routes=[Mount(prefix, app=app)], lifespan=app.router.lifespan_context)
    shown = f"[{host}]" if ":" in host else host
    click.echo(f"leaseq dashboard on http://{shown}:{port}{prefix}/ for {redact_url(url)}"
               + (" (read-only)" if read_only else "")
               + ("" if token else " (no token: loopback only)"))
    uvicorn.run(app, host=host, port=port, log_level=log_level, proxy_headers=False)
