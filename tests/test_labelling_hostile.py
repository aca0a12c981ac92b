"""The labelling client against a hostile or broken endpoint (issue 9, items 1 to 3 and the
labelling reply of item 4). Every server here is a thread on 127.0.0.1, started and stopped
by the test, and stops by itself within a few seconds."""
from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

import pytest

from dxstudio.engine.page import Page, load_page
from dxstudio.labelling import LabelClient, LabellingError, label_project
from dxstudio.project import Field, Project

FIXTURES = Path(__file__).parent / "fixtures"
SCHEMA = [Field("vendor"), Field("total")]
GOOD = {"vendor": "Globex Corporation", "total": "1,440.00"}


def reply_bytes(answers=GOOD, content=None) -> bytes:
    content = json.dumps(answers) if content is None else content
    return json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}).encode()


def http_reply(body: bytes, status="200 OK", headers=()) -> bytes:
    head = [f"HTTP/1.1 {status}", "Content-Type: application/json", f"Content-Length: {len(body)}",
            "Connection: close", *headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


class RawServer:
    """A TCP server on 127.0.0.1 that reads one HTTP request per connection and then runs the
    next step of its script: step(conn) writes whatever it likes. After the script: `default`.
    Every step is bounded in time; close() stops the server."""

    def __init__(self, script=(), default=None, read_request=True):
        self.read_request = read_request
        self.script = list(script)
        self.default = default or (lambda conn: conn.sendall(http_reply(reply_bytes())))
        self.requests = []
        self.stop = threading.Event()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.05)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.origin = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (socket.timeout, OSError):
                continue
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn):
        conn.settimeout(5)
        try:
            if not self.read_request:  # speak first (a TLS server, say)
                self.requests.append({"line": None})
                (self.script.pop(0) if self.script else self.default)(conn)
                return
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, body = data.split(b"\r\n\r\n", 1)
            lines = head.decode("latin-1").split("\r\n")
            headers = {k.strip().lower(): v.strip() for k, v in (l.split(":", 1) for l in lines[1:] if ":" in l)}
            n = int(headers.get("content-length", 0))
            while len(body) < n:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                body += chunk
            self.requests.append({"line": lines[0], "headers": headers, "body": body})
            step = self.script.pop(0) if self.script else self.default
            step(conn)
        except OSError:
            pass
        finally:
            try:
                conn.close()
            except OSError:
                pass

    def close(self):
        self.stop.set()
        self.thread.join(2)
        self.sock.close()


@pytest.fixture
def server():
    servers = []

    def start(script=(), default=None, read_request=True):
        s = RawServer(script, default, read_request)
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.close()


@pytest.fixture
def project(tmp_path):
    p = Project.create(tmp_path / "proj", "invoices", SCHEMA)
    page = load_page(FIXTURES / "pages" / "invoice-1.json")
    p.add_page(page)
    return p


def client_for(srv, tmp_path, **kw):
    kw.setdefault("timeout", 2.0)
    kw.setdefault("retries", 2)
    kw.setdefault("backoff", 0.01)
    c = LabelClient(srv.url, "m", "sk-secret", cache_dir=tmp_path / "cache", **kw)
    c.waits = []
    c.sleep = c.waits.append
    return c


def page1(project):
    return project.load_page("invoice-1")


def send(data: bytes):
    return lambda conn: conn.sendall(data)


def trickle(prefix: bytes, every=0.2, seconds=8.0):
    """Send `prefix`, then one byte every `every` s for at most `seconds`, until the client
    hangs up. `step.ends`: for each connection, the bytes sent after the prefix when the
    client hung up (None: the trickle ran its course). A count of trickle steps is a clock
    that load can only slow, so `bytes_before_hang_up` bounds a deadline on a loaded machine."""
    ends = []

    def step(conn):
        conn.sendall(prefix)
        sent, t0 = 0, time.monotonic()
        while time.monotonic() - t0 < seconds:
            time.sleep(every)
            try:
                conn.sendall(b"x")
            except OSError:  # the client closed the connection: a send after that fails
                ends.append(sent)
                return
            sent += 1
        ends.append(None)

    step.ends = ends
    return step


