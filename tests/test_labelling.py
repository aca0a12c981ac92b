"""The labelling client against a real HTTP server on 127.0.0.1, started by each test."""
import json
import re
import shutil
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from dxstudio import cli
from dxstudio.engine.page import Page
from dxstudio.labelling import (LabelClient, LabellingError, apply_answers, build_messages, import_answers_jsonl,
                                label_project, parse_answers, schema_hash)
from dxstudio.grounding import Excluded
from dxstudio.project import Field, LabelError, Project

FIXTURES = Path(__file__).parent / "fixtures"
SCHEMA = [Field("vendor", "who issued the invoice"), Field("invoice_number", "the invoice number"),
          Field("date", "the invoice date"), Field("total", "the amount to pay")]
GOOD = {"vendor": "Globex Corporation", "invoice_number": "INV-0042", "date": "2024-03-05", "total": "1,440.00"}


class FakeEndpoint:
    """An OpenAI-compatible chat endpoint that plays a script of behaviours, one per request:
    ("good", answers), ("slow", seconds, answers), ("status", code), ("raw", body text),
    ("content", message text). After the script it answers `default`."""

    def __init__(self, script=(), default=("good", GOOD)):
        self.script = list(script)
        self.default = default
        self.requests = []
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                endpoint.requests.append({"path": self.path, "headers": dict(self.headers), "body": json.loads(body)})
                step = endpoint.script.pop(0) if endpoint.script else endpoint.default
                kind = step[0]
                if kind == "status":
                    self._send(step[1], b'{"error": "busy"}')
                    return
                if kind == "raw":
                    self._send(200, step[1].encode())
                    return
                if kind == "slow":
                    time.sleep(step[1])
                    content = json.dumps(step[2])
                elif kind == "content":
                    content = step[1]
                else:
                    content = json.dumps(step[1])
                reply = {"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]}
                try:
                    self._send(200, json.dumps(reply).encode())
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up waiting

            def _send(self, code, data):
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self):
        if self.thread.is_alive():
            self.server.shutdown()
            self.server.server_close()


@pytest.fixture
def endpoint():
    servers = []

    def start(script=(), default=("good", GOOD)):
        s = FakeEndpoint(script, default)
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.close()


@pytest.fixture
def project(tmp_path):
    p = Project.create(tmp_path / "proj", "invoices", SCHEMA)
    from dxstudio.engine.page import load_page
    p.add_page(load_page(FIXTURES / "pages" / "invoice-1.json"))
    return p


def client_for(server, tmp_path, **kw):
    kw.setdefault("timeout", 2.0)
    kw.setdefault("retries", 3)
    kw.setdefault("backoff", 0.01)
    return LabelClient(server.url, "test-model", "sk-test", cache_dir=tmp_path / "cache", **kw)


def page1(project):
    return project.load_page("invoice-1")


# -- the prompt and the parser -------------------------------------------------------------------

def test_prompt_lists_fields_and_page_lines(project):
    system, user = build_messages(page1(project), SCHEMA)
    assert system["role"] == "system" and "JSON" in system["content"]
    assert "- invoice_number: the invoice number" in user["content"]
    assert '"vendor", "invoice_number", "date", "total"' in user["content"]
    assert "\nGlobex Corporation\nInvoice No. INV-0042\nDate: 2024-03-05\n" in user["content"]
    assert "\nTotal USD 1,440.00" in user["content"]


@pytest.mark.parametrize("content", [
    '{"vendor": "A", "total": null}',
    '```json\n{"vendor": "A", "total": null}\n```',
    'Sure! Here you go:\n{"vendor": "A", "total": null}\nHope this helps.',
    '{"note": "x"} and then {"vendor": "A", "total": null, "extra": "dropped"}',
])
def test_parse_answers_robustly(content):
    assert parse_answers(content, ["vendor", "total", "date"]) == {"vendor": "A", "total": None, "date": None}


def test_parse_answers_numbers_and_failures():
    assert parse_answers('{"total": 12.5, "vendor": "null"}', ["total", "vendor"]) == {"total": "12.5", "vendor": None}
    for bad, why in (("no json here", "no JSON object with the schema's fields in the reply ('no json here')"),
                     ('{"vendor": ', "no JSON object with the schema's fields in the reply"),
                     ('{"other": 1}', "no JSON object with the schema's fields in the reply"),
                     ('{"vendor": ["a", "b"]}', "the value of 'vendor' is list, not text or null")):
        with pytest.raises(ValueError, match=re.escape(why)):
            parse_answers(bad, ["vendor"])


