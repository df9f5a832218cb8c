"""The evaluation runner: the program an evaluation job runs (``python -m jobs.runner``).

It asks the platform for the job's dataset items, runs the model on each one, prints a
line per item, and posts the outputs back in batches; the platform scores them with the
experiment's evaluators as they arrive. Standard library only, and nothing from the
project, so this one file can be copied into any image (``python runner.py``).

Environment:
    AGENTOPS_URL        the platform, e.g. https://agentops.example.com
    AGENTOPS_JOB_ID     the job's id
    AGENTOPS_JOB_TOKEN  the job's token (valid for this job's items and results only,
                        until the job ends)
    AGENTOPS_MODEL      what to evaluate:
                          echo                         the output is the input (smoke tests)
                          openai:<base_url>|<model>    an OpenAI-compatible chat completions
                                                       server, e.g. vLLM in the same job
                          transformers:<model id>      a transformers text-generation pipeline
    AGENTOPS_MODEL_PARAMS         optional JSON object added to each request (temperature,
                                  max_tokens, ...; max_new_tokens for transformers)
    AGENTOPS_MODEL_WAIT_SECONDS   how long to wait for an openai server to come up (600)
    OPENAI_API_KEY                optional bearer key for the openai server
    AGENTOPS_RETRY_SECONDS        the first retry's delay (0.5), doubled each time up to 30

Exit codes: 0 when every result was delivered (items the model failed on are reported
with their error), 1 when the platform could not be used or every item failed, 2 for a
missing or malformed setting.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request
from urllib.parse import urlsplit

BATCH_SIZE = 10
BATCH_SECONDS = 5.0
REQUEST_TIMEOUT_SECONDS = 60
MODEL_TIMEOUT_SECONDS = 600
RETRY_ATTEMPTS = 6
RETRY_BASE_SECONDS = 0.5
RETRY_MAX_SECONDS = 30.0
MODEL_ATTEMPTS = 3
USER_AGENT = "agentops-job-runner/1"


class _RedirectsRefused(urllib.request.HTTPRedirectHandler):
    """A redirect answer is an error (``HTTPError`` with its 3xx status), never followed:
    urllib would send the request's headers, the job token or the model server's key
    among them, on to whatever address the redirect names."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


_opener = urllib.request.build_opener(_RedirectsRefused)


class RunnerError(Exception):
    """The run cannot go on; the message says why, for the job's log."""

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


class ItemError(Exception):
    """The model failed on one item: reported with that item, the run goes on."""


def log(message: str) -> None:
    print(message, flush=True)


def _error_message(error: urllib.error.HTTPError) -> str:
    """The message of an error answer: the platform's ``{"error": {"message"}}``, another
    JSON shape's message, or the start of the body."""
    try:
        raw = error.read()
    except OSError:
        raw = b""
    text = raw.decode("utf-8", "replace").strip()
    try:
        body = json.loads(text)
    except ValueError:
        return text[:300] or error.reason or f"HTTP {error.code}"
    if isinstance(body, dict):
        inner = body.get("error")
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
        for key in ("detail", "message", "error"):
            if isinstance(body.get(key), str):
                return body[key]
    return text[:300]


def _retry_delay(attempt: int, retry_after: str | None) -> float:
    if retry_after and retry_after.strip().isdigit():
        return min(float(retry_after), RETRY_MAX_SECONDS)
    try:
        base = float(os.environ.get("AGENTOPS_RETRY_SECONDS") or RETRY_BASE_SECONDS)
    except ValueError:
        base = RETRY_BASE_SECONDS
    return min(base * 2 ** (attempt - 1), RETRY_MAX_SECONDS)