def bytes_before_hang_up(step, connections: int) -> list:
    """step.ends once `connections` trickles have ended (the last one records a little after
    the client has moved on; bounded by the trickle's own length)."""
    t0 = time.monotonic()
    while len(step.ends) < connections and time.monotonic() - t0 < 30:
        time.sleep(0.05)
    return list(step.ends)


# -- 1. redirects --------------------------------------------------------------------------------

@pytest.mark.parametrize("status", ["302 Found", "307 Temporary Redirect", "301 Moved Permanently"])
def test_a_redirect_to_another_origin_is_not_followed_and_nothing_is_stored(server, project, tmp_path, status):
    other = server()  # another origin (another port) that would answer with labels
    evil = {"vendor": "EVIL", "total": "0"}
    other.default = lambda conn: conn.sendall(http_reply(reply_bytes(evil)))
    endpoint = server(default=send(http_reply(b"", status, [f"Location: {other.url}/steal"])))
    client = client_for(endpoint, tmp_path)
    report = label_project(project, client)
    assert report.labelled == [] and len(report.errors) == 1
    assert "redirect" in report.errors[0][1] and "not followed" in report.errors[0][1]
    time.sleep(0.1)
    assert other.requests == []  # the key never left for the other host
    assert not project.label_path("invoice-1").exists()
    assert not list((tmp_path / "cache").glob("*.json"))
    assert len(endpoint.requests) == 1  # a redirect is not retried


# -- 2. which variable holds the key, and where it may go ---------------------------------------------

def test_the_key_variable_must_be_a_dxstudio_name(project):
    project.labelling.update({"url": "http://127.0.0.1:9/v1", "model": "m", "api_key_env": "AWS_SECRET_ACCESS_KEY"})
    with pytest.raises(LabellingError, match="DXSTUDIO_") as e:
        LabelClient.from_project(project, env={"AWS_SECRET_ACCESS_KEY": "aws-secret"})
    assert "aws-secret" not in str(e.value)
    for name in ("PATH", "DXSTUDIO_", "dxstudio_key", "DXSTUDIO_KEY;X"):
        project.labelling["api_key_env"] = name
        with pytest.raises(LabellingError):
            LabelClient.from_project(project, env={name: "s"})


def test_the_key_goes_only_to_a_trusted_origin(project):
    project.labelling.update({"url": "https://labels.attacker.example/v1", "model": "m",
                              "api_key_env": "DXSTUDIO_LABEL_API_KEY"})
    env = {"DXSTUDIO_LABEL_API_KEY": "sk-mine"}
    with pytest.raises(LabellingError, match="not trusted") as e:
        LabelClient.from_project(project, env=env)
    assert "sk-mine" not in str(e.value) and "DXSTUDIO_LABEL_ORIGINS" in str(e.value)
    # without a key there is nothing to leak
    assert LabelClient.from_project(project, env={}).api_key is None
    # trusted by the person's environment: listed, or the origin of DXSTUDIO_LABEL_URL
    ok = dict(env, DXSTUDIO_LABEL_ORIGINS="https://other.example, https://labels.attacker.example")
    assert LabelClient.from_project(project, env=ok).api_key == "sk-mine"
    ok = dict(env, DXSTUDIO_LABEL_URL="https://labels.attacker.example:443/v1")
    assert LabelClient.from_project(project, env=ok).api_key == "sk-mine"
    # another port or scheme is another origin
    bad = dict(env, DXSTUDIO_LABEL_ORIGINS="http://labels.attacker.example")
    with pytest.raises(LabellingError):
        LabelClient.from_project(project, env=bad)
    # a loopback server is the person's own
    project.labelling["url"] = "http://127.0.0.1:8000/v1"
    assert LabelClient.from_project(project, env=env).api_key == "sk-mine"


def test_a_url_with_credentials_or_another_scheme_is_refused():
    with pytest.raises(LabellingError, match="no user name or password") as e:
        LabelClient("https://user:pw@host.example/v1", "m")
    assert "pw" not in str(e.value)
    with pytest.raises(LabellingError, match="http"):
        LabelClient("file:///etc/passwd", "m")


# -- 3. a whole-request deadline, broken replies, Retry-After, a size cap --------------------------------

