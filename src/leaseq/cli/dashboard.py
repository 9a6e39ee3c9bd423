"""``leaseq dashboard``: serve the web dashboard (``leaseq.dashboard``) with uvicorn."""

from __future__ import annotations

import secrets
from urllib.parse import urlencode

import click

from leaseq._core.url import resolve_url
from leaseq.dashboard.security import MIN_TOKEN_LENGTH
from leaseq.errors import ConfigurationError

TOKEN_ENV = "LEASEQ_DASHBOARD_TOKEN"
METRICS_TOKEN_ENV = "LEASEQ_METRICS_TOKEN"


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


def is_wildcard(host: str) -> bool:
    return host.strip("[]") in ("0.0.0.0", "::", "")


def duration(value: str) -> float:
    """Seconds from ``3600``, ``90m``, ``12h`` or ``7d``."""
    text = value.strip().lower()
    unit = {"s": 1, "m": 60, "h": 3600, "d": 86400}.get(text[-1:])
    number = text[:-1] if unit else text
    try:
        return float(number) * (unit or 1)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a duration like 3600, 90m or 12h") from None


def check_token(name: str, token: str | None, host: str) -> None:
    if token is not None and not is_loopback(host) and len(token) < MIN_TOKEN_LENGTH:
        raise click.UsageError(
            f"{name} must be at least {MIN_TOKEN_LENGTH} characters when the dashboard "
            f"listens beyond loopback (--host {host}); `python -c 'import secrets; "
            "print(secrets.token_urlsafe(24))'` makes one"
        )


@click.command()
@click.option("--url", default=None, show_default="LEASEQ_URL, else sqlite:///leaseq.db",
              help="Database URL.", callback=lambda ctx, param, value: resolve_url(override=value))
@click.option("--table-prefix", default="leaseq_", show_default=True,
              help="Prefix of leaseq's table names.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Interface to listen on; anything but loopback needs --token and "
                   "--allowed-host.")
@click.option("--port", type=click.IntRange(0, 65535), default=8787, show_default=True)
@click.option("--token", envvar=TOKEN_ENV, default=None,
              help=f"Require this token on every request (or set {TOKEN_ENV}); at least "
                   f"{MIN_TOKEN_LENGTH} characters beyond loopback. Without one, a token is "
                   "made for this run and a login link printed.")
@click.option("--allowed-host", "allowed_hosts", multiple=True, metavar="NAME",
              help="A name the dashboard answers to in the Host header, besides the "
                   "loopback names (repeatable; *.example.com for subdomains).")
@click.option("--metrics-token", envvar=METRICS_TOKEN_ENV, default=None,
              help=f"A token that may read /metrics and nothing else, for Prometheus (or "
                   f"set {METRICS_TOKEN_ENV}).")
@click.option("--public-metrics", is_flag=True,
              help="Serve /metrics without a token (loopback only).")
@click.option("--session-max-age", default="12h", show_default=True, metavar="DURATION",
              help="How long a login lasts: seconds, or 90m, 12h, 7d.")
@click.option("--secure-cookies", is_flag=True,
              help="Mark the session cookie Secure: the dashboard sits behind a proxy that "
                   "terminates TLS.")
@click.option("--forwarded-allow-ips", default=None, metavar="IPS",
              help="Trust X-Forwarded-For and X-Forwarded-Proto from these proxy addresses "
                   "(comma-separated): client addresses for the login throttle, and https "
                   "for Secure cookies.")
@click.option("--read-only", is_flag=True, help="Show everything, refuse every action.")
@click.option("--base-path", default="", metavar="PATH",
              help="Serve under this path, e.g. /leaseq behind a proxy.")
@click.option("--refresh", type=click.FloatRange(0.2), default=2.0, show_default=True,
              help="Seconds between the pages' live updates.")
@click.option("--log-level", default="info", show_default=True)
def dashboard(url: str, table_prefix: str, host: str, port: int, token: str | None,
              allowed_hosts: tuple[str, ...], metrics_token: str | None,
              public_metrics: bool, session_max_age: str, secure_cookies: bool,
              forwarded_allow_ips: str | None, read_only: bool, base_path: str,
              refresh: float, log_level: str) -> None:
    """Serve the web dashboard: queues, jobs, dead letters and their actions.

    On loopback it answers only to loopback names in the Host header (plus each
    --allowed-host); on any other address it needs --token and --allowed-host. Without
    --token it makes a token for this run and prints a login link once.
    """
    prefix = clean_base_path(base_path)
    loopback = is_loopback(host)
    if not token and not loopback:
        raise click.UsageError(
            f"--host {host} is not loopback: a token is needed to serve the dashboard "
            f"there; pass --token or set {TOKEN_ENV}"
        )
    if not loopback and not allowed_hosts:
        raise click.UsageError(
            f"--host {host} is not loopback: say which names the dashboard answers to with "
            "--allowed-host NAME (repeatable; the name browsers and probes use, e.g. "
            "dash.example.com or the pod's address)"
        )
    if public_metrics and not loopback:
        raise click.UsageError("--public-metrics is for loopback only; give Prometheus a "
                               "--metrics-token instead")
    check_token("--token", token, host)
    check_token("--metrics-token", metrics_token, host)
    max_age = duration(session_max_age)
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
    made = token is None
    if token is None:
        token = secrets.token_urlsafe(24)
    app = create_app(url, token=token, read_only=read_only, table_prefix=table_prefix,
                     refresh=refresh, allowed_hosts=["*"] if "*" in allowed_hosts
                     else list(allowed_hosts), metrics_token=metrics_token,
                     public_metrics=public_metrics, session_max_age=max_age,
                     secure_cookies=secure_cookies)
    if prefix:
        app = Starlette(routes=[Mount(prefix, app=app)], lifespan=app.router.lifespan_context)
    shown = f"[{host}]" if ":" in host else host
    if is_wildcard(host):
        shown = "127.0.0.1"
    home = f"http://{shown}:{port}{prefix}/"
    click.echo(f"leaseq dashboard on {home} for {redact_url(url)}"
               + (" (read-only)" if read_only else ""))
    if made:
        # Printed once, as Jupyter does: the link logs a browser in and leaves the address
        # bar; scripts send the same token as a bearer until the process exits.
        click.echo(f"log in with this link (a token made for this run): "
                   f"{home}login?{urlencode({'token': token})}")
    uvicorn.run(app, host=host, port=port, log_level=log_level,
                proxy_headers=forwarded_allow_ips is not None,
                forwarded_allow_ips=forwarded_allow_ips)