def test_schema_hash_follows_the_question():
    h = schema_hash(SCHEMA, "m")
    assert h == schema_hash(list(SCHEMA), "m")
    assert h != schema_hash(SCHEMA[:3], "m") and h != schema_hash(SCHEMA, "other-model")
    assert h != schema_hash([Field("vendor", "someone else")] + SCHEMA[1:], "m")
    assert schema_hash([Field("vendor", "who", 9.0)] + SCHEMA[1:], "m") == schema_hash([Field("vendor", "who")] + SCHEMA[1:], "m")


# -- the client against a real server -------------------------------------------------------------

def test_good_answer_then_cache_hit_without_a_request(endpoint, project, tmp_path):
    server = endpoint()
    client = client_for(server, tmp_path)
    assert client.ask(page1(project), SCHEMA) == GOOD
    req = server.requests[0]
    assert req["path"] == "/v1/chat/completions"
    assert req["headers"]["Authorization"] == "Bearer sk-test"
    assert req["body"]["model"] == "test-model" and req["body"]["temperature"] == 0
    assert [m["role"] for m in req["body"]["messages"]] == ["system", "user"]
    cache_files = list((tmp_path / "cache").glob("invoice-1-*.json"))
    assert len(cache_files) == 1
    again = client_for(server, tmp_path)  # a new client, same cache folder
    assert again.ask(page1(project), SCHEMA) == GOOD
    assert len(server.requests) == 1 and again.requests == 0
    # another schema is another question
    again.ask(page1(project), SCHEMA[:2])
    assert len(server.requests) == 2


def test_slow_answer_beyond_the_timeout_then_success(endpoint, project, tmp_path):
    server = endpoint([("slow", 1.0, {"vendor": "late"})])
    client = client_for(server, tmp_path, timeout=0.3)
    waits = []
    client.sleep = waits.append
    assert client.ask(page1(project), SCHEMA) == GOOD
    assert client.requests == 2 and waits == [0.01]


def test_server_errors_then_success_with_exponential_backoff(endpoint, project, tmp_path):
    server = endpoint([("status", 500), ("status", 429), ("status", 503)])
    client = client_for(server, tmp_path, backoff=0.5)
    waits = []
    client.sleep = waits.append
    assert client.ask(page1(project), SCHEMA) == GOOD
    assert waits == [0.5, 1.0, 2.0] and client.requests == 4


def test_malformed_json_then_success(endpoint, project, tmp_path):
    server = endpoint([("raw", "<html>gateway</html>"), ("content", "I cannot find {the vendor"),
                       ("content", '```json\n{"vendor": "Globex Corporation", "total": "1,440.00"}\n```')])
    client = client_for(server, tmp_path)
    client.sleep = lambda s: None
    answers = client.ask(page1(project), SCHEMA)
    assert answers == {"vendor": "Globex Corporation", "invoice_number": None, "date": None, "total": "1,440.00"}
    assert client.requests == 3


def test_always_failing_gives_a_clear_error(endpoint, project, tmp_path):
    server = endpoint(default=("status", 502))
    client = client_for(server, tmp_path, retries=2)
    client.sleep = lambda s: None
    with pytest.raises(LabellingError) as e:
        client.ask(page1(project), SCHEMA)
    msg = str(e.value)
    assert server.url in msg and "invoice-1" in msg and "HTTP 502" in msg and "after 3 tries" in msg
    assert not list((tmp_path / "cache").glob("*.json"))  # failures are not cached


def test_client_errors_are_not_retried_and_nothing_listening(endpoint, project, tmp_path):
    server = endpoint(default=("status", 401))
    client = client_for(server, tmp_path)
    with pytest.raises(LabellingError, match="HTTP 401"):
        client.ask(page1(project), SCHEMA)
    assert client.requests == 1
    port = server.server.server_address[1]
    server.close()
    dead = LabelClient(f"http://127.0.0.1:{port}", "m", retries=1, backoff=0.0, timeout=1.0)
    with pytest.raises(LabellingError, match="cannot connect"):
        dead.ask(page1(project), SCHEMA)