def test_a_trickling_endpoint_hits_the_whole_request_deadline(server, project, tmp_path):
    slow = trickle(b"HTTP/1.1 200 OK\r\nX-Slow: ")
    srv = server(default=slow)
    client = client_for(srv, tmp_path, timeout=1.0, retries=1)
    with pytest.raises(LabellingError, match="within 1 s") as e:
        client.ask(page1(project), SCHEMA)
    assert "after 2 tries" in str(e.value)
    # each try hung up after about 5 of the trickle's 0.2 s steps (1 s), far before its 40 (8 s)
    ends = bytes_before_hang_up(slow, 2)
    assert len(ends) == 2 and all(n is not None and n <= 15 for n in ends), ends


def test_a_trickling_body_hits_the_deadline_too(server, project, tmp_path):
    body = reply_bytes()
    head = http_reply(body)[: -len(body)]
    slow = trickle(head + body[:5])
    srv = server([slow])
    client = client_for(srv, tmp_path, timeout=1.0, retries=1)
    assert client.ask(page1(project), SCHEMA) == GOOD  # the second try gets a whole answer
    assert client.waits == [0.01]
    ends = bytes_before_hang_up(slow, 1)  # the first try hung up at its deadline, not the trickle's end
    assert len(ends) == 1 and ends[0] is not None and ends[0] <= 15, ends


@pytest.mark.parametrize("broken", [
    http_reply(reply_bytes())[:-20],  # cut short: Content-Length promises more
    b"GARBAGE\r\n\r\n",  # a bad status line
    b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-H%d: v\r\n" % i for i in range(300)) + b"\r\n",  # a header flood
    b"HTTP/1.1 200 OK\r\nX-Long: " + b"a" * 70000 + b"\r\n\r\n",  # a header line too long
    b"",  # closed without a word
    b"HTTP/1.1 200 OK\r\nContent-Length: " + b"9" * 5000 + b"\r\n\r\n{}",  # a length of 5000 digits
    b"HTTP/1.1 100 Continue\r\n\r\n" * 3 + b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}",
], ids=["cut-short", "bad-status-line", "header-flood", "long-header", "closed", "huge-length", "continue"])
def test_broken_replies_are_retried(server, project, tmp_path, broken):
    srv = server([send(broken)])
    client = client_for(srv, tmp_path)
    assert client.ask(page1(project), SCHEMA) == GOOD
    assert client.requests == 2


