"""A stand-in for the `openai` package, for the docs test (tests/cli/docs/examples.rs).

It makes the calls the docs' Python example makes -- `client.models.list()` and
`client.chat.completions.create(...)`, with and without `stream=True` -- over HTTP with the
standard library, sending what the real client sends for them, and reads the answers the way
the example uses them (`.id`, `.choices[0].message.content`, `.choices[0].delta.content`). An
error status raises, as the real client does. The real package is checked against
`pagantic serve` by tests/compat/mcp_client.sh; this one lets `cargo test` run the example with
no package installed.
"""

import json
import urllib.error
import urllib.request

__all__ = ["OpenAI", "APIStatusError"]


class APIStatusError(Exception):
    """An answer with an error status (the real client's base class of NotFoundError & co)."""


class _Fields:
    """A JSON object read as attributes, as the real client's response models are: a field the
    answer left out reads as None (the last chunk's `delta` has no `content`)."""

    def __init__(self, value):
        for key, item in value.items():
            setattr(self, key, _wrap(item))

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return None


def _wrap(value):
    if isinstance(value, dict):
        return _Fields(value)
    if isinstance(value, list):
        return [_wrap(item) for item in value]
    return value


class OpenAI:
    def __init__(self, base_url, api_key, timeout=60.0):
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout
        self.models = _Models(self)
        self.chat = _Chat(self)

    def _open(self, method, path, body=None):
        request = urllib.request.Request(
            self.base_url + path,
            data=None if body is None else json.dumps(body).encode(),
            method=method,
            headers={
                "Authorization": "Bearer " + self.api_key,
                "Content-Type": "application/json",
                "Accept": "application/json",
            },
        )
        try:
            return urllib.request.urlopen(request, timeout=self.timeout)
        except urllib.error.HTTPError as error:
            raise APIStatusError(
                "Error code: %d - %s" % (error.code, error.read().decode(errors="replace"))
            ) from None


class _Models:
    def __init__(self, client):
        self._client = client

    def list(self):
        with self._client._open("GET", "/models") as answer:
            return _wrap(json.load(answer)["data"])


class _Chat:
    def __init__(self, client):
        self.completions = _Completions(client)


class _Completions:
    def __init__(self, client):
        self._client = client

    def create(self, model, messages, stream=False, **others):
        body = dict(others, model=model, messages=messages, stream=stream)
        answer = self._client._open("POST", "/chat/completions", body)
        if not stream:
            with answer:
                return _wrap(json.load(answer))
        return self._chunks(answer)

    @staticmethod
    def _chunks(answer):
        with answer:
            for raw in answer:
                line = raw.decode().strip()
                if not line.startswith("data:"):
                    continue
                data = line[len("data:"):].strip()
                if data == "[DONE]":
                    return
                value = json.loads(data)
                if "error" in value:
                    raise APIStatusError(json.dumps(value["error"]))
                yield _wrap(value)