def test_client_settings_from_project_and_environment(project):
    with pytest.raises(LabellingError, match="no labelling URL"):
        LabelClient.from_project(project, env={})
    env = {"DXSTUDIO_LABEL_URL": "http://127.0.0.1:9/v1", "DXSTUDIO_LABEL_MODEL": "m1", "DXSTUDIO_LABEL_API_KEY": "k"}
    c = LabelClient.from_project(project, env=env)
    assert (c.endpoint, c.model, c.api_key) == ("http://127.0.0.1:9/v1/chat/completions", "m1", "k")
    assert c.cache_dir == project.root / ".cache" / "labels"
    project.labelling.update({"url": "http://10.0.0.1:8000/v1/chat/completions", "model": "m2",
                              "api_key_env": "DXSTUDIO_MY_KEY"})
    c = LabelClient.from_project(project, env={"DXSTUDIO_MY_KEY": "secret", "DXSTUDIO_LABEL_ORIGINS": "http://10.0.0.1:8000"})
    assert (c.endpoint, c.model, c.api_key) == ("http://10.0.0.1:8000/v1/chat/completions", "m2", "secret")


# -- labelling a project ------------------------------------------------------------------------------

def test_label_project_grounds_and_keeps_the_review(endpoint, project, tmp_path):
    server = endpoint()
    client = client_for(server, tmp_path)
    seen = []
    report = label_project(project, client, progress=lambda d, t: seen.append((d, t)))
    assert report.labelled == ["invoice-1"] and not report.errors and seen[-1] == (1, 1)
    labels = project.load_labels("invoice-1")
    assert labels.answers == GOOD and labels.answer_source == "llm"
    assert {f: g["status"] for f, g in labels.grounding.items()} == {
        "vendor": "exact", "invoice_number": "exact", "date": "exact", "total": "exact"}
    assert labels.grounding["total"]["words"] == [13]
    # a person's review survives new answers
    labels.review = {"state": "accepted", "fixes": {"total": [13]}, "history": [{"op": "fix"}]}
    project.save_labels("invoice-1", labels)
    assert label_project(project, client).skipped == 1  # already labelled for this schema
    report = label_project(project, client, force=True)
    assert report.labelled == ["invoice-1"] and report.cached == 1 and len(server.requests) == 1
    assert project.load_labels("invoice-1").review["fixes"] == {"total": [13]}


def test_a_field_added_later_is_not_asked_until_asked_and_only_it_is_asked(endpoint, project, tmp_path):
    from dxstudio.grounding import page_targets, project_targets

    server = endpoint(script=[("good", GOOD), ("good", {"currency": "USD"})])
    client = client_for(server, tmp_path)
    label_project(project, client)
    labels = project.load_labels("invoice-1")
    labels.review["state"] = "accepted"
    project.save_labels("invoice-1", labels)
    before = project.load_labels("invoice-1")
    project.add_fields([Field("currency", "the currency of the total")])
    project.save()
    # not asked: neither a value nor "no value"; training and scoring leave the field out, not the page
    t = page_targets(page1(project), before, project.field_names)
    assert isinstance(t, Excluded) and "currency not asked yet" in t.reason
    pt = project_targets(project)
    assert [r[0] for r in pt.kept] == ["invoice-1"] and pt.left_out == {"currency": 1}
    assert "currency" in pt.kept[0][2].unscored and pt.kept[0][2].field_words["currency"] == ()
    # a person's value (here: no value) counts as asked
    fixed = project.load_labels("invoice-1")
    fixed.review["fixes"]["currency"] = []
    assert not isinstance(page_targets(page1(project), fixed, project.field_names), Excluded)
    # Label pages asks only for the missing field and keeps every other label as it was
    report = label_project(project, client)
    assert report.labelled == ["invoice-1"] and len(server.requests) == 2
    asked = json.dumps(server.requests[1]["body"]["messages"])
    assert "currency" in asked and "invoice_number" not in asked and "Globex" in asked
    after = project.load_labels("invoice-1")
    assert {k: v for k, v in after.grounding.items() if k != "currency"} == before.grounding
    assert after.answers == {**GOOD, "currency": "USD"} and after.grounding["currency"]["status"] == "exact"
    assert after.state == "unreviewed" and after.review["history"][-1]["fields"] == ["currency"]
    assert label_project(project, client).skipped == 1 and len(server.requests) == 2  # nothing missing now


