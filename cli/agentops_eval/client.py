"""HTTP client for the experiments API of AgentOps Studio (only ``requests``).

Every call is retried on connection errors, timeouts, 5xx answers and 429 (waiting the
``Retry-After`` the server sends), with exponential backoff. Starting an experiment sends an
``Idempotency-Key`` header and keeps the same key across its retries, so a retry after a lost
answer gets the first answer back instead of starting a second experiment.
"""

from __future__ import annotations

import random
import time
import uuid
from typing import Any
from urllib.parse import quote, urljoin, urlsplit

import requests
import requests.auth

from agentops_eval import __version__

#: Attempts after the first one.
DEFAULT_RETRIES = 5
#: Seconds before the first retry; doubled at each further one (with jitter), up to MAX_BACKOFF.
DEFAULT_BACKOFF = 1.0
MAX_BACKOFF = 30.0
#: Longest Retry-After honoured for a 429 (seconds).
MAX_RETRY_AFTER = 60.0
#: (connect, read) timeout of one HTTP request, in seconds.
REQUEST_TIMEOUT = (10.0, 60.0)
#: Most pages of results read from one experiment (page_size 500).
MAX_RESULT_PAGES = 20

ENDED_STATUSES = frozenset({"succeeded", "failed", "cancelled"})


class ClientError(Exception):
    """Base of the errors this module raises."""


class ConfigError(ClientError):
    """The client is configured wrongly (URL, project, key)."""


class ApiError(ClientError):
    """The API refused the request (4xx): its ``{"error": {...}}`` body, parsed."""

    def __init__(self, status: int, code: str, message: str, details: Any = None):
        self.status = status
        self.code = code
        self.message = message
        self.details = details
        super().__init__(self.describe())

    def describe(self) -> str:
        text = f"HTTP {self.status} {self.code}: {self.message}"
        extra = _details_text(self.details)
        return f"{text} ({extra})" if extra else text


class ServerError(ClientError):
    """The server failed (5xx), was unreachable or kept throttling, after every retry."""


def _details_text(details: Any) -> str:
    """A short one-line rendering of an error's ``details`` (field messages)."""
    if not details:
        return ""
    if isinstance(details, dict):
        parts = []
        for key, value in details.items():
            if isinstance(value, list):
                value = "; ".join(str(v) for v in value)
            parts.append(f"{key}: {value}")
        text = ", ".join(parts)
    else:
        text = str(details)
    return text if len(text) <= 300 else text[:297] + "..."


def api_base(url: str, project: str) -> str:
    """``https://host/api/v1/projects/<org>/<project>/`` from the platform address and
    ``ORG/PROJECT``."""
    url = (url or "").strip().rstrip("/")
    if not url:
        raise ConfigError("no platform address: pass --url or set AGENTOPS_URL")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"--url must be an http:// or https:// address, not {url!r}")
    for suffix in ("/api/v1", "/api"):
        if url.endswith(suffix):
            url = url[: -len(suffix)]
            break
    org, sep, name = (project or "").strip().strip("/").partition("/")
    if not sep or not org or not name or "/" in name:
        raise ConfigError(
            "the project must be given as ORG/PROJECT (the slugs in its address): "
            f"pass --project or set AGENTOPS_PROJECT (got {project!r})"
        )
    return f"{url}/api/v1/projects/{quote(org, safe='')}/{quote(name, safe='')}/"


