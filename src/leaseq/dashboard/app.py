"""The dashboard's routes: pages rendered on the server, a JSON API with the same data, and
``/metrics``. Everything is read and changed through ``AsyncQueue``."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import itertools
import json
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

import leaseq
from leaseq._core import redact
from leaseq._core.job import LIVE_STATES, TERMINAL_STATES, JobInfo, QueueStats, Undecodable
from leaseq.dashboard import openapi
from leaseq.dashboard.enqueue import BodyTooLarge, body_cap, enqueue_arguments, read_body
from leaseq.dashboard.security import (
    COOKIE,
    CSRF_FIELD,
    CSRF_HEADER,
    LOOPBACK_NAMES,
    SESSION_MAX_AGE,
    Auth,
    HostCheck,
    Identity,
    safe_next,
    same_origin,
)
from leaseq.errors import (
    BackendError,
    BackendUnavailable,
    InvalidArgument,
    JobNotFound,
    JobStateError,
    LeaseqError,
    QueueFull,
    ValidationError,
)

log = logging.getLogger("leaseq.dashboard")
HERE = Path(__file__).parent
STATES = (*LIVE_STATES, *TERMINAL_STATES)
PAGE = 50
"""Jobs per page in the lists."""
PREVIEW = 160
"""Characters of a payload or error shown in a list; the job's page shows all of it."""
STATS_TTL = 1.0
"""Seconds one read of the queue counts serves every request (pages, API, /metrics)."""
SAMPLES = 150
"""Throughput samples kept (one per stats read at most every ``SAMPLE_EVERY`` seconds)."""
SAMPLE_EVERY = 2.0
SERIES = 30
"""Throughput points per queue in ``/api/queues`` (the sparkline)."""
KICK_LIMIT = 10_000
RETRY_AFTER = 1
"""Seconds a 429 (a full queue) asks an HTTP producer to wait before trying again."""
DASH = "\N{EN DASH}"
LOGIN_BODY = 4096
"""Bytes a login form may have: a token and a path fit easily, and nothing bigger is read
before the token is checked."""
FORM_BODY = 256 * 1024
"""Bytes an action's form may have (the dead-letter page posts up to a page of ids)."""
TOO_DEEP = "(nested too deeply to show)"

SECURITY_HEADERS = {
    # No inline script or style anywhere, so an escaped-but-missed string still cannot run.
    "content-security-policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
    ),
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}


def redact_url(url: str) -> str:
    """``url`` as it may be shown: everything between the scheme and the last ``@`` (user
    and password) and every secret-looking query option as ``***``. The one redaction
    leaseq uses everywhere (``leaseq._core.redact``)."""
    return redact.redact_url(url)


class Source:
    """The dashboard's one client, opened on first use (a mounted app gets no lifespan
    call), with the queue counts cached for ``STATS_TTL`` and the throughput samples."""

    def __init__(self, url: str, settings: leaseq.Settings) -> None:
        self.url = url
        self.settings = settings
        self._queue: leaseq.AsyncQueue | None = None
        self._opening = asyncio.Lock()
        self._reading = asyncio.Lock()
        self._stats: dict[str, QueueStats] = {}
        self._read_at = float("-inf")
        self._age: float | None = None
        self._age_at = float("-inf")
        self._age_failed = False
        self.samples: deque[tuple[float, dict[str, int]]] = deque(maxlen=SAMPLES)

    async def queue(self) -> leaseq.AsyncQueue:
        if self._queue is None:
            async with self._opening:
                if self._queue is None:
                    self._queue = leaseq.AsyncQueue(self.url, self.settings)
        return self._queue

    async def stats(self) -> dict[str, QueueStats]:
        if time.monotonic() - self._read_at < STATS_TTL:
            return self._stats
        async with self._reading:  # one read for every request that arrives meanwhile
            if time.monotonic() - self._read_at >= STATS_TTL:
                stats = await (await self.queue()).stats()
                self._stats, self._read_at = stats, time.monotonic()
                self._sample(stats)
        return self._stats

    async def transaction_age(self) -> float | None:
        """``AsyncQueue.oldest_transaction_age``, cached as the counts are; None where the
        backend has none or the server refused it (a MariaDB user without the PROCESS
        privilege: logged once, and the dashboard goes on without it)."""
        if time.monotonic() - self._age_at >= STATS_TTL:
            try:
                self._age = await (await self.queue()).oldest_transaction_age()
            except BackendUnavailable:
                raise
            except BackendError as exc:
                if not self._age_failed:
                    log.warning("leaseq dashboard: the oldest transaction's age is not "
                                "readable (shown as unknown): %s", exc)
                self._age, self._age_failed = None, True
            self._age_at = time.monotonic()
        return self._age

    def forget(self) -> None:
        """After an action, so the next read shows its effect."""
        self._read_at = float("-inf")

    def _sample(self, stats: Mapping[str, QueueStats]) -> None:
        now = time.monotonic()
        if self.samples and now - self.samples[-1][0] < SAMPLE_EVERY:
            return
        self.samples.append((now, {q: finished(s) for q, s in stats.items()}))

    def series(self, queue: str | None, points: int = SAMPLES) -> list[float]:
        """Jobs finished per second between consecutive samples, oldest first; for every
        queue together when ``queue`` is None. Pruned history makes a negative step,
        shown as 0."""
        samples = list(self.samples)[-(points + 1):]
        rates = []
        for (t0, c0), (t1, c1) in itertools.pairwise(samples):
            if queue is None:
                done = sum(c1.values()) - sum(c0.values())
            else:
                done = c1.get(queue, 0) - c0.get(queue, 0)
            rates.append(round(max(0, done) / (t1 - t0), 2))
        return rates

    async def close(self) -> None:
        if self._queue is not None:
            await self._queue.close()
            self._queue = None