def _http_url(value: str, what: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise RunnerError(f"{what} must be an http:// or https:// URL, not {value!r}", exit_code=2)
    return value.rstrip("/")


class Platform:
    """The job's two endpoints, with the job's token; server errors and lost
    connections are retried with backoff."""

    def __init__(self, *, url: str, job_id: str, token: str):
        self.base = f"{_http_url(url, 'AGENTOPS_URL')}/api/v1/jobs/{job_id}"
        self.job_id = job_id
        self.token = token

    def items(self) -> dict:
        return self._request("GET", "items/")

    def post_results(self, results: list[dict]) -> dict:
        return self._request("POST", "results/", {"results": results})

    def _request(self, method: str, path: str, body: dict | None = None) -> dict:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json", "User-Agent": USER_AGENT}
        if data is not None:
            headers["Content-Type"] = "application/json"
        for attempt in range(1, RETRY_ATTEMPTS + 1):
            request = urllib.request.Request(f"{self.base}/{path}", data=data, method=method, headers=headers)  # noqa: S310 - http(s) checked in __init__
            retry_after = None
            try:
                with _opener.open(request, timeout=REQUEST_TIMEOUT_SECONDS) as response:
                    raw = response.read()
                return json.loads(raw) if raw.strip() else {}
            except urllib.error.HTTPError as error:
                message = _error_message(error)
                if error.code == 401:
                    raise RunnerError(f"the job token was refused: {message}") from None
                if error.code == 404:
                    raise RunnerError(f"the platform does not know job {self.job_id}: {message}") from None
                if error.code != 429 and error.code < 500:
                    raise RunnerError(f"{method} {path} was refused (HTTP {error.code}): {message}") from None
                reason = f"HTTP {error.code}: {message}"
                retry_after = error.headers.get("Retry-After") if error.headers else None
            except (urllib.error.URLError, OSError) as error:
                reason = f"cannot reach the platform: {getattr(error, 'reason', None) or error}"
            except ValueError:
                raise RunnerError(f"{method} {path}: the platform's answer is not JSON") from None
            if attempt == RETRY_ATTEMPTS:
                raise RunnerError(f"{method} {path} failed {RETRY_ATTEMPTS} times; the last error: {reason}")
            delay = _retry_delay(attempt, retry_after)
            log(f"{method} {path} failed ({reason}); retrying in {delay:g} s")
            time.sleep(delay)
        raise AssertionError("unreachable")


# --- Models: generate(input) -> (output, tokens or None); ItemError for one item's failure.


def to_messages(value) -> list[dict]:
    """Chat messages for an item's input: a string, ``{"messages": [...]}``,
    ``{"prompt": ...}``, or any other JSON (sent as its text)."""
    if isinstance(value, dict) and isinstance(value.get("messages"), list):
        return value["messages"]
    if isinstance(value, dict) and "prompt" in value:
        value = value["prompt"]
    return [{"role": "user", "content": value if isinstance(value, str) else json.dumps(value)}]


class EchoModel:
    name = "echo"

    def generate(self, value):
        return value, None


class OpenAIChatModel:
    """An OpenAI-compatible ``/v1/chat/completions`` endpoint (vLLM, TGI, llama.cpp, ...)."""

    def __init__(self, base_url: str, model: str, params: dict):
        base = _http_url(base_url, "the openai base URL")
        self.base = base if base.endswith("/v1") else f"{base}/v1"
        self.model = model
        self.params = params
        self.api_key = os.environ.get("OPENAI_API_KEY", "")
        self.name = f"{model} at {self.base}"

    def _post(self, path: str, body: dict, timeout: float):
        headers = {"Content-Type": "application/json", "Accept": "application/json", "User-Agent": USER_AGENT}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(f"{self.base}/{path}", data=json.dumps(body).encode(), headers=headers)  # noqa: S310 - http(s) checked
        with _opener.open(request, timeout=timeout) as response:
            return json.loads(response.read())

    def wait_until_up(self, seconds: float) -> None:
        """A server started in the same job may still be loading its weights: any HTTP
        answer means it is up; a refused connection means wait."""
        deadline = time.monotonic() + seconds
        next_notice = 0.0
        while True:
            try:
                with _opener.open(f"{self.base}/models", timeout=10):
                    return
            except urllib.error.HTTPError:
                return
            except (urllib.error.URLError, OSError) as error:
                if time.monotonic() >= deadline:
                    raise RunnerError(
                        f"the model server at {self.base} did not answer within {seconds:g} s: "
                        f"{getattr(error, 'reason', None) or error}"
                    ) from None
                if time.monotonic() >= next_notice:
                    log(f"waiting for the model server at {self.base} ...")
                    next_notice = time.monotonic() + 30
                time.sleep(2)

    def generate(self, value):
        body = {"model": self.model, "messages": to_messages(value), **self.params}
        for attempt in range(1, MODEL_ATTEMPTS + 1):
            try:
                answer = self._post("chat/completions", body, MODEL_TIMEOUT_SECONDS)
                break
            except urllib.error.HTTPError as error:
                reason = f"HTTP {error.code}: {_error_message(error)}"
                if error.code != 429 and error.code < 500:
                    raise ItemError(reason) from None
            except (urllib.error.URLError, OSError) as error:
                reason = f"cannot reach the model server: {getattr(error, 'reason', None) or error}"
            except ValueError:
                raise ItemError("the model server's answer is not JSON") from None
            if attempt == MODEL_ATTEMPTS:
                raise ItemError(reason)
            time.sleep(_retry_delay(attempt, None))
        try:
            output = answer["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise ItemError("the model server's answer has no choices[0].message.content") from None
        usage = answer.get("usage") if isinstance(answer, dict) else None
        tokens = usage.get("total_tokens") if isinstance(usage, dict) else None
        return output, tokens if isinstance(tokens, int) else None


class TransformersModel:
    """A Hugging Face transformers text-generation pipeline, on the job's GPU when there
    is one. Imported only here: the image must have transformers and torch."""

    def __init__(self, model_id: str, params: dict):
        try:
            import torch
            from transformers import pipeline
        except ImportError as error:
            raise RunnerError(f"the transformers model needs transformers and torch in the image: {error}") from None
        self.name = model_id
        self.params = {"max_new_tokens": 256, **params, "return_full_text": False}
        self.pipeline = pipeline("text-generation", model=model_id, device=0 if torch.cuda.is_available() else -1)

    def generate(self, value):
        if isinstance(value, dict) and isinstance(value.get("messages"), list):
            prompt = value["messages"]
        elif isinstance(value, str):
            prompt = value
        else:
            prompt = to_messages(value)[0]["content"]
        try:
            generated = self.pipeline(prompt, **self.params)[0]["generated_text"]
        except Exception as error:  # noqa: BLE001 - any failure of the model is this item's error
            raise ItemError(f"{type(error).__name__}: {error}") from None
        if isinstance(generated, list):  # chat input: the conversation with the answer last
            generated = generated[-1].get("content", "") if generated else ""
        return generated, None


def model_from(spec: str, params: dict):
    kind, _, rest = spec.partition(":")
    if spec == "echo":
        return EchoModel()
    if kind == "openai" and "|" in rest:
        base_url, _, model = rest.partition("|")
        if base_url and model:
            return OpenAIChatModel(base_url, model, params)
    if kind == "transformers" and rest:
        return TransformersModel(rest, params)
    raise RunnerError(
        f"AGENTOPS_MODEL={spec!r} is not a model this runner knows: use echo, "
        "openai:<base_url>|<model> or transformers:<model id>",
        exit_code=2,
    )


# --- The run.


def _setting(name: str) -> str:
    value = os.environ.get(name, "").strip()
    if not value:
        raise RunnerError(f"{name} is not set: the platform sets it for an evaluation job", exit_code=2)
    return value


def _model_params() -> dict:
    raw = os.environ.get("AGENTOPS_MODEL_PARAMS", "").strip()
    if not raw:
        return {}
    try:
        params = json.loads(raw)
    except ValueError:
        params = None
    if not isinstance(params, dict):
        raise RunnerError("AGENTOPS_MODEL_PARAMS must be a JSON object", exit_code=2)
    return params


def run() -> int:
    platform = Platform(
        url=_setting("AGENTOPS_URL"), job_id=_setting("AGENTOPS_JOB_ID"), token=_setting("AGENTOPS_JOB_TOKEN")
    )
    model = model_from(_setting("AGENTOPS_MODEL"), _model_params())
    payload = platform.items()
    items = payload.get("items") or []
    evaluators = payload.get("evaluators") or []
    log(
        f"evaluating {model.name} on {len(items)} items of experiment {payload.get('experiment')}"
        f" (evaluators: {', '.join(map(str, evaluators)) or 'none'})"
    )
    if isinstance(model, OpenAIChatModel) and items:
        model.wait_until_up(float(os.environ.get("AGENTOPS_MODEL_WAIT_SECONDS") or 600))

    batch: list[dict] = []
    batch_started = time.monotonic()
    delivered = failed = 0
    first_error = ""
    for number, item in enumerate(items, start=1):
        key = item.get("key")
        started = time.perf_counter()
        try:
            output, tokens = model.generate(item.get("input"))
            error = ""
        except ItemError as item_error:
            output, tokens, error = None, None, str(item_error)
        latency_ms = round((time.perf_counter() - started) * 1000)
        result = {"item": key, "output": output, "latency_ms": latency_ms}
        line = f"item {number}/{len(items)} {key}: {latency_ms} ms"
        if tokens is not None:
            result["tokens"] = tokens
            line += f", {tokens} tokens"
        if error:
            result["error"] = error
            line += f", error: {error}"
            failed += 1
            first_error = first_error or error
        log(line)
        batch.append(result)
        if len(batch) >= BATCH_SIZE or time.monotonic() - batch_started >= BATCH_SECONDS:
            platform.post_results(batch)
            delivered += len(batch)
            batch, batch_started = [], time.monotonic()
    if batch:
        platform.post_results(batch)
        delivered += len(batch)
    log(f"done: {delivered} results delivered, {failed} with an error")
    if items and failed == len(items):
        raise RunnerError(f"the model failed on every item; the first error: {first_error}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv:
        print(__doc__)
        return 0 if argv[0] in ("-h", "--help") else 2
    try:
        return run()
    except RunnerError as error:
        print(f"error: {error.message}", file=sys.stderr, flush=True)
        return error.exit_code


if __name__ == "__main__":
    sys.exit(main())
