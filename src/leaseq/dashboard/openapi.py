"""The OpenAPI 3.1 document of the dashboard's JSON routes, served at ``/api/openapi.json``.

Written by hand next to the routes it describes; ``tests/dashboard/test_enqueue_http.py``
checks that every JSON route is in it and that it validates."""

from __future__ import annotations

from typing import Any

from leaseq._core.job import LIVE_STATES, TERMINAL_STATES

QUEUE_ACTIONS = {"pause": "Pause the queue: no claim takes its jobs until it resumes.",
                 "resume": "Resume a paused queue.",
                 "kick": "Bring up to `limit` dead jobs of the queue back (fresh attempts)."}
JOB_ACTIONS = {"retry": "Run a dead or scheduled job now (a dead one with fresh attempts).",
               "discard": "Move a dead, scheduled or available job to history as discarded.",
               "cancel": "Cancel a job: at once when it waits, at its next heartbeat when "
                         "it runs."}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _error(description: str) -> dict[str, Any]:
    return _json(_ref("Error"), description)


ERRORS = {"401": _error("The token is missing or wrong."),
          "503": _error("The database is unreachable or not migrated.")}
WRITE_ERRORS = {**ERRORS, "403": _error("Read-only dashboard, cross-site request, or no "
                                        "CSRF token (or bearer token).")}
NAME = {"name": "name", "in": "path", "required": True, "description": "A queue name.",
        "schema": {"type": "string"}}
JOB_ID = {"name": "id", "in": "path", "required": True, "description": "A job id.",
          "schema": {"type": "integer"}}


def _get(summary: str, schema: dict[str, Any], *params: dict[str, Any],
         errors: dict[str, Any] | None = None) -> dict[str, Any]:
    op: dict[str, Any] = {"summary": summary,
                          "responses": {"200": _json(schema, "OK"), **(errors or ERRORS)}}
    if params:
        op["parameters"] = list(params)
    return {"get": op}


def _post(summary: str, schema: dict[str, Any], *params: dict[str, Any],
          errors: dict[str, Any] | None = None) -> dict[str, Any]:
    op: dict[str, Any] = {"summary": summary,
                          "responses": {"200": _json(schema, "Done"),
                                        **(errors or WRITE_ERRORS)}}
    if params:
        op["parameters"] = list(params)
    return {"post": op}


ENQUEUE_BODY = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "payload": {"description": "Any JSON value, at most the client's max_payload_bytes "
                                   "(1 MiB by default) encoded."},
        "kind": {"type": ["string", "null"], "minLength": 1, "maxLength": 200,
                 "description": "The task name a worker routes on."},
        "priority": {"type": ["integer", "null"], "minimum": -(2**31),
                     "maximum": 2**31 - 1, "description": "Higher runs first; 0 by default."},
        "delay": {"type": ["number", "null"], "minimum": 0,
                  "description": "Seconds from now, by the database's clock."},
        "run_at": {"type": ["string", "null"], "format": "date-time",
                   "description": "An ISO 8601 time with a time zone, instead of delay."},
        "unique_key": {"type": ["string", "null"], "minLength": 1, "maxLength": 255,
                       "description": "At most one live job per (queue, unique_key)."},
        "unique_for": {"type": ["number", "null"], "exclusiveMinimum": 0,
                       "description": "With unique_key: seconds after a twin finished "
                                      "during which its id is returned instead."},
        "max_attempts": {"type": ["integer", "null"], "minimum": 1, "maximum": 1_000_000,
                         "description": "Defaults to the queue's setting, else 5."},
        "headers": {"type": ["object", "null"], "additionalProperties": {"type": "string"},
                    "maxProperties": 64, "description": "Strings stored with the job."},
        "tags": {"type": ["array", "null"], "maxItems": 16, "items": {
                     "type": "string", "pattern": "^[A-Za-z0-9_.:-]{1,64}$"},
                 "description": "Labels to find the job by (GET /api/jobs?tag=)."},
    },
}

SCHEMAS: dict[str, Any] = {
    "Error": {"type": "object", "required": ["error"], "properties": {"error": {
        "type": "object", "required": ["type", "message"],
        "properties": {"type": {"type": "string", "description": "leaseq's exception name, "
                                "or an HTTP reason such as Unauthorized."},
                       "message": {"type": "string"}}}}},
    "Enqueue": ENQUEUE_BODY,
    "Enqueued": {"type": "object", "required": ["id", "created"], "properties": {
        "id": {"type": "integer"},
        "created": {"type": "boolean", "description": "False: a live job held the "
                    "unique_key (or, with unique_for, one finished recently); id is its."}}},
    "Job": {"type": "object", "description": "leaseq.JobInfo's fields; times in ISO 8601.",
            "properties": {"id": {"type": "integer"}, "queue": {"type": "string"},
                           "kind": {"type": ["string", "null"]},
                           "state": {"type": "string",
                                     "enum": [*LIVE_STATES, "scheduled", *TERMINAL_STATES]},
                           "payload": {}, "result": {},
                           "tags": {"type": "array", "items": {"type": "string"}}},
            "additionalProperties": True},
    "QueueStats": {"type": "object", "description": "leaseq.QueueStats' fields and the "
                   "throughput series.", "additionalProperties": True},
    "Acted": {"type": "object", "required": ["ok"], "properties": {"ok": {"const": True}},
              "additionalProperties": True},
}