def finished(s: QueueStats) -> int:
    return s.completed + s.cancelled + s.discarded


def jsonable(value: Any) -> Any:
    """``value`` for ``JSONResponse``: a dataclass (``JobInfo``) becomes a dict whose
    datetimes are ISO 8601 texts. Its JSON values (payload, result, error detail) are
    left as they are, to the C encoder: a walk here recursed once per level and failed on
    a payload a few hundred levels deep."""
    if isinstance(value, datetime):
        return value.isoformat()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: shallow(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return value


def shallow(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    return value


def dumps(value: Any, **options: Any) -> str:
    """``json.dumps``, or ``TOO_DEEP`` for a stored value nested past what the encoder's
    recursion reaches (a value written by SQL or an older version), or what an
    ``Undecodable`` stands for."""
    if isinstance(value, Undecodable):
        return undecodable(value)
    try:
        return json.dumps(value, ensure_ascii=False, **options)
    except RecursionError:
        return TOO_DEEP


def undecodable(value: Undecodable) -> str:
    return f"(cannot be decoded: {value.reason}) {value.preview}"


class JobsResponse(JSONResponse):
    """JSON whose values may be nested deeper than the encoder reaches: such a value is
    replaced by ``TOO_DEEP`` instead of failing the whole answer."""

    def render(self, content: Any) -> bytes:
        try:
            return super().render(content)
        except RecursionError:
            return super().render(too_deep(content))


def too_deep(content: Any) -> Any:
    """``content`` (the API's dicts of jobs) with each job's JSON fields that cannot be
    encoded replaced by ``TOO_DEEP``."""
    if isinstance(content, dict):
        return {k: too_deep(v) if k in ("job", "jobs") else
                (v if dumps(v) != TOO_DEEP else TOO_DEEP) for k, v in content.items()}
    if isinstance(content, list):
        return [too_deep(item) for item in content]
    return content


def queue_json(s: QueueStats, source: Source) -> dict[str, Any]:
    series = source.series(s.queue, SERIES)
    return {**s.as_dict(), "throughput": series[-1] if series else 0.0, "series": series}


def totals(stats: Mapping[str, QueueStats], transaction_age: float | None = None
           ) -> dict[str, Any]:
    fields = ("available", "scheduled", "running", "dead", "completed", "cancelled",
              "discarded")
    total: dict[str, Any] = {f: sum(getattr(s, f) for s in stats.values()) for f in fields}
    ages = [s.oldest_available_age for s in stats.values() if s.oldest_available_age is not None]
    total["queues"] = len(stats)
    total["paused"] = sum(s.paused for s in stats.values())
    total["oldest_available_age"] = max(ages) if ages else None
    total["oldest_transaction_age"] = transaction_age
    return total


def preview(value: Any, limit: int = PREVIEW) -> str:
    text = value if isinstance(value, str) else dumps(value)
    return text if len(text) <= limit else text[:limit] + "…"


def pretty(value: Any) -> str:
    """Indented JSON for the job's page; compact where indenting (a Python walk, two
    frames a level) would recurse too deep, ``TOO_DEEP`` where even that cannot."""
    if isinstance(value, Undecodable):
        return undecodable(value)
    try:
        return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)
    except RecursionError:
        return dumps(value)


def age(seconds: float | None) -> str:
    if seconds is None:
        return DASH
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def when(value: datetime | None) -> str:
    return DASH if value is None else value.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


# -- the app -----------------------------------------------------------------------------

Handler = Callable[[Request], Awaitable[Response]]


class Dashboard:
    """Routes, templates and guards over one ``Source``."""

    def __init__(self, source: Source, auth: Auth, read_only: bool, refresh: float) -> None:
        self.source = source
        self.auth = auth
        self.read_only = read_only
        self.refresh = refresh
        self.templates = Jinja2Templates(directory=str(HERE / "templates"))
        env = self.templates.env
        env.autoescape = True  # every .html template; never relax it for job fields
        env.filters.update(preview=preview, pretty=pretty, age=age, when=when,
                           q=functools.partial(quote, safe=""))

    # -- guards --------------------------------------------------------------------------

    def guarded(self, handler: Handler, *, write: bool = False, api: bool = False,
                bearer: bool = False, metrics: bool = False) -> Handler:
        """``handler`` behind the token (``bearer``: only as an ``Authorization: Bearer``
        header, never the session cookie, and never without a token, even on loopback;
        ``metrics``: also the metrics token, or nothing with public metrics), and for
        ``write`` behind the read-only switch and the CSRF check. An unexpected exception
        becomes one log line and a 500 without a traceback."""
        @functools.wraps(handler)
        async def guard(request: Request) -> Response:
            try:
                refused = await self.admit(request, write=write, api=api, bearer=bearer,
                                           metrics=metrics)
                if refused is not None:
                    return refused
                try:
                    response = await handler(request)
                except LeaseqError as exc:
                    response = self.leaseq_error(request, exc, api=api)
            except Exception as exc:  # one line and a 500, never a traceback
                response = self.unexpected(request, exc, api=api)
            response.headers.update(SECURITY_HEADERS)
            return response

        return guard

    async def admit(self, request: Request, *, write: bool, api: bool, bearer: bool,
                    metrics: bool) -> Response | None:
        """None when ``request`` may go on to its handler, else the refusal."""
        if metrics and self.auth.public_metrics:
            return None
        retry = self.auth.retry_after(request)
        if retry is not None and self.auth.given_bearer(request) is not None:
            return self.throttled(request, retry, api=True)
        identity = self.auth.identify(request)
        request.state.identity = identity
        if identity is None or identity.kind == "anonymous":
            if api or request.method not in ("GET", "HEAD"):
                return self.error(request, 401, "Unauthorized",
                                  "this dashboard needs its token", api=True,
                                  headers={"www-authenticate": 'Bearer realm="leaseq"'})
            return self.login_page(request, status=401)
        if identity.kind == "metrics" and not metrics:
            return self.error(request, 403, "Forbidden",
                              "the metrics token may read /metrics and nothing else",
                              api=True)
        if bearer and identity.kind != "bearer":
            if not self.auth.required:
                return self.error(
                    request, 403, "Forbidden",
                    "enqueueing over HTTP needs the dashboard to have a token: start it "
                    "with --token (or LEASEQ_DASHBOARD_TOKEN) and send "
                    "'Authorization: Bearer <token>'", api=True)
            return self.error(request, 401, "Unauthorized",
                              "send the dashboard's token as 'Authorization: Bearer "
                              "<token>' (a login cookie is not enough here)", api=True,
                              headers={"www-authenticate": 'Bearer realm="leaseq"'})
        if write:
            return await self.refuse_write(request, identity, api=api)
        return None

    async def refuse_write(self, request: Request, identity: Identity, *, api: bool
                           ) -> Response | None:
        if self.read_only:
            return self.error(request, 403, "ReadOnly", "this dashboard is read-only", api=api)
        if not same_origin(request):
            return self.error(request, 403, "Forbidden", "cross-site request refused", api=api)
        if identity.kind == "bearer":
            return None
        given = request.headers.get(CSRF_HEADER)
        if given is None and is_form(request):
            given = (await self.form(request)).get(CSRF_FIELD, "")
        if not self.auth.csrf_matches(identity, given):
            return self.error(request, 403, "Forbidden",
                              "missing or wrong CSRF token (or bearer token)", api=api)
        return None

    async def form(self, request: Request, cap: int = FORM_BODY) -> dict[str, str]:
        """The request's urlencoded form, read once with a cap (``BodyTooLarge`` past
        it); a multipart body is refused (``InvalidArgument``): no page sends one, and
        its file parts would be spooled to disk before any check."""
        cached = getattr(request.state, "form", None)
        if cached is not None:
            return dict(cached)
        kind = request.headers.get("content-type", "")
        if not kind.startswith("application/x-www-form-urlencoded"):
            raise InvalidArgument("send the form as application/x-www-form-urlencoded")
        body = await read_body(request, cap)
        try:
            fields = parse_qsl(body.decode(), keep_blank_values=True, max_num_fields=1000)
        except (UnicodeDecodeError, ValueError):
            raise InvalidArgument("the form is not valid urlencoded text") from None
        form: dict[str, str] = {}
        lists: dict[str, list[str]] = {}
        for name, value in fields:
            form.setdefault(name, value)
            lists.setdefault(name, []).append(value)
        request.state.form, request.state.form_lists = form, lists
        return dict(form)

    def throttled(self, request: Request, retry: int, *, api: bool) -> Response:
        return self.error(request, 429, "TooManyAttempts",
                          f"too many wrong tokens from this address; try again in {retry} s",
                          api=api, headers={"retry-after": str(retry)})

    def unexpected(self, request: Request, exc: Exception, *, api: bool) -> Response:
        """One log line for a bug or a driver's surprise, and a 500 that says nothing of
        the code: no traceback in the body, none in the log (a poison value could make
        every refresh write one)."""
        text = redact.scrub(str(exc), self.source.url).replace("\n", " ")[:500]
        log.error("leaseq dashboard: %s %s failed: %s: %s", request.method, request.url.path,
                  type(exc).__name__, text)
        return self.error(request, 500, "InternalError",
                          "the dashboard failed to answer; its log has one line on why",
                          api=api or request.url.path.startswith(self.base(request) + "/api/"))

    def leaseq_error(self, request: Request, exc: LeaseqError, *, api: bool) -> Response:
        status = 500
        if isinstance(exc, JobNotFound):
            status = 404
        elif isinstance(exc, JobStateError):
            status = 409
        elif isinstance(exc, ValidationError):
            status = 400
        elif isinstance(exc, QueueFull):
            # The queue drains as workers finish: a producer may try again shortly.
            return self.error(request, 429, "QueueFull", str(exc), api=api,
                              headers={"retry-after": str(RETRY_AFTER)})
        elif isinstance(exc, BackendError):  # unreachable, or SchemaMissing
            status = 503
        # leaseq's texts name hosts, never credentials; a driver's text inside one might
        # quote a misread piece of the URL, so it is scrubbed as well.
        return self.error(request, status, type(exc).__name__,
                          redact.scrub(str(exc), self.source.url), api=api)

    def error(self, request: Request, status: int, kind: str, message: str, *, api: bool,
              headers: Mapping[str, str] | None = None) -> Response:
        if browser_form(request):
            api = False  # a page's form posted to the API: answer with a page
        if api or wants_json(request):
            response: Response = JSONResponse(
                {"error": {"type": kind, "message": message}}, status, headers=headers
            )
        else:
            response = self.page(request, "error.html", status=status, kind=kind,
                                 message=message)
            response.headers.update(headers or {})
        response.headers.update(SECURITY_HEADERS)
        return response

    async def not_found(self, request: Request, exc: Exception) -> Response:
        return self.error(request, 404, "NotFound", "no such page",
                          api=request.url.path.startswith(self.base(request) + "/api/"))

    async def not_allowed(self, request: Request, exc: Exception) -> Response:
        response = self.error(request, 405, "MethodNotAllowed", "that method is not allowed "
                              "here", api=True)
        response.headers.update(getattr(exc, "headers", None) or {})
        return response

    # -- rendering -----------------------------------------------------------------------

    @staticmethod
    def base(request: Request) -> str:
        return str(request.scope.get("root_path", "")).rstrip("/")

    def page(self, request: Request, template: str, status: int = 200, **context: Any
             ) -> HTMLResponse:
        identity = getattr(request.state, "identity", None)
        known = identity is not None and identity.may_read
        # Who is not logged in sees neither the database nor a CSRF token.
        context.update(
            base=self.base(request), csrf=self.auth.csrf(identity) if known else "",
            read_only=self.read_only, refresh_ms=int(self.refresh * 1000),
            database=redact_url(self.source.url) if known else "",
            token_required=self.auth.required, logged_in=known, states=STATES,
        )
        response = self.templates.TemplateResponse(request, template, context,
                                                   status_code=status)
        response.headers.update(SECURITY_HEADERS)
        return response

    def login_page(self, request: Request, status: int = 200, wrong: bool = False
                   ) -> HTMLResponse:
        target = str(request.url.path) + (f"?{request.url.query}" if request.url.query else "")
        if request.method != "GET":
            target = self.base(request) + "/"
        return self.page(request, "login.html", status=status, next=target, wrong=wrong)

    # -- pages ---------------------------------------------------------------------------

    async def overview(self, request: Request) -> Response:
        stats = await self.source.stats()
        return self.page(request, "overview.html", queues=list(stats.values()),
                         totals=totals(stats, await self.source.transaction_age()))

    async def queue_page(self, request: Request) -> Response:
        aq = await self.source.queue()
        name = request.path_params["name"]
        config = await aq.queue_config(name)  # validates the name first
        stats = (await self.source.stats()).get(name, QueueStats(name))
        filters = list_filters(request, queue=name)
        jobs = await aq.jobs(**filters)
        return self.page(request, "queue.html", stats=stats, config=config, jobs=jobs,
                         filters=filters, next_page=next_page(request, jobs, filters["limit"]))

    async def job_page(self, request: Request) -> Response:
        aq = await self.source.queue()
        job = await aq.get(job_id(request))
        return self.page(request, "job.html", job=job)

    async def go_to_job(self, request: Request) -> Response:
        """The find-by-id form without JavaScript."""
        jid = job_id_of(request.query_params.get("id", ""))
        return RedirectResponse(f"{self.base(request)}/jobs/{jid}", 303)

    async def dead_page(self, request: Request) -> Response:
        aq = await self.source.queue()
        filters = list_filters(request, queue=request.query_params.get("queue") or None,
                               state="dead")
        jobs = await aq.jobs(**filters)
        stats = await self.source.stats()
        dead = {q: s.dead for q, s in stats.items() if s.dead}
        return self.page(request, "dead.html", jobs=jobs, filters=filters, dead=dead,
                         next_page=next_page(request, jobs, filters["limit"]),
                         done=request.query_params.get("done"),
                         failed=request.query_params.get("failed"))

    async def dead_bulk(self, request: Request) -> Response:
        action = request.path_params["action"]
        if action not in BULK_ACTIONS:
            return self.error(request, 404, "NotFound", f"no bulk action {action[:40]!r}",
                              api=False)
        form = await self.form(request)
        ids = [job_id_of(value) for value in request.state.form_lists.get("ids", [])]
        aq = await self.source.queue()
        done = failed = 0
        for jid in ids:
            try:
                if action == "retry":
                    await aq.retry(jid)
                else:
                    await aq.discard(jid, reason="discarded from the dashboard")
                done += 1
            except (JobNotFound, JobStateError):
                failed += 1  # someone else acted first; say so, do the rest
        self.source.forget()
        if wants_json(request):
            return JSONResponse({"done": done, "failed": failed})
        back = safe_next(form.get("next"), self.base(request))
        sep = "&" if "?" in back else "?"
        return RedirectResponse(f"{back}{sep}{urlencode({'done': done, 'failed': failed})}",
                                303)

    async def login(self, request: Request) -> Response:
        """The login form (GET), a login link (GET with ``?token=``, the CLI prints one),
        and the form's POST: a few KB of urlencoded body at most, throttled per address."""
        try:
            return await self._login(request)
        except LeaseqError as exc:
            return self.leaseq_error(request, exc, api=False)
        except BodyTooLarge:
            return self.error(request, 413, "PayloadTooLarge", "the login form is too big",
                              api=False)
        except Exception as exc:  # one line and a 500, never a traceback
            return self.unexpected(request, exc, api=False)

    async def _login(self, request: Request) -> Response:
        link = request.query_params.get("token") if request.method in ("GET", "HEAD") else None
        if request.method in ("GET", "HEAD") and link is None:
            identity = self.auth.identify(request)
            if identity is not None and identity.kind in ("session", "open"):
                return RedirectResponse(self.base(request) + "/", 303)
            return self.login_page(request)
        retry = self.auth.retry_after(request)
        if retry is not None:
            return self.throttled(request, retry, api=False)
        if link is not None:
            given, target = link, request.query_params.get("next")
        else:
            form = await self.form(request, LOGIN_BODY)
            given, target = form.get("token", ""), form.get("next")
        target = safe_next(target, self.base(request))
        if not self.auth.token_matches(given):
            self.auth.failed(request, "a wrong token at /login")
            return self.page(request, "login.html", status=401, next=target, wrong=True)
        _, cookie = self.auth.new_session()
        # A redirect in any case: a login link's token leaves the address bar and history.
        response = RedirectResponse(target, 303)
        response.set_cookie(COOKIE, cookie, max_age=self.auth.session_max_age, httponly=True,
                            samesite="strict", path=self.base(request) + "/",
                            secure=self.auth.secure_cookies or request.url.scheme == "https")
        return response

    async def logout(self, request: Request) -> Response:
        if not same_origin(request):
            return self.error(request, 403, "Forbidden", "cross-site request refused",
                              api=False)
        session = self.auth.session(request)
        if session is not None:
            self.auth.end(session)
        response = RedirectResponse(self.base(request) + "/login", 303)
        response.delete_cookie(COOKIE, path=self.base(request) + "/", httponly=True,
                               samesite="strict",
                               secure=self.auth.secure_cookies or request.url.scheme == "https")
        return response

    # -- API -----------------------------------------------------------------------------

    async def api_queues(self, request: Request) -> Response:
        stats = await self.source.stats()
        return JSONResponse({
            "queues": [queue_json(s, self.source) for s in stats.values()],
            "totals": totals(stats, await self.source.transaction_age()),
            "series": self.source.series(None),
            "read_only": self.read_only,
        })

    async def api_queue(self, request: Request) -> Response:
        aq = await self.source.queue()
        name = request.path_params["name"]
        config = await aq.queue_config(name)
        stats = (await self.source.stats()).get(name, QueueStats(name))
        return JSONResponse({"queue": queue_json(stats, self.source),
                             "config": config.as_dict()})

    async def api_jobs(self, request: Request) -> Response:
        queue = request.query_params.get("queue") or None
        filters = list_filters(request, queue=queue,
                               state=request.query_params.get("state") or None)
        jobs = await (await self.source.queue()).jobs(**filters)
        more = len(jobs) == filters["limit"]
        return JobsResponse({"jobs": jobs_json(jobs),
                             "next_after": jobs[-1].id if jobs and more else None})

    async def api_job(self, request: Request) -> Response:
        job = await (await self.source.queue()).get(job_id(request))
        return JobsResponse({"job": jobs_json([job])[0]})

    async def job_action(self, request: Request) -> Response:
        aq = await self.source.queue()
        jid, action = job_id(request), request.path_params["action"]
        if action not in JOB_ACTIONS:
            return self.error(request, 404, "NotFound", f"no job action {action[:40]!r}",
                              api=True)
        body: dict[str, Any] = {"id": jid, "action": action}
        if action == "retry":
            await aq.retry(jid)
        elif action == "discard":
            await aq.discard(jid, reason="discarded from the dashboard")
        else:
            body["state"] = state = await aq.cancel(jid)
            if state in ("completed", "discarded"):
                # The client treats this as a no-op; an operator who pressed Cancel must
                # learn that the job had already finished.
                raise JobStateError(f"cannot cancel job {jid}: it already finished ({state})")
        self.source.forget()
        return await self.acted(request, body)

    async def queue_action(self, request: Request) -> Response:
        aq = await self.source.queue()
        name, action = request.path_params["name"], request.path_params["action"]
        if action not in QUEUE_ACTIONS:
            return self.error(request, 404, "NotFound", f"no queue action {action[:40]!r}",
                              api=True)
        body: dict[str, Any] = {"queue": name, "action": action}
        if action == "pause":
            await aq.pause(name)
        elif action == "resume":
            await aq.resume(name)
        else:
            limit = int_param(request, "limit", KICK_LIMIT, 1, KICK_LIMIT)
            body["kicked"] = await aq.kick(name, limit=limit)
        self.source.forget()
        return await self.acted(request, body)

    async def acted(self, request: Request, body: dict[str, Any]) -> Response:
        """JSON for scripts and the page's fetch; a redirect back for a plain form."""
        if is_form(request) and not wants_json(request):
            form = await self.form(request)
            return RedirectResponse(safe_next(form.get("next"), self.base(request)), 303)
        return JSONResponse({"ok": True, **body})

    async def api_enqueue(self, request: Request) -> Response:
        """Enqueues a job from a JSON body: 201 when created, 200 when a live job holds
        the unique key already (its id), 400 for bad input, 413 for a body over the cap,
        429 for a full queue (``leaseq_error``)."""
        cap = body_cap(self.source.settings.max_payload_bytes)
        try:
            body = await read_body(request, cap)
        except BodyTooLarge as exc:
            return self.error(request, 413, "PayloadTooLarge", str(exc), api=True)
        arguments = enqueue_arguments(body)
        result = await (await self.source.queue()).enqueue(request.path_params["name"],
                                                           **arguments)
        self.source.forget()
        return JSONResponse({"id": result.id, "created": result.created},
                            201 if result.created else 200)

    async def api_openapi(self, request: Request) -> Response:
        return JSONResponse(openapi.document(self.base(request), leaseq.__version__))

    async def api_csrf(self, request: Request) -> Response:
        return JSONResponse({"csrf": self.auth.csrf(request.state.identity)})

    async def metrics(self, request: Request) -> Response:
        from leaseq import metrics  # prometheus-client, only when scraped

        stats: dict[str, QueueStats] | None
        age = None
        try:
            stats = await self.source.stats()
            age = await self.source.transaction_age()
        except BackendError as exc:
            # Prometheus keeps scraping a 200 and alerts on leaseq_scrape_error; a 503
            # would only show as the target being down.
            log.warning("leaseq dashboard: reading queue stats for /metrics failed: %s",
                        redact.scrub(str(exc), self.source.url))
            stats = None
        return Response(metrics.render_queue_state(stats, transaction_age=age),
                        media_type=metrics.CONTENT_TYPE)

    # -- wiring --------------------------------------------------------------------------

    def routes(self) -> list[Route | Mount]:
        g = self.guarded
        return [
            Route("/", g(self.overview)),
            Route("/queues/{name}", g(self.queue_page)),
            Route("/jobs/go", g(self.go_to_job)),
            Route("/jobs/{id}", g(self.job_page)),
            Route("/dead", g(self.dead_page)),
            Route("/dead/{action:str}", g(self.dead_bulk, write=True), methods=["POST"]),
            Route("/login", self.login, methods=["GET", "POST"]),
            Route("/logout", self.logout, methods=["POST"]),
            Route("/metrics", g(self.metrics, api=True, metrics=True)),
            Route("/api/csrf", g(self.api_csrf, api=True)),
            Route("/api/queues", g(self.api_queues, api=True)),
            Route("/api/queues/{name}", g(self.api_queue, api=True)),
            Route("/api/openapi.json", g(self.api_openapi, api=True)),
            # Before the queue actions, whose {action} would match "jobs" too.
            Route("/api/queues/{name}/jobs",
                  g(self.api_enqueue, write=True, api=True, bearer=True), methods=["POST"]),
            Route("/api/queues/{name}/{action:str}", g(self.queue_action, write=True, api=True),
                  methods=["POST"]),
            Route("/api/jobs", g(self.api_jobs, api=True)),
            Route("/api/jobs/{id}", g(self.api_job, api=True)),
            Route("/api/jobs/{id}/{action:str}", g(self.job_action, write=True, api=True),
                  methods=["POST"]),
            Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
        ]


JOB_ACTIONS = ("retry", "discard", "cancel")
QUEUE_ACTIONS = ("pause", "resume", "kick")
BULK_ACTIONS = ("retry", "discard")


def is_form(request: Request) -> bool:
    kind = request.headers.get("content-type", "")
    return kind.startswith(("application/x-www-form-urlencoded", "multipart/form-data"))


def browser_form(request: Request) -> bool:
    return is_form(request) and "text/html" in request.headers.get("accept", "")


def wants_json(request: Request) -> bool:
    accept = request.headers.get("accept", "")
    return "application/json" in accept and "text/html" not in accept


def int_param(request: Request, name: str, default: int, low: int, high: int) -> int:
    text = request.query_params.get(name)
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise InvalidArgument(f"{name} must be an integer, got {text!r}") from None
    if not low <= value <= high:
        raise InvalidArgument(f"{name} must be between {low} and {high}, got {value}")
    return value


def job_id_of(text: Any) -> int:
    try:
        return int(str(text))
    except ValueError:
        raise InvalidArgument(f"a job id is an integer, got {str(text)[:40]!r}") from None


def job_id(request: Request) -> int:
    return job_id_of(request.path_params["id"])


def list_filters(request: Request, *, queue: str | None, state: str | None = None
                 ) -> dict[str, Any]:
    """``jobs()`` arguments from the query string; the client checks every value."""
    params = request.query_params
    if state is None:
        state = params.get("state") or None
    filters: dict[str, Any] = {
        "queue": queue, "state": state,
        "limit": int_param(request, "limit", PAGE, 1, 500),
        "after": int_param(request, "after", 0, 0, 2**63 - 1),
    }
    for name in ("kind", "unique_key", "tag"):
        if params.get(name):
            filters[name] = params[name]
    return filters


def next_page(request: Request, jobs: list[JobInfo], limit: int) -> str | None:
    if len(jobs) < limit:
        return None
    params = dict(request.query_params)
    params["after"] = str(jobs[-1].id)
    return f"{request.url.path}?{urlencode(params)}"


def jobs_json(jobs: list[JobInfo]) -> list[dict[str, Any]]:
    return [jsonable(job) for job in jobs]


def create_app(
    url: str,
    token: str | None = None,
    read_only: bool = False,
    *,
    table_prefix: str = "leaseq_",
    settings: leaseq.Settings | None = None,
    refresh: float = 2.0,
    allowed_hosts: Collection[str] | None = None,
    metrics_token: str | None = None,
    public_metrics: bool = False,
    session_max_age: float = SESSION_MAX_AGE,
    secure_cookies: bool = False,
) -> Starlette:
    """The dashboard as an ASGI app for ``url``: pages, and the JSON API that
    ``/api/openapi.json`` describes. docs/security.md says what each option guards.

    Args:
        url: The database URL, as for ``leaseq.connect``. Its credentials are never shown.
        token: When set, every request must carry it (``Authorization: Bearer <token>``,
            or the session cookie the login page sets). Without one, anyone who passes the
            ``Host`` check may read and act: mount it behind your own authentication.
            Enqueueing over HTTP (``POST /api/queues/{name}/jobs``) always needs it, as a
            bearer header: without a token that route answers 403.
        read_only: Refuse every action with 403 and hide the buttons.
        table_prefix: Prefix of leaseq's tables (ignored when ``settings`` is given).
        settings: Client settings, for a non-default prefix or pool.
        refresh: Seconds between the pages' live updates.
        allowed_hosts: The names the app answers to in the ``Host`` header (without port;
            ``*.example.com`` for subdomains), besides the loopback names; other hosts get
            400. ``["*"]`` checks nothing. None: no check when ``token`` is set (the app
            does not know where it is mounted), loopback names only when it is not, so a
            web page elsewhere cannot reach an open dashboard through DNS rebinding.
        metrics_token: A second token that may read ``/metrics`` and nothing else, for
            Prometheus.
        public_metrics: Serve ``/metrics`` without any token.
        session_max_age: Seconds a login lasts (12 h by default).
        secure_cookies: Mark the session cookie ``Secure`` even when the request arrived
            as plain HTTP (the app sits behind a proxy that terminates TLS).
    """
    if refresh <= 0:
        raise InvalidArgument(f"refresh must be positive, got {refresh!r}")
    if not 60 <= session_max_age <= 366 * 86400:
        raise InvalidArgument(f"session_max_age must be between 60 s and a year, got "
                              f"{session_max_age!r}")
    source = Source(url, settings or leaseq.Settings(table_prefix=table_prefix))
    auth = Auth(token, metrics_token=metrics_token, public_metrics=public_metrics,
                session_max_age=int(session_max_age), secure_cookies=secure_cookies)
    board = Dashboard(source, auth, read_only, refresh)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # Runs when served on its own; a mounted app gets no lifespan and its client is
        # closed with the process.
        yield
        await source.close()

    app = Starlette(routes=board.routes(), lifespan=lifespan,
                    exception_handlers={404: board.not_found, 405: board.not_allowed})
    app.add_middleware(HostCheck, allowed=hosts_allowed(allowed_hosts, token))
    app.state.leaseq = source
    return app


def hosts_allowed(given: Collection[str] | None, token: str | None) -> list[str] | None:
    """The ``Host`` names an app answers to (None: any); see ``create_app``."""
    if isinstance(given, str):
        raise InvalidArgument("allowed_hosts is a list of names, not one string")
    if given is None:
        return None if token else list(LOOPBACK_NAMES)
    if "*" in given:
        return None
    for name in given:
        if not name or (any(ch in name for ch in " /@:\\") and not name.startswith("[")):
            raise InvalidArgument(f"allowed_hosts takes host names without ports, got "
                                  f"{name!r}")
    return [*LOOPBACK_NAMES, *given]
