"""The labelling model: an OpenAI-compatible chat endpoint asked for every schema field.

    LabelClient(url, model, api_key, timeout, retries, cache_dir).ask(page, schema) -> answers
    label_project(project, client, limit=None, progress=None) -> LabelReport
    import_answers_jsonl(project, path) -> LabelReport
    apply_answers(project, page_id, answers, source) -> LabelFile

Only the standard library (http.client) talks to the endpoint; docs/security.md says what
is sent where. Redirects are never followed, the whole request has one deadline, replies are
capped in size, and the API key is read only from a DXSTUDIO_* environment variable and
sent only to an origin the person trusts (loopback, DXSTUDIO_LABEL_URL's, or one listed in
DXSTUDIO_LABEL_ORIGINS). Answers are {field: text or None};
each is cached on disk under PROJECT/.cache/labels/<page id>-<schema hash>.json, so asking
again costs nothing. After answers arrive, grounding runs and labels/<id>.json is saved; the
person's review (state, fixes, history) in that file is never overwritten by new answers.
"""
from __future__ import annotations

import email.utils
import hashlib
import http.client
import ipaddress
import itertools
import json
import os
import re
import socket
import ssl
import threading
import time
import urllib.parse
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from dxstudio import fsutil
from dxstudio.documents import page_marker
from dxstudio.engine.page import PageError, is_page_id
from dxstudio.fsutil import JSONInputError, MAX_SOURCE_BYTES, loads_json, read_json, read_regular_file, write_json_atomic
from dxstudio.grounding import ground_answers, ground_document, not_asked_fields
from dxstudio.project import Field, LabelError, LabelFile, Project, ProjectError, field_from

PROMPT_VERSION = 1
URL_ENV = "DXSTUDIO_LABEL_URL"
MODEL_ENV = "DXSTUDIO_LABEL_MODEL"
DEFAULT_KEY_ENV = "DXSTUDIO_LABEL_API_KEY"
ORIGINS_ENV = "DXSTUDIO_LABEL_ORIGINS"  # origins (scheme://host:port, comma-separated) trusted with the key
# The key may only come from a variable of this form: a shared project file cannot make the
# app send AWS_SECRET_ACCESS_KEY or any other secret of the person's environment.
KEY_ENV_PATTERN = re.compile(r"DXSTUDIO_[A-Z0-9_]{1,64}")
MAX_REPLY_BYTES = 4 * 1024 * 1024  # a reply holds a few short values; real ones are kB
MAX_RETRY_AFTER = 60.0  # seconds: a longer Retry-After is cut to this
MAX_ANSWER_CHARS = 10_000  # one field's value
STOP_AFTER_FAILURES = 3  # label and route stop asking after this many pages fail in a row
REDACTED = "[redacted]"
MIN_SECRET_IN_ANSWERS = 8  # a key this long or longer is also cut out of answer values

SYSTEM_PROMPT = (
    "You read fields from one document page. Answer with a single JSON object and nothing else. "
    "Copy every value exactly as it is printed on the page (same characters, same number format). "
    "Use null when the page does not show a field. Never compute, translate or reformat a value."
)


DOCUMENT_SYSTEM_PROMPT = (
    "You read fields from one document of several pages. Answer with a single JSON object and nothing else. "
    "Copy every value exactly as it is printed in the document (same characters, same number format), from "
    "whichever page shows it. Use null when no page shows a field. Never compute, translate or reformat a value."
)
# A document's prompt holds at most this many characters of page text (about 12k tokens, inside the
# context of the small models people run locally); a longer document is asked in parts of whole pages.
MAX_DOCUMENT_PROMPT_CHARS = 48_000


class LabellingError(RuntimeError):
    """The labelling model could not give an answer; str() says where and why."""