def document(base: str, version: str) -> dict[str, Any]:
    """The OpenAPI document for a dashboard served under ``base`` (its root path)."""
    paths: dict[str, Any] = {
        "/api/queues": _get("Every queue's counts, the totals and the throughput series.",
                            {"type": "object", "properties": {
                                "queues": {"type": "array", "items": _ref("QueueStats")},
                                "totals": {"type": "object"},
                                "series": {"type": "array", "items": {"type": "number"}},
                                "read_only": {"type": "boolean"}}}),
        "/api/queues/{name}": _get("One queue's counts and stored settings.",
                                   {"type": "object", "properties": {
                                       "queue": _ref("QueueStats"),
                                       "config": {"type": "object"}}}, NAME),
        "/api/queues/{name}/jobs": {"post": {
            "summary": "Enqueue a job (docs/enqueue-from-sql-and-http.md). Needs the bearer "
                       "token always, even on loopback; refused by a read-only dashboard.",
            "security": [{"bearer": []}],
            "parameters": [NAME],
            "requestBody": {"required": False,
                            "content": {"application/json": {"schema": _ref("Enqueue")}}},
            "responses": {
                "201": _json(_ref("Enqueued"), "Created."),
                "200": _json(_ref("Enqueued"), "Not created: a live job holds the key."),
                "400": _error("Not JSON, not an object, unknown fields, or a value leaseq "
                              "refuses (queue name, payload, priority, ...)."),
                "413": _error("The body is over the cap (twice max_payload_bytes + 64 KiB)."),
                "429": {**_error("The queue holds its max_jobs live jobs."),
                        "headers": {"Retry-After": {"schema": {"type": "integer"},
                                                    "description": "Seconds to wait."}}},
                **WRITE_ERRORS,
                "403": _error("Read-only dashboard, a dashboard without a token, or a "
                              "cross-site request."),
            },
        }},
        "/api/jobs": _get(
            "Jobs in id order, filtered; page with after=<next_after>.",
            {"type": "object", "properties": {
                "jobs": {"type": "array", "items": _ref("Job")},
                "next_after": {"type": ["integer", "null"]}}},
            *({"name": n, "in": "query", "required": False, "schema": {"type": t}}
              for n, t in (("queue", "string"), ("state", "string"), ("kind", "string"),
                           ("unique_key", "string"), ("tag", "string"), ("limit", "integer"),
                           ("after", "integer"))),
            errors={**ERRORS, "400": _error("A bad filter.")}),
        "/api/jobs/{id}": _get("One job.", {"type": "object",
                                            "properties": {"job": _ref("Job")}},
                               JOB_ID, errors={**ERRORS, "404": _error("No such job.")}),
        "/api/csrf": _get("The CSRF token a script without the bearer token sends as "
                          "X-CSRF-Token with a POST.",
                          {"type": "object", "properties": {"csrf": {"type": "string"}}}),
        "/api/openapi.json": _get("This document.", {"type": "object"}),
    }
    for action, summary in QUEUE_ACTIONS.items():
        params = [NAME]
        if action == "kick":
            params.append({"name": "limit", "in": "query", "required": False,
                           "schema": {"type": "integer", "minimum": 1, "maximum": 10_000}})
        paths[f"/api/queues/{{name}}/{action}"] = _post(summary, _ref("Acted"), *params)
    for action, summary in JOB_ACTIONS.items():
        errors = {**WRITE_ERRORS, "404": _error("No such job."),
                  "409": _error("The job is not in a state this action works on.")}
        paths[f"/api/jobs/{{id}}/{action}"] = _post(summary, _ref("Acted"), JOB_ID,
                                                     errors=errors)
    return {
        "openapi": "3.1.0",
        "info": {"title": "leaseq dashboard", "version": version,
                 "description": "The JSON API of `leaseq dashboard` (docs/dashboard.md)."},
        "servers": [{"url": base or "/"}],
        "security": [{"bearer": []}, {"session": []}],
        "paths": paths,
        "components": {
            "schemas": SCHEMAS,
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer",
                           "description": "The dashboard's --token."},
                "session": {"type": "apiKey", "in": "cookie", "name": "leaseq_session",
                            "description": "The cookie the login page sets."},
            },
        },
    }