@pytest.mark.parametrize("broken, says", [
    (http_reply(reply_bytes())[:-20], "cut short"),
    (b"GARBAGE\r\n\r\n", "bad status line"),
    (b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-H%d: v\r\n" % i for i in range(300)) + b"\r\n", "malformed reply"),
])
def test_always_broken_gives_a_clear_message_and_earlier_answers_are_kept(server, project, tmp_path, broken, says):
    base = project.load_page("invoice-1")
    project.add_page(Page("second", base.width, base.height, base.words))
    srv = server([send(http_reply(reply_bytes()))], default=send(broken))
    client = client_for(srv, tmp_path, retries=1)
    report = label_project(project, client)
    assert report.labelled == ["invoice-1"]
    assert [w for w, _ in report.errors] == ["second"]
    msg = report.errors[0][1]
    assert says in msg and "gave up after 2 tries" in msg and "\n" not in msg
    assert project.load_labels("invoice-1").answers == GOOD
    assert not project.label_path("second").exists()


def test_retry_after_is_honoured_and_bounded(server, project, tmp_path):
    busy = lambda secs: send(http_reply(b'{"error": "slow down"}', "429 Too Many Requests", [f"Retry-After: {secs}"]))
    srv = server([busy(3), busy(100000), send(http_reply(b"{}", "503 Busy", ["Retry-After: Wed, 21 Oct 2015 07:28:00 GMT"]))])
    client = client_for(srv, tmp_path, retries=3, max_retry_after=20.0, backoff=0.5)
    assert client.ask(page1(project), SCHEMA) == GOOD
    assert client.waits == [3.0, 20.0, 2.0]  # as asked, cut to the bound, a date in the past: the backoff


@pytest.mark.parametrize("chunked", [False, True])
def test_the_reply_size_is_capped(server, project, tmp_path, chunked):
    big = reply_bytes(content=json.dumps({"vendor": "A" * 3_000_000, "total": "1"}))
    if chunked:  # no Content-Length: the cap holds while reading
        head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        data = head + b"".join(b"%x\r\n%s\r\n" % (len(big[i:i + 65536]), big[i:i + 65536])
                               for i in range(0, len(big), 65536)) + b"0\r\n\r\n"
    else:
        data = http_reply(big)
    srv = server(default=send(data))
    client = client_for(srv, tmp_path, retries=1, max_reply_bytes=1_000_000)
    report = label_project(project, client)
    assert report.labelled == [] and "allowed" in report.errors[0][1]
    assert not project.label_path("invoice-1").exists()


def test_a_long_value_in_a_small_reply_is_refused(server, project, tmp_path):
    srv = server(default=send(http_reply(reply_bytes({"vendor": "A" * 50_000, "total": "1"}))))
    client = client_for(srv, tmp_path, retries=0)
    with pytest.raises(LabellingError, match="characters long"):
        client.ask(page1(project), SCHEMA)


# -- 4. a hostile labelling reply ---------------------------------------------------------------------

@pytest.mark.parametrize("reply", [
    b'{"choices": ' + b"[" * 100000 + b"]" * 100000 + b"}",
    reply_bytes(content='{"vendor": ' + "[" * 100000 + "]" * 100000 + "}"),
    reply_bytes(content='{"vendor": "Globex", "total": ' + "9" * 5000 + "}"),
    reply_bytes(content='{"vendor": "Globex", "total": ' + "9" * 400 + "}"),
    reply_bytes(content='{"vendor": "Globex", "total": 1e400}'),
    reply_bytes(content='{"vendor": "Glob\\ud800ex", "total": "1"}'),
    b'{"choices": [{"message": {"content": "{\\"vendor\\": \\"\\ud800\\"}"}}]}',
    reply_bytes(content="{" * 200000),
], ids=["deep-reply", "deep-content", "int-5000", "int-400", "float-overflow", "surrogate", "surrogate-raw", "braces"])
def test_a_hostile_reply_is_a_clear_error_and_nothing_is_saved(server, project, tmp_path, reply):
    srv = server(default=send(http_reply(reply)))
    client = client_for(srv, tmp_path, retries=1)
    t0 = time.process_time()
    report = label_project(project, client)
    assert time.process_time() - t0 < 10  # CPU seconds (a loaded machine cannot fail it): no blow-up
    assert report.labelled == [] and len(report.errors) == 1
    assert "gave up after 2 tries" in report.errors[0][1]
    assert not project.label_path("invoice-1").exists()


def test_an_http_proxy_from_the_environment_is_used(server, project, tmp_path, monkeypatch):
    proxy = server()  # answers like the endpoint; records what it was asked
    for k in ("http_proxy", "HTTP_PROXY", "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("http_proxy", proxy.origin)
    client = LabelClient("http://labels.invalid:8000/v1", "m", None, timeout=2.0, retries=0)
    assert client.ask(page1(project), SCHEMA) == GOOD
    assert proxy.requests[0]["line"] == "POST http://labels.invalid:8000/v1/chat/completions HTTP/1.1"
    monkeypatch.setenv("no_proxy", "labels.invalid")
    with pytest.raises(LabellingError, match="cannot connect"):
        LabelClient("http://labels.invalid:8000/v1", "m", None, timeout=2.0, retries=0).ask(page1(project), SCHEMA)


def test_a_trickling_tls_handshake_hits_the_deadline(server, project, tmp_path):
    # a TLS record header at once, then one byte every 0.2 s: each read gets a byte in time
    slow = trickle(b"\x16\x03\x03\x40\x00", every=0.2, seconds=8.0)
    srv = server(default=slow, read_request=False)
    client = LabelClient(srv.url.replace("http://", "https://"), "m", None, timeout=1.0, retries=0)
    with pytest.raises(LabellingError):
        client.ask(page1(project), SCHEMA)
    ends = bytes_before_hang_up(slow, 1)  # hung up at the 1 s deadline, not the trickle's 8 s end
    assert len(ends) == 1 and ends[0] is not None and ends[0] <= 15, ends