class Client:
    def __init__(
        self,
        url: str,
        project: str,
        api_key: str,
        *,
        retries: int | None = None,
        backoff: float | None = None,
        session: requests.Session | None = None,
        log=None,
    ):
        self.base = api_base(url, project)
        if not api_key:
            raise ConfigError("no API key: set AGENTOPS_API_KEY (or pass --api-key)")
        self.retries = DEFAULT_RETRIES if retries is None else retries
        self.backoff = DEFAULT_BACKOFF if backoff is None else backoff
        self.session = session or requests.Session()
        # As an auth object, not a header: requests would otherwise let a ~/.netrc entry for
        # the host replace it.
        self.session.auth = _Bearer(api_key)
        self.session.headers.update(
            {
                "Accept": "application/json",
                "User-Agent": f"agentops-eval/{__version__} python-requests/{requests.__version__}",
            }
        )
        self.log = log or (lambda message: None)

    # -- the endpoints ---------------------------------------------------------------------

    def start_experiment(self, body: dict, *, idempotency_key: str | None = None) -> dict:
        """``POST experiments/``; returns the experiment object."""
        key = idempotency_key or str(uuid.uuid4())
        return self.request("POST", "experiments/", json=body, headers={"Idempotency-Key": key}, retry_conflict=True)

    def get_experiment(self, experiment_id: int | str) -> dict:
        return self.request("GET", f"experiments/{quote(str(experiment_id), safe='')}/")

    def cancel_experiment(self, experiment_id: int | str) -> dict:
        return self.request("POST", f"experiments/{quote(str(experiment_id), safe='')}/cancel/", json={})

    def gate(self, experiment_id: int | str, conditions: list[dict], baseline: dict | None) -> dict:
        """``POST experiments/{id}/gate/``. A 409 (the experiment has not ended yet, as the
        server sees it) is retried like a server error."""
        return self.request(
            "POST",
            f"experiments/{quote(str(experiment_id), safe='')}/gate/",
            json={"conditions": conditions, "baseline": baseline},
            retry_conflict=True,
        )

    def results(self, experiment_id: int | str, *, max_pages: int = MAX_RESULT_PAGES) -> tuple[list[dict], bool]:
        """The experiment's result rows, following the cursor; (rows, complete) where
        ``complete`` is False when ``max_pages`` were read and more remained."""
        rows: list[dict] = []
        url: str | None = f"experiments/{quote(str(experiment_id), safe='')}/results/"
        params: dict | None = {"page_size": 500}
        for _ in range(max_pages):
            page = self.request("GET", url, params=params)
            if isinstance(page, list):  # tolerate an unpaginated list
                return rows + page, True
            rows.extend(page.get("results") or [])
            url, params = _same_origin(page.get("next")), None
            if not url:
                return rows, True
        return rows, False

    # -- the transport -----------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict | None = None,
        headers: dict | None = None,
        retry_conflict: bool = False,
        retry_throttled: bool = True,
    ) -> Any:
        """One API call with retries. Returns the decoded JSON body of a 2xx answer; raises
        ApiError for a 4xx answer, ServerError when every attempt failed. A 429 is waited
        out and retried unless ``retry_throttled`` is False (then it is an ApiError)."""
        response = self._send(
            method,
            path,
            json=json,
            params=params,
            headers=headers,
            retry_conflict=retry_conflict,
            retry_throttled=retry_throttled,
        )
        return _json_body(response, method, response.url)

    def open_stream(
        self,
        path: str,
        *,
        content_type: str,
        timeout: tuple[float, float] = REQUEST_TIMEOUT,
        retries: int | None = None,
    ) -> requests.Response:
        """The streamed answer of ``GET path`` (a download, an event stream), its body not
        read yet: close it (``with``). Retried as every call until the server starts
        answering (``retries`` attempts after the first, the client's by default). Raises
        ApiError (4xx), ConfigError (a redirect), ServerError (every attempt failed, or the
        answer is not ``content_type``)."""
        response = self._send(
            "GET",
            path,
            headers={"Accept": f"{content_type}, application/json"},
            timeout=timeout,
            retries=retries,
            stream=True,
        )
        answered = response.headers.get("Content-Type", "").split(";")[0].strip()
        if answered != content_type:
            response.close()
            raise ServerError(f"GET {response.url} answered {answered or 'no content type'}, not {content_type}")
        return response

    def _send(
        self,
        method: str,
        path: str,
        *,
        retry_conflict: bool = False,
        retry_throttled: bool = True,
        retries: int | None = None,
        timeout: tuple[float, float] = REQUEST_TIMEOUT,
        **kwargs,
    ) -> requests.Response:
        """The 2xx answer of ``method path``, after the retries ``request`` describes."""
        url = urljoin(self.base, path)
        retries = self.retries if retries is None else retries
        attempt = 0
        while True:
            delay = self._delay(attempt)
            problem: str
            try:
                response = self.session.request(method, url, timeout=timeout, allow_redirects=False, **kwargs)
            except (requests.ConnectionError, requests.Timeout) as exc:
                problem = f"{method} {url}: {type(exc).__name__}: {short(exc)}"
            else:
                status = response.status_code
                if 200 <= status < 300:
                    return response
                if 300 <= status < 400:
                    response.close()
                    location = response.headers.get("Location", "?")
                    raise ConfigError(
                        f"{method} {url} was redirected ({status}) to {location}: "
                        "give the platform's final address in --url / AGENTOPS_URL"
                    )
                error = _api_error(response)
                response.close()
                if status == 429 and not retry_throttled:
                    raise error
                if status == 429:
                    problem = f"{method} {url}: throttled ({error.message})"
                    delay = max(delay, _retry_after(response, default=delay))
                elif status == 409 and retry_conflict:
                    problem = f"{method} {url}: {error.message}"
                elif status >= 500:
                    problem = f"{method} {url}: {error.describe()}"
                    delay = max(delay, _retry_after(response, default=delay))
                else:
                    raise error
            if attempt >= retries:
                raise ServerError(f"{problem} (gave up after {attempt + 1} attempts)")
            attempt += 1
            self.log(f"{problem}; retrying in {delay:.1f} s (attempt {attempt + 1} of {retries + 1})")
            time.sleep(delay)

    def _delay(self, attempt: int) -> float:
        base = min(self.backoff * (2**attempt), MAX_BACKOFF)
        return base * (0.75 + random.random() / 2)  # jitter, not security


class _Bearer(requests.auth.AuthBase):
    def __init__(self, key: str):
        self.key = key

    def __call__(self, request):
        request.headers["Authorization"] = f"Bearer {self.key}"
        return request


def _same_origin(url: str | None) -> str | None:
    """The path and query of a pagination link, to be joined with our own base: a server
    behind a proxy may build its links with another scheme or host, and the key must only
    go where --url says."""
    if not url:
        return None
    parts = urlsplit(url)
    return parts.path + (f"?{parts.query}" if parts.query else "")


def short(exc: Exception) -> str:
    """An error's text, cut to one readable line's length."""
    text = str(exc)
    return text if len(text) <= 200 else text[:197] + "..."


def _retry_after(response: requests.Response, *, default: float) -> float:
    value = response.headers.get("Retry-After")
    try:
        return min(max(float(value), 0.0), MAX_RETRY_AFTER) if value is not None else default
    except ValueError:
        return default


def _json_body(response: requests.Response, method: str, url: str) -> Any:
    if response.status_code == 204 or not response.content:
        return {}
    try:
        return response.json()
    except ValueError as exc:
        raise ServerError(
            f"{method} {url} answered {response.status_code} with a body that is not JSON: {response.text[:200]!r}"
        ) from exc


def _api_error(response: requests.Response) -> ApiError:
    """The API's error body, or a readable stand-in when a proxy answered instead."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        error = body["error"]
        return ApiError(
            response.status_code,
            str(error.get("code") or "error"),
            str(error.get("message") or response.reason or "request refused"),
            error.get("details"),
        )
    text = " ".join((response.text or "").split())[:200]
    message = response.reason or "request refused"
    if text:
        message = f"{message}: {text}"
    return ApiError(response.status_code, "http_error", message)