class _Retryable(Exception):
    """A failure worth another try (timeout, 429, 5xx, malformed answer)."""

    def __init__(self, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after


# ---------------------------------------------------------------------------------------
# Prompt and parsing

def _fields(schema) -> list[Field]:
    return [field_from(f) for f in schema]


def schema_hash(schema, model: str = "") -> str:
    """Changes whenever the question changes: field names, descriptions, model, prompt."""
    spec = {"fields": [[f.name, f.description] for f in _fields(schema)], "model": model,
            "prompt": PROMPT_VERSION, "system": SYSTEM_PROMPT}
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def document_schema_hash(schema, model: str = "") -> str:
    """schema_hash for the document question (its own system prompt)."""
    spec = {"fields": [[f.name, f.description] for f in _fields(schema)], "model": model,
            "prompt": PROMPT_VERSION, "system": DOCUMENT_SYSTEM_PROMPT, "document": True}
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def page_hash(page) -> str:
    return hashlib.sha256(json.dumps(page.to_dict(), sort_keys=True).encode()).hexdigest()[:16]


def page_text(page) -> str:
    """The page's words as lines of text: a new line starts when a word's vertical centre is
    outside the previous word's extent or the word starts left of the previous one."""
    lines, cur, prev = [], [], None
    for w in page.words:
        x0, y0, x1, y1 = w.box
        if prev is not None:
            px0, py0, px1, py1 = prev
            cy = (y0 + y1) / 2
            if not (py0 <= cy <= py1) or x0 < px0:
                lines.append(" ".join(cur))
                cur = []
        cur.append(w.text)
        prev = w.box
    if cur:
        lines.append(" ".join(cur))
    return "\n".join(lines)


def _question(schema, source: str, heading: str, text: str, system: str) -> list[dict]:
    """The messages asking for the schema's fields of `text` (a page's or a document's)."""
    fields = _fields(schema)
    listing = "\n".join(f"- {f.name}: {f.description or f.name}" for f in fields)
    keys = ", ".join(json.dumps(f.name) for f in fields)
    user = (f"Fields:\n{listing}\n\n"
            f"Return one JSON object with exactly these keys: {keys}. Each value is a string copied "
            f"from the {source}, or null.\n\n{heading}:\n{text}")
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def build_messages(page, schema) -> list[dict]:
    return _question(schema, "page", "Page text", page_text(page), SYSTEM_PROMPT)


def document_text(pages) -> str:
    """A document's pages as one text: each page's text (page_text) after a marker line
    "=== Page N of M ===" (N the page's number in the document, M the last page's)."""
    last = max(p.number for p in pages)
    return "\n".join(f"{page_marker(p.number, last)}\n{page_text(p)}" for p in pages)


def build_document_messages(pages, schema) -> list[dict]:
    """The question for a document: the page prompt's, with every page's text behind a page marker."""
    return _question(schema, "document", f"Document text ({len(pages)} pages)", document_text(pages),
                     DOCUMENT_SYSTEM_PROMPT)


def document_parts(pages, max_chars: int = MAX_DOCUMENT_PROMPT_CHARS) -> list[list]:
    """The pages split into consecutive parts whose text fits in max_chars (a page longer than
    that is a part of its own: it is asked as it is, as a single page always was)."""
    parts, cur, size = [], [], 0
    for p in pages:
        n = len(page_text(p)) + 32
        if cur and size + n > max_chars:
            parts.append(cur)
            cur, size = [], 0
        cur.append(p)
        size += n
    if cur:
        parts.append(cur)
    return parts


def document_hash(pages) -> str:
    return hashlib.sha256(json.dumps([p.to_dict() for p in pages], sort_keys=True).encode()).hexdigest()[:16]


class _StrictDecoder(json.JSONDecoder):
    def __init__(self):
        super().__init__(parse_int=fsutil._parse_int, parse_float=fsutil._parse_float,
                         parse_constant=fsutil._parse_constant)


_DECODER = _StrictDecoder()


def _json_objects(text: str):
    i = text.find("{")
    tries = 0
    while i != -1 and tries < 64:  # a reply of many '{' must not take quadratic time
        tries += 1
        try:
            obj, _ = _DECODER.raw_decode(text, i)
            obj = loads_json(json.dumps(obj))  # the same limits as every other JSON read
            if isinstance(obj, dict):
                yield obj
        except (ValueError, RecursionError):
            pass
        i = text.find("{", i + 1)


def parse_answers(content: str, field_names) -> dict:
    """{field: text or None} from a model's reply: plain JSON, JSON in a code fence, or JSON
    with words around it. The first object naming a schema field wins. Keys the schema lacks
    are dropped; a field left out is null; numbers become text. Raises ValueError when no
    usable object is found."""
    if not isinstance(content, str):
        raise ValueError("the reply has no text content")
    names = list(field_names)
    text = content.strip()
    if text.startswith("```"):
        text = text.split("\n", 1)[1] if "\n" in text else ""
        text = text.rsplit("```", 1)[0]
    candidates = []
    try:
        obj = loads_json(text)
        if isinstance(obj, dict):
            candidates.append(obj)
    except JSONInputError:
        pass
    candidates = itertools.chain(candidates, _json_objects(content))
    for obj in candidates:
        if not any(n in obj for n in names):
            continue
        out = {}
        for n in names:
            v = obj.get(n)
            if isinstance(v, bool) or isinstance(v, (list, dict)):
                raise ValueError(f"the value of {n!r} is {type(v).__name__}, not text or null")
            if isinstance(v, (int, float)):
                v = str(v)
            if isinstance(v, str) and len(v) > MAX_ANSWER_CHARS:
                raise ValueError(f"the value of {n!r} is {len(v)} characters long (at most {MAX_ANSWER_CHARS})")
            if isinstance(v, str) and v.strip().lower() in ("", "null", "none", "n/a"):
                v = None
            out[n] = v
        return out
    raise ValueError(f"no JSON object with the schema's fields in the reply ({content[:80]!r})")


# ---------------------------------------------------------------------------------------
# The client

class LabelClient:
    def __init__(self, url: str, model: str, api_key: str | None = None, timeout: float = 60.0,
                 retries: int = 3, cache_dir=None, backoff: float = 1.0, max_backoff: float = 30.0,
                 json_mode: bool = True, max_reply_bytes: int = MAX_REPLY_BYTES,
                 max_retry_after: float = MAX_RETRY_AFTER):
        if not url:
            raise LabellingError(f"no labelling URL: set labelling.url in dxproject.json or {URL_ENV}")
        if not model:
            raise LabellingError(f"no labelling model name: set labelling.model in dxproject.json or {MODEL_ENV}")
        url = url.rstrip("/")
        self.endpoint = url if url.endswith("/chat/completions") else url + "/chat/completions"
        parts = urllib.parse.urlsplit(self.endpoint)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise LabellingError(f"labelling URL {url!r}: expected http://HOST/... or https://HOST/...")
        if parts.username or parts.password:
            raise LabellingError(f"labelling URL {_redact(url)!r}: no user name or password in the URL; "
                                 f"put the key in a {KEY_ENV_PATTERN.pattern.split('[')[0]}* variable")
        self._parts = parts
        self.origin = origin_of(self.endpoint)
        self.model = model
        self.api_key = api_key
        self.timeout = float(timeout)
        self.retries = int(retries)
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        self.json_mode = json_mode
        self.max_reply_bytes = int(max_reply_bytes)
        self.max_retry_after = float(max_retry_after)
        self.requests = 0  # HTTP requests made (for tests and reports)
        self.sleep = time.sleep
        if api_key is not None and (not isinstance(api_key, str) or any(ord(c) < 32 or ord(c) == 127 for c in api_key)):
            raise LabellingError("the API key holds a line break or another control character; "
                                 "it cannot be sent in a header (check the variable that holds it)")

    def secrets(self) -> list[str]:
        """What is never shown or stored, whatever the server sends back: the key (and the
        password of a proxy URL in the environment)."""
        out = [self.api_key] if self.api_key else []
        for proxy in urllib.request.getproxies().values():
            try:
                pw = urllib.parse.urlsplit(proxy if "://" in proxy else "http://" + proxy).password
            except ValueError:
                pw = None
            if pw:
                out.append(pw)
        return out

    def redact(self, text: str, min_len: int = 1) -> str:
        """`text` with every secret (secrets()) replaced by [redacted]; longest first."""
        for secret in sorted(self.secrets(), key=len, reverse=True):
            if len(secret) >= min_len and secret in text:
                text = text.replace(secret, REDACTED)
        return text

    @classmethod
    def from_project(cls, project: Project, env=None, **kw) -> "LabelClient":
        """URL, model and the key's environment variable from dxproject.json 'labelling', each
        falling back to the environment (DXSTUDIO_LABEL_URL, _MODEL, _API_KEY).

        The key's variable must be named DXSTUDIO_*; and when a key is sent, the URL's origin
        must be trusted: a loopback address, the origin of DXSTUDIO_LABEL_URL, or one listed in
        DXSTUDIO_LABEL_ORIGINS. A project file shared by someone else can name neither another
        secret nor another server for the key (docs/security.md)."""
        env = os.environ if env is None else env
        cfg = project.labelling
        key_env = cfg.get("api_key_env") or DEFAULT_KEY_ENV
        if not KEY_ENV_PATTERN.fullmatch(key_env):
            raise LabellingError(
                f"{project.project_file}: labelling 'api_key_env' is {key_env!r}; the key is only read from a "
                f"variable named DXSTUDIO_... (letters, digits, '_'), such as {DEFAULT_KEY_ENV}")
        client = cls(cfg.get("url") or env.get(URL_ENV), cfg.get("model") or env.get(MODEL_ENV),
                     env.get(key_env) or None, cache_dir=project.labels_cache_dir, **kw)
        if client.api_key and not key_allowed_for(client.origin, env):
            raise LabellingError(
                f"{project.project_file}: the labelling URL's origin {client.origin} is not trusted with the key in "
                f"{key_env}: add it to {ORIGINS_ENV} (comma-separated origins) or set {URL_ENV} to this URL")
        return client

    def cache_path(self, page, schema) -> Path | None:
        if self.cache_dir is None:
            return None
        # a page id is a safe file name (page_from_dict); a Page made in code with another id
        # is cached under a hash of it, never under a path it names
        name = page.id if is_page_id(page.id) else "id-" + hashlib.sha256(str(page.id).encode("utf-8", "replace")).hexdigest()[:32]
        return self.cache_dir / f"{name}-{schema_hash(schema, self.model)}.json"

    def cached(self, page, schema) -> dict | None:
        path = self.cache_path(page, schema)
        return _cached_answers(path, "page_sha", lambda: page_hash(page), schema)

    def ask(self, page, schema) -> dict:
        """Answers for every schema field, from the cache or the endpoint."""
        hit = self.cached(page, schema)
        if hit is not None:
            return hit
        answers = self.request(page, schema)
        path = self.cache_path(page, schema)
        if path is not None:
            write_json_atomic(path, {"page": page.id, "page_sha": page_hash(page), "model": self.model,
                                     "answers": answers})
        return answers

    def request(self, page, schema) -> dict:
        return self._request(build_messages(page, schema), schema, f"page {page.id}")

    # -- documents -----------------------------------------------------------------------
    def document_cache_path(self, pages, schema) -> Path | None:
        if self.cache_dir is None:
            return None
        return self.cache_dir / f"{pages[0].document_id}.document-{document_schema_hash(schema, self.model)}.json"

    def cached_document(self, pages, schema) -> dict | None:
        """A cached answer for the whole document (all its pages as they are now), or None."""
        pages = list(pages)
        if len(pages) == 1:
            return self.cached(pages[0], schema)
        path = self.document_cache_path(pages, schema)
        return _cached_answers(path, "document_sha", lambda: document_hash(pages), schema)

    def ask_document(self, pages, schema, max_chars: int = MAX_DOCUMENT_PROMPT_CHARS) -> dict:
        """Answers for a document, asked once with every page's text behind page markers
        (build_document_messages). A document of one page is asked as a page (the same prompt
        and cache as before documents). A document whose text passes max_chars is asked in
        parts of whole pages (document_parts), in order; each field takes the first part's value
        that is not null."""
        pages = list(pages)
        if len(pages) == 1:
            return self.ask(pages[0], schema)
        hit = self.cached_document(pages, schema)
        if hit is not None:
            return hit
        names = [f.name for f in _fields(schema)]
        answers = {n: None for n in names}
        doc = pages[0].document_id
        for part in document_parts(pages, max_chars):
            what = f"document {doc}" + (f" pages {part[0].number}-{part[-1].number}" if len(part) < len(pages) else "")
            got = self._request(build_document_messages(part, schema), schema, what)
            for n in names:
                if answers[n] is None and got.get(n) is not None:
                    answers[n] = got[n]
        path = self.document_cache_path(pages, schema)
        if path is not None:
            write_json_atomic(path, {"document": doc, "pages": [p.id for p in pages],
                                     "document_sha": document_hash(pages), "model": self.model, "answers": answers})
        return answers

    def _request(self, messages, schema, what: str) -> dict:
        names = [f.name for f in _fields(schema)]
        body = {"model": self.model, "messages": messages, "temperature": 0}
        if self.json_mode:
            body["response_format"] = {"type": "json_object"}
        data = json.dumps(body).encode("utf-8")
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        last = "no attempt"
        tries = self.retries + 1
        wait = None
        for attempt in range(tries):
            if attempt:
                backoff = min(self.max_backoff, self.backoff * 2 ** (attempt - 1))
                self.sleep(backoff if wait is None else min(self.max_retry_after, max(wait, backoff)))
            try:
                answers = self._once(data, headers, names)
            except _Retryable as e:
                last, wait = str(e), e.retry_after
            except LabellingError as e:
                raise LabellingError(self.redact(str(e))) from None
            else:  # an answer that echoes the key is stored without it
                return {k: (self.redact(v, MIN_SECRET_IN_ANSWERS) if isinstance(v, str) else v)
                        for k, v in answers.items()}
        raise LabellingError(self.redact(f"labelling model at {self.endpoint}: {what}: {last} "
                                         f"(gave up after {tries} tries)"))

    def _proxy(self):
        """(host, port) of the proxy the environment names for this URL (HTTPS_PROXY,
        HTTP_PROXY, NO_PROXY, as urllib reads them), or None."""
        p = self._parts
        proxy = urllib.request.getproxies().get(p.scheme)
        if not proxy or urllib.request.proxy_bypass(p.hostname):
            return None
        q = urllib.parse.urlsplit(proxy if "://" in proxy else "http://" + proxy)
        if q.scheme != "http" or not q.hostname:
            return None  # only plain http proxies (CONNECT for https endpoints)
        return q.hostname, q.port or 80

    def _connection(self, timeout: float):
        """(connection, request target). Through a proxy: a CONNECT tunnel for https (the
        proxy sees only the host name), an absolute URL for http."""
        p = self._parts
        target = p.path + (f"?{p.query}" if p.query else "")
        proxy = self._proxy()
        if p.scheme == "https":
            if proxy is None:
                return http.client.HTTPSConnection(p.hostname, p.port, timeout=timeout,
                                                   context=ssl.create_default_context()), target
            conn = http.client.HTTPSConnection(*proxy, timeout=timeout, context=ssl.create_default_context())
            conn.set_tunnel(p.hostname, p.port)
            return conn, target
        if proxy is None:
            return http.client.HTTPConnection(p.hostname, p.port, timeout=timeout), target
        return http.client.HTTPConnection(*proxy, timeout=timeout), urllib.parse.urlunsplit(
            (p.scheme, p.netloc, p.path, p.query, ""))

    def _once(self, data: bytes, headers: dict, names) -> dict:
        """One POST under one deadline (self.timeout for the whole request: connecting, the
        headers and the body). No redirect is followed; the reply is capped in size."""
        self.requests += 1
        deadline = time.monotonic() + self.timeout
        conn, target = self._connection(self.timeout)
        watchdog = None
        expired = threading.Event()
        try:
            try:
                def _stop():  # wakes a read that a trickling server keeps alive (TLS handshake too)
                    expired.set()
                    sock = conn.sock
                    if sock is not None:
                        try:
                            socket.socket.shutdown(sock, socket.SHUT_RDWR)
                        except (OSError, TypeError):
                            pass

                watchdog = threading.Timer(self.timeout, _stop)
                watchdog.daemon = True
                watchdog.start()
                conn.connect()
                remaining = deadline - time.monotonic()
                if remaining <= 0 or expired.is_set():
                    raise socket.timeout()
                conn.sock.settimeout(remaining)
                conn.request("POST", target, body=data, headers=headers)
                resp = conn.getresponse()
                status = resp.status
                if 300 <= status < 400:
                    where = self.redact(resp.getheader("Location") or "no Location")
                    raise LabellingError(
                        f"labelling model at {self.endpoint}: HTTP {status}, a redirect to {where[:200]!r}; "
                        f"redirects are not followed (the key stays with the endpoint): set labelling.url "
                        f"to the address that answers")
                raw = self._read_body(resp, deadline, expired)
            except (socket.timeout, TimeoutError):
                raise _Retryable(f"no complete answer within {self.timeout:g} s") from None
            except (http.client.HTTPException, OSError) as e:
                if expired.is_set() or time.monotonic() >= deadline:
                    raise _Retryable(f"no complete answer within {self.timeout:g} s") from None
                if isinstance(e, ConnectionRefusedError) or (isinstance(e, OSError) and conn.sock is None):
                    raise _Retryable(f"cannot connect ({e.strerror or e})") from None
                raise _Retryable(_http_problem(e)) from None
        finally:
            if watchdog is not None:
                watchdog.cancel()
            conn.close()
        if status == 429 or status >= 500:
            detail = self._excerpt(raw, 200)
            raise _Retryable(f"HTTP {status} {detail}", _retry_after(resp.getheader("Retry-After")))
        if not 200 <= status < 300:
            detail = self._excerpt(raw, 200)
            raise LabellingError(f"labelling model at {self.endpoint}: HTTP {status} {detail}")
        try:
            reply = loads_json(raw)
            content = reply["choices"][0]["message"]["content"]
        except (JSONInputError, KeyError, IndexError, TypeError):
            raise _Retryable(f"malformed response ({self._excerpt(raw, 80)!r})") from None
        try:
            return parse_answers(content, names)
        except ValueError:
            pass
        try:  # the message quotes the reply: quote it with the secrets cut out first
            parse_answers(self.redact(content), names)
        except ValueError as e:
            raise _Retryable(f"malformed answer: {e}") from None
        raise _Retryable("malformed answer")

    def _excerpt(self, raw: bytes, n: int) -> str:
        """The first n characters of a reply body, the secrets cut out first (a key the server
        echoes is never shown, not even the part of it before the cut)."""
        return self.redact(raw.decode("utf-8", "replace")).strip()[:n]

    def _read_body(self, resp, deadline: float, expired: threading.Event) -> bytes:
        length = (resp.getheader("Content-Length") or "").strip()
        if length.isdigit() and (len(length) > 15 or int(length) > self.max_reply_bytes):
            raise _Retryable(f"the reply is {length[:20]} bytes, more than the {self.max_reply_bytes} allowed")
        chunks, total = [], 0
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or expired.is_set():
                raise socket.timeout()
            if resp.fp is not None and getattr(resp.fp, "raw", None) is not None:
                try:
                    resp.fp.raw._sock.settimeout(remaining)
                except (AttributeError, OSError):
                    pass
            chunk = resp.read1(65536) if hasattr(resp, "read1") else resp.read(65536)
            if not chunk:
                break
            total += len(chunk)
            if total > self.max_reply_bytes:
                raise _Retryable(f"the reply is more than the {self.max_reply_bytes} bytes allowed")
            chunks.append(chunk)
        if expired.is_set():  # the watchdog cut the connection: what came is not the whole reply
            raise socket.timeout()
        if resp.length:  # Content-Length promised more than came
            raise _Retryable(f"the reply was cut short ({total} of {total + resp.length} bytes came)")
        return b"".join(chunks)


def origin_of(url: str) -> str:
    """scheme://host:port of a URL, the port always written out."""
    p = urllib.parse.urlsplit(url)
    port = p.port or (443 if p.scheme == "https" else 80)
    host = p.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    return f"{p.scheme}://{host}:{port}"


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def key_allowed_for(origin: str, env) -> bool:
    """Whether the key may be sent to `origin`: a loopback address, the origin of
    DXSTUDIO_LABEL_URL, or one of DXSTUDIO_LABEL_ORIGINS."""
    host = urllib.parse.urlsplit(origin).hostname or ""
    if _is_loopback(host):
        return True
    trusted = set()
    if env.get(URL_ENV):
        trusted.add(origin_of(env[URL_ENV]))
    for item in (env.get(ORIGINS_ENV) or "").split(","):
        if item.strip():
            try:
                trusted.add(origin_of(item.strip()))
            except ValueError:
                continue
    return origin in trusted


def _redact(url: str) -> str:
    p = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit((p.scheme, p.hostname or "", p.path, "", ""))


def _http_problem(e: Exception) -> str:
    if isinstance(e, http.client.IncompleteRead):
        return f"the reply was cut short ({len(e.partial)} bytes came)"
    if isinstance(e, http.client.RemoteDisconnected):
        return "the server closed the connection without an answer"
    if isinstance(e, http.client.LineTooLong):
        return "the server sent a header line that is too long"
    if isinstance(e, http.client.BadStatusLine):
        return f"the server sent a bad status line ({str(e)[:60]!r})"
    if isinstance(e, http.client.HTTPException):
        return f"the server sent a malformed reply ({' '.join(str(e).split())[:80] or type(e).__name__})"
    return f"connection failed ({e.strerror or e})" if isinstance(e, OSError) else str(e)


def _retry_after(value) -> float | None:
    """Seconds from a Retry-After header (a number of seconds or an HTTP date), else None."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(min(int(value[:12]), 10**9))
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when is None:
        return None
    try:
        return max(0.0, when.timestamp() - time.time())
    except (OverflowError, OSError, ValueError):
        return None


# ---------------------------------------------------------------------------------------
# Saving answers as labels


def _cached_answers(path, key: str, digest_of, schema) -> dict | None:
    """The answers a cache file at path holds for the schema, if its `key` (the page's or the
    document's hash) is digest_of() (computed only when the file exists); else None: the input changed since (ask again), or the entry is
    missing, damaged or for other fields (a damaged cache entry is only a miss)."""
    if path is None or not path.is_file():
        return None
    try:
        d = read_json(path)
        if d.get(key) != digest_of():
            return None
        answers = d["answers"]
        names = [f.name for f in _fields(schema)]
        if not isinstance(answers, dict) or set(answers) != set(names):
            return None
        check_answers(answers, names, str(path))
        return answers
    except (ValueError, KeyError, TypeError, AttributeError):
        return None

def check_answers(answers, field_names, source: str) -> dict:
    """Validate {field: text or None}; a field the schema lacks is an error."""
    if not isinstance(answers, dict):
        raise LabelError(f"{source}: 'answers' must be an object {{field: text or null}}")
    unknown = [k for k in answers if k not in field_names]
    if unknown:
        raise LabelError(f"{source}: field {unknown[0]!r} is not in the schema ({', '.join(field_names) or 'empty'})")
    out = {}
    for k, v in answers.items():
        if isinstance(v, bool) or not (v is None or isinstance(v, (str, int, float))):
            raise LabelError(f"{source}: the answer for {k!r} must be text or null, not {str(v)[:60]!r}")
        if isinstance(v, float) and v != v or v in (float("inf"), float("-inf")):
            raise LabelError(f"{source}: the answer for {k!r} is not a finite number")
        try:
            v = v if v is None or isinstance(v, str) else str(v)
        except ValueError:  # an integer too long to write out
            raise LabelError(f"{source}: the answer for {k!r} is a number too long to be a value") from None
        if isinstance(v, str):
            if len(v) > MAX_ANSWER_CHARS:
                raise LabelError(f"{source}: the answer for {k!r} is {len(v)} characters long "
                                 f"(at most {MAX_ANSWER_CHARS})")
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                raise LabelError(f"{source}: the answer for {k!r} holds a lone surrogate (not valid Unicode)") from None
        out[k] = v
    return out


def apply_answers(project: Project, page_id: str, answers: dict, source: str, page=None,
                  only=None) -> LabelFile:
    """Store new answers for a page, ground them and save labels/<id>.json. The review (state,
    fixes, history) already in the file is kept. A label file that does not load is left
    untouched and LabelError is raised.

    only: the fields asked for (those the page was not asked about yet, see
    dxstudio.grounding.not_asked_fields); every other field keeps its answer and grounding,
    so adding a field never changes labels already there. A page a person had accepted goes
    back to unreviewed (noted in its review history): its new values were never seen."""
    names = project.field_names
    answers = check_answers(answers, names, f"answers for page {page_id!r}")
    page = page if page is not None else project.load_page(page_id)
    labels = project.load_labels(page_id)
    if only is None or labels.answers is None:
        labels.answers = {n: answers.get(n) for n in names}
        labels.grounding = ground_answers(page, answers, names)
    else:
        only = [n for n in names if n in set(only)]
        merged = {n: (answers.get(n) if n in only else labels.answers.get(n)) for n in names}
        grounded = ground_answers(page, merged, names)
        labels.answers = {**labels.answers, **{n: answers.get(n) for n in only}}
        labels.grounding = {**labels.grounding, **{n: grounded[n] for n in only}}
        _reopen_for_new_fields(labels, only)
    labels.answer_source = source
    project.save_labels(page_id, labels)
    return labels


def _reopen_for_new_fields(labels, only) -> None:
    """An accepted page whose fields `only` were just asked goes back to unreviewed (its new
    answers have not been looked at), with the step in its review history."""
    if labels.state == "accepted" and only:
        labels.review["state"] = "unreviewed"
        labels.review.setdefault("history", []).append(
            {"op": "new fields asked", "fields": list(only), "before": {"state": "accepted"},
             "after": {"state": "unreviewed"}, "at": time.strftime("%Y-%m-%dT%H:%M:%S")})


def apply_document_answers(project: Project, pages, answers: dict, source: str, only=None) -> list:
    """Store one document's answers on each of its pages (labels/<page id>.json, with
    "document": its id) grounded across the pages (grounding.ground_document: each value is
    tagged on the page where it is printed; the other pages say which page holds it). The
    review of every page is kept, as apply_answers keeps it. `only`: the fields asked (the
    others keep their answers and grounding). A document of one page is apply_answers.
    Returns the label files saved, in page order."""
    pages = list(pages)
    if len(pages) == 1:
        return [apply_answers(project, pages[0].id, answers, source, page=pages[0], only=only)]
    names = project.field_names
    doc = pages[0].document_id
    answers = check_answers(answers, names, f"answers for document {doc!r}")
    labels = [project.load_labels(p.id) for p in pages]  # every file first: one that does not load stops all
    fresh = only is None or any(lf.answers is None for lf in labels)
    if fresh:
        merged = {n: answers.get(n) for n in names}
    else:
        only = [n for n in names if n in set(only)]
        merged = {n: (answers.get(n) if n in only else labels[0].answers.get(n)) for n in names}
    grounded = ground_document(pages, merged, names, doc)
    for page, lf in zip(pages, labels):
        g = grounded[page.id]
        if fresh:
            lf.answers = dict(merged)
            lf.grounding = g
        else:
            lf.answers = {**lf.answers, **{n: answers.get(n) for n in only}}
            lf.grounding = {**lf.grounding, **{n: g[n] for n in only}}
            _reopen_for_new_fields(lf, only)
        lf.answer_source = source
        lf.extra["document"] = doc
        project.save_labels(page.id, lf)
    return labels


@dataclass
class LabelReport:
    labelled: list = field(default_factory=list)  # page ids that got answers
    cached: int = 0  # of which from the cache
    skipped: int = 0  # already labelled for this schema
    errors: list = field(default_factory=list)  # [(page id or file:line, message)]
    grounding: Counter = field(default_factory=Counter)  # status -> count over fields
    stopped: str | None = None  # why the run stopped early
    documents: list = field(default_factory=list)  # document ids asked (or given) as one document

    def to_dict(self) -> dict:
        return {"labelled": len(self.labelled), "documents": len(self.documents), "cached": self.cached,
                "skipped": self.skipped,
                "errors": [{"where": w, "error": m} for w, m in self.errors],
                "grounding": dict(sorted(self.grounding.items())), "stopped": self.stopped}


def needs_labels(labels: LabelFile, field_names) -> bool:
    """Never labelled, or a field of the schema was never asked (and not set by a person)."""
    return labels.answers is None or bool(not_asked_fields(labels, field_names))


def label_project(project: Project, client: LabelClient, limit: int | None = None, progress=None,
                  force: bool = False, stop_after_failures: int = STOP_AFTER_FAILURES) -> LabelReport:
    """Ask the labelling model for every document that has a page without answers for the
    current schema (every document with force): once per document, with all its pages' text
    (LabelClient.ask_document; a page of its own is asked as before). limit caps the documents
    asked. After `stop_after_failures` documents fail in a row (the endpoint is down), the run
    stops and says so. `labelled` lists page ids, `documents` the documents asked."""
    report = LabelReport()
    if not project.schema:
        raise ProjectError(f"{project.project_file}: the schema has no fields to ask for")
    docs = project.documents()
    for where, message in docs.problems:
        report.errors.append((where, message))
    todo = []
    for doc in docs.documents:
        try:
            labels = [project.load_labels(pid) for pid in doc.pages]
        except LabelError as e:
            report.errors.append((doc.id, str(e)))
            continue
        if force or any(needs_labels(lf, project.field_names) for lf in labels):
            todo.append(doc)
        else:
            report.skipped += len(doc.pages)
    if limit is not None:
        todo = todo[:max(0, limit)]
    failures = 0
    for k, doc in enumerate(todo):
        if progress is not None:
            progress(k, len(todo))
        try:
            pages = [project.load_page(pid) for pid in doc.pages]
            labels = [project.load_labels(pid) for pid in doc.pages]
            missing = None
            if not force:
                missing = sorted({n for lf in labels for n in not_asked_fields(lf, project.field_names)},
                                 key=project.field_names.index) or None
                if any(lf.answers is None for lf in labels):
                    missing = None
            schema = [f for f in project.schema if f.name in missing] if missing else project.schema
            from_cache = client.cached_document(pages, schema) is not None
            answers = client.ask_document(pages, schema)
            saved = apply_document_answers(project, pages, answers, "llm", only=missing)
        except (PageError, LabelError) as e:
            report.errors.append((doc.id, str(e)))
            continue
        except LabellingError as e:
            report.errors.append((doc.id, str(e)))
            failures += 1
            if failures >= stop_after_failures:
                report.stopped = f"stopped after {failures} {'pages' if len(doc) == 1 else 'documents'} failed in a row: {e}"
                break
            continue
        failures = 0
        report.labelled += list(doc.pages)
        report.documents.append(doc.id)
        report.cached += from_cache
        for lf in saved:
            report.grounding.update(g["status"] for g in lf.grounding.values())
    if progress is not None:
        progress(len(todo), len(todo))
    return report


def import_answers_jsonl(project: Project, path, source: str = "import") -> LabelReport:
    """Answers from a JSONL file, one {"id": page id or document id, "answers": {field: text or
    null}} per line. A document id gives the answers of the whole document, grounded across its
    pages (apply_document_answers); a page id gives that page's own answers, as before. A bad
    line (not JSON, unknown page or document, a field the schema lacks) is reported with its
    line number and the other lines are imported."""
    path = Path(path)
    report = LabelReport()
    try:
        lines = read_regular_file(path, MAX_SOURCE_BYTES, LabelError).decode("utf-8-sig").splitlines()
    except UnicodeDecodeError as e:
        raise LabelError(f"{path}: not UTF-8 text (byte {e.start})") from None
    docs = None  # read on the first id that is not a page of its own
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            d = loads_json(line)
        except JSONInputError as e:
            report.errors.append((where, f"{where}: {e}"))
            continue
        if not isinstance(d, dict) or not isinstance(d.get("id"), str) or "answers" not in d:
            report.errors.append((where, f"{where}: expected {{\"id\": page id, \"answers\": {{...}}}}"))
            continue
        pid = d["id"]
        try:
            if project.has_page(pid):
                saved = [apply_answers(project, pid, d["answers"], source)]
                ids = [pid]
            else:
                if docs is None:
                    docs = project.documents()
                doc = docs.get(pid)
                if doc is None:
                    why = [m for i, m in docs.problems if i == pid]
                    raise LabelError(f"{where}: {why[0]}" if why else f"{where}: no page {pid!r} (nor a document of that id) in the project")
                pages = [project.load_page(i) for i in doc.pages]
                saved = apply_document_answers(project, pages, d["answers"], source)
                ids = list(doc.pages)
                report.documents.append(pid)
        except (LabelError, PageError, ProjectError) as e:
            msg = str(e)
            report.errors.append((where, msg if msg.startswith(str(path)) else f"{where}: {msg}"))
            continue
        report.labelled += ids
        for labels in saved:
            report.grounding.update(g["status"] for g in labels.grounding.values())
    return report