def test_label_project_stops_when_the_endpoint_is_down(endpoint, project, tmp_path):
    for k in range(4):
        page = project.load_page("invoice-1")
        project.add_page(Page(f"copy-{k}", page.width, page.height, page.words))
    server = endpoint(default=("status", 500))
    client = client_for(server, tmp_path, retries=0)
    report = label_project(project, client, stop_after_failures=2)
    assert len(report.errors) == 2 and report.stopped and "2 pages failed in a row" in report.stopped
    assert report.labelled == [] and len(server.requests) == 2


def test_label_project_with_a_broken_label_file_goes_on(endpoint, project, tmp_path):
    page = project.load_page("invoice-1")
    project.add_page(Page("other", page.width, page.height, page.words))
    project.label_path("other").write_text("{broken")
    report = label_project(project, client_for(endpoint(), tmp_path))
    assert report.labelled == ["invoice-1"]
    assert report.errors[0][0] == "other" and "labels/other.json: not JSON" in report.errors[0][1]
    assert project.label_path("other").read_text() == "{broken"  # nothing saved is overwritten


# -- JSONL import ---------------------------------------------------------------------------------

def test_jsonl_import_with_bad_lines(project):
    report = import_answers_jsonl(project, FIXTURES / "answers.jsonl")
    assert report.labelled == ["invoice-1"]
    errors = dict(report.errors)
    path = str(FIXTURES / "answers.jsonl")
    assert set(errors) == {f"{path}:2", f"{path}:3", f"{path}:4", f"{path}:5"}
    assert "not JSON" in errors[f"{path}:2"]
    assert "field 'colour' is not in the schema" in errors[f"{path}:3"]
    assert "no page 'no-such-page'" in errors[f"{path}:4"]
    labels = project.load_labels("invoice-1")
    assert labels.answers["vendor"] == "Globex Corporation" and labels.answer_source == "import"
    assert labels.grounding["total"]["status"] == "normalized"  # 1440.00 printed as 1,440.00
    assert labels.grounding["total"]["words"] == [13]


def test_apply_answers_rejects_unknown_fields(project):
    with pytest.raises(LabelError, match="'colour' is not in the schema"):
        apply_answers(project, "invoice-1", {"colour": "red"}, "llm")
    assert not project.label_path("invoice-1").exists()


# -- the command ----------------------------------------------------------------------------------

def test_label_command(endpoint, project, tmp_path, capsys, monkeypatch):
    server = endpoint()
    monkeypatch.setenv("DXSTUDIO_LABEL_URL", server.url)
    monkeypatch.setenv("DXSTUDIO_LABEL_MODEL", "test-model")
    assert cli.main(["label", str(project.root), "--limit", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["labelled"] == 1 and out["grounding"] == {"exact": 4}
    shutil.copy(FIXTURES / "answers.jsonl", tmp_path / "a.jsonl")
    assert cli.main(["label", str(project.root), "--jsonl", str(tmp_path / "a.jsonl")]) == 1
    captured = capsys.readouterr()
    assert json.loads(captured.out)["failed"] == 4 and "a.jsonl:3" in captured.err
    empty = Project.create(tmp_path / "empty", "empty", SCHEMA)
    assert cli.main(["label", str(empty.root)]) == 2
    assert "no pages" in capsys.readouterr().err


def test_export_reviewed_labels_jsonl_and_csv(endpoint, project, tmp_path):
    import csv

    from dxstudio.review import ReviewError, export_reviewed

    label_project(project, client_for(endpoint(), tmp_path))
    assert export_reviewed(project, tmp_path / "none.jsonl") == 0  # nothing accepted yet
    assert (tmp_path / "none.jsonl").read_text() == ""
    labels = project.load_labels("invoice-1")
    labels.review["state"] = "accepted"
    labels.review["fixes"] = {"date": []}  # a person said: no date on this page
    project.save_labels("invoice-1", labels)
    assert export_reviewed(project, tmp_path / "r.jsonl") == 1
    row = json.loads((tmp_path / "r.jsonl").read_text())
    assert row["id"] == "invoice-1" and row["fields"]["total"] == {"value": "1,440.00", "words": [13]}
    assert row["fields"]["date"] == {"value": None, "words": []}
    assert export_reviewed(project, tmp_path / "r.csv") == 1
    table = list(csv.reader((tmp_path / "r.csv").open()))
    assert table == [["id", "vendor", "invoice_number", "date", "total"],
                     ["invoice-1", "Globex Corporation", "INV-0042", "", "1,440.00"]]
    with pytest.raises(ReviewError, match="r.txt"):
        export_reviewed(project, tmp_path / "r.txt")
