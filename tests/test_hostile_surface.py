"""Hostile inputs on the new surface (issue 27): route, review beside the CLI, pretrain's
corpus, PDFs, Ray. One test (or a few) per item of the issue, in its order; each failed on
the code before the fix. Fake endpoints listen on 127.0.0.1 only."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from dxstudio import cli
from dxstudio.project import Project
from tests.test_importers import pdf_from_objects

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "resources" / "sample"
FIELDS = "total,subtotal,tax,cash,change"  # the bundled sample's schema


def run_cli(argv, capsys):
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def sample_pages(n):
    return sorted((SAMPLE / "pages").glob("*.json"))[:n]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "m.safetensors"
    assert cli.main(["new-model", str(path), "--size", "tiny", "--fields", FIELDS]) == 0
    return path


# -- 1. a review session never writes its old copy over newer answers ---------------------------

def test_review_session_refuses_to_overwrite_answers_changed_on_disk(receipts_project):
    from dxstudio.labelling import apply_answers
    from dxstudio.review import ReviewError, ReviewSession

    s = ReviewSession(receipts_project)
    pid = s.current
    old_total = s.labels.answers["total"]
    # meanwhile `label --jsonl` (or a re-import) gives the page new answers
    p = Project.open(receipts_project)
    apply_answers(p, pid, dict(p.load_labels(pid).answers, total="77.77"), "import")
    with pytest.raises(ReviewError, match="changed on disk"):
        s.accept()
    on_disk = p.load_labels(pid)
    assert on_disk.answers["total"] == "77.77" != old_total  # not written back
    assert on_disk.state == "unreviewed"
    assert s.labels.answers["total"] == "77.77"  # the session reloaded what is there now
    s.accept()  # a decision on what is shown now goes through
    assert p.load_labels(pid).state == "accepted" and p.load_labels(pid).answers["total"] == "77.77"
    # an undo after another change on disk is refused the same way, and stays on the stack
    labels = p.load_labels(pid)
    labels.answers["total"] = "88.88"
    p.save_labels(pid, labels)
    with pytest.raises(ReviewError, match="changed on disk"):
        s.undo()
    assert s.can_undo and p.load_labels(pid).answers["total"] == "88.88"


# -- 2. a run folder's .lock that is a link is never followed ----------------------------------

def test_run_lock_that_is_a_symlink_is_refused_and_its_target_untouched(tmp_path):
    from dxstudio.tuning import TuneError
    from dxstudio.tuning.rundir import RunDir

    victim = tmp_path / "precious.txt"
    victim.write_text("keep me\n")
    rd = RunDir(tmp_path / "run")
    rd.path.mkdir()
    os.symlink(victim, rd.lock_path)
    with pytest.raises(TuneError, match="link"):
        rd.acquire()
    assert victim.read_text() == "keep me\n"
    assert not rd.is_locked_elsewhere()
    dangling = RunDir(tmp_path / "run2")
    dangling.path.mkdir()
    os.symlink(tmp_path / "created-by-lock", dangling.lock_path)
    with pytest.raises(TuneError, match="link"):
        dangling.acquire()
    assert not (tmp_path / "created-by-lock").exists()


# -- 3. orphan .tmp files go; a run killed before its first checkpoint starts again -------------

def test_orphan_tmp_files_of_a_killed_writer_are_removed_on_the_next_open(tmp_path):
    from dxstudio.fsutil import write_json_atomic

    p = Project.create(tmp_path / "proj", "x", ["total"])
    # what a writer killed between mkstemp and rename leaves: a dead process's temp file
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    orphans = [p.labels_dir / f".a.json.{dead}-x1y2.tmp", p.pages_dir / f".a.json.{dead}-z3w4.tmp",
               p.cache_dir / "labels" / f".a.json.{dead}-q5r6.tmp"]
    old_style = p.pages_dir / ".b.json.k2j3h4.tmp"  # named before the pid was in the name: by age
    for f in orphans + [old_style]:
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("{half a page")
    os.utime(old_style, (time.time() - 7200, time.time() - 7200))
    live = p.labels_dir / f".c.json.{os.getpid()}-live.tmp"  # a live writer's file stays
    live.write_text("{")
    young = p.pages_dir / ".d.json.k9j8h7.tmp"  # no pid, and young: may be a live writer's
    young.write_text("{")
    Project.open(p.root)
    assert not any(f.exists() for f in orphans + [old_style])
    assert live.exists() and young.exists()
    write_json_atomic(p.labels_dir / "e.json", {"x": 1})  # the writer's own names carry its pid
    assert not list(p.labels_dir.glob(".e.json.*"))


def test_a_tune_killed_before_its_first_checkpoint_starts_again(small_project, tmp_path, capsys):
    from dxstudio.tuning.rundir import RunDir

    out = tmp_path / "run"
    # what a kill before the first checkpoint leaves: settings, snapshot, a metrics line, no checkpoint
    code, _, err = run_cli(["tune", str(small_project), "--out", str(out), "--stop-after", "1"], capsys)
    assert code == 0, err
    (out / "checkpoint.safetensors").unlink()
    assert RunDir(out).has_run() and RunDir(out).checkpoint_step() is None
    code, _, err = run_cli(["tune", str(small_project), "--out", str(out), "--stop-after", "1"], capsys)
    assert code == 0, err  # not "already holds a run"
    assert RunDir(out).checkpoint_step() == 1
    (out / "checkpoint.safetensors").unlink()
    code, _, err = run_cli(["tune", str(small_project), "--out", str(out), "--resume", "--stop-after", "1"], capsys)
    assert code == 0, err  # not "no checkpoint": the run starts again from step 0
    assert "starts again from step 0" in err
    assert RunDir(out).checkpoint_step() == 1
    # a folder with no run at all is still refused by --resume
    code, _, err = run_cli(["tune", str(small_project), "--out", str(tmp_path / "nothing"), "--resume"], capsys)
    assert code == 2 and "no checkpoint" in err


# -- route against local endpoints (4 to 7) -----------------------------------------------------

from test_labelling import FakeEndpoint  # noqa: E402  (the label tests' server, on 127.0.0.1)


class Server:
    """A handler class on 127.0.0.1 in a thread; .url, .requests (bodies and headers seen)."""

    def __init__(self, respond):
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        seen = self.requests = []

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                seen.append({"headers": dict(self.headers), "body": body})
                respond(self)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def send(handler, code, body: bytes):
    handler.send_response(code)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    try:
        handler.wfile.write(body)
    except (BrokenPipeError, ConnectionResetError):
        pass


def chat(answers) -> bytes:
    return json.dumps({"choices": [{"message": {"content": json.dumps(answers)}}]}).encode()


def make_route_project(tmp_path, url):
    proj = tmp_path / "project"
    (proj / "pages").mkdir(parents=True)
    d = json.loads((SAMPLE / "dxproject.json").read_text())
    d["labelling"] = {"url": url, "model": "test-model"}
    (proj / "dxproject.json").write_text(json.dumps(d))
    return proj


ANSWERS = {"total": "9.99", "subtotal": "9.00", "tax": "0.99", "cash": None, "change": None}


def files_under(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()]


# 4. a page id is a file name, checked in one place for every command

HOSTILE_IDS = {"absolute": None, "dotdot": "../../escaped", "nul": "a\x00b", "long": "x" * 300,
               "slash": "a/b", "space": "my page"}


def test_route_and_extract_refuse_a_page_id_that_is_not_a_file_name(model, tmp_path, capsys):
    server = FakeEndpoint([], default=("good", ANSWERS))
    try:
        proj = make_route_project(tmp_path, server.url)
        good = json.loads(sample_pages(1)[0].read_text())
        outside = tmp_path / "outside" / "evil"
        pages = []
        for name, pid in HOSTILE_IDS.items():
            path = tmp_path / "in" / f"{name}.json"
            path.parent.mkdir(exist_ok=True)
            path.write_text(json.dumps(dict(good, id=pid if pid is not None else str(outside))))
            pages.append(str(path))
        pages.append(str(sample_pages(1)[0]))
        for cmd in (["route", str(model), *pages, "--project", str(proj), "--threshold", "1.0"],
                    ["extract", str(model), *pages]):
            code, out, err = run_cli(cmd, capsys)
            assert code == 1, err  # partial: the good page went through
            assert "Traceback" not in err
            for name in HOSTILE_IDS:
                assert f"{name}.json: 'id' " in err and "is not a valid page id" in err
            ids = [json.loads(l).get("id") for l in out.splitlines() if '"summary"' not in l]
            assert ids == [good["id"]]
        assert not (tmp_path / "outside").exists() and not (tmp_path / "escaped").exists()
        assert all(p.resolve().is_relative_to(proj.resolve()) for p in files_under(proj))
    finally:
        server.close()


def test_the_label_cache_never_uses_an_unsafe_id_as_a_path(tmp_path):
    from dxstudio.engine.page import Page, Word
    from dxstudio.labelling import LabelClient

    client = LabelClient("http://127.0.0.1:9/v1", "m", cache_dir=tmp_path / "cache")
    for pid in ("/etc/passwd", "../../x", "a\x00b", "y" * 300):
        path = client.cache_path(Page(pid, 10, 10, (Word("a", (0, 0, 1, 1)),)), ["total"])
        assert path.parent == tmp_path / "cache" and len(path.name.encode()) < 255 and "\x00" not in path.name


# 5. the key is cut out of every message and file, whatever the server sends back

KEY = "sk-test-" + "0123456789abcdef" * 2


@pytest.mark.parametrize("status", [401, 500, 200])
def test_a_server_echoing_the_key_never_gets_it_shown_or_stored(model, tmp_path, capsys, monkeypatch, status):
    def respond(h):
        auth = h.headers.get("Authorization", "")
        if status == 200:  # a reply whose answer and a malformed second object carry the key
            send(h, 200, chat({"total": auth, "subtotal": f"x {auth} y", "tax": None, "cash": None, "change": None}))
        else:  # the key just past the 200 characters a message quotes, and again in full
            send(h, status, (f'{{"echo": "{auth}", "error": "' + "p" * 150 + f' bad header {auth}"}}').encode())

    server = Server(respond)
    monkeypatch.setenv("DXSTUDIO_LABEL_API_KEY", KEY)
    try:
        proj = make_route_project(tmp_path, server.url)
        pages = [str(p) for p in sample_pages(2)]
        code, out, err = run_cli(["route", str(model), *pages, "--project", str(proj), "--threshold", "1.0",
                                  "--retries", "0"], capsys)
        for p in sample_pages(2):
            shutil.copy(p, proj / "pages")
        code2, out2, err2 = run_cli(["label", str(proj), "--retries", "0"], capsys)
    finally:
        server.close()
    assert server.requests and all(r["headers"]["Authorization"] == f"Bearer {KEY}" for r in server.requests)
    for text in (out, err, out2, err2):
        assert KEY[8:20] not in text  # not the key, nor a piece of it
    if status != 200:
        assert "[redacted]" in err
    for f in files_under(proj):
        assert KEY[8:20].encode() not in f.read_bytes(), f


def test_an_api_key_with_a_line_break_is_refused_without_showing_it(tmp_path):
    from dxstudio.labelling import LabelClient, LabellingError

    with pytest.raises(LabellingError) as e:
        LabelClient("http://127.0.0.1:9/v1", "m", api_key="sk-secret\r\nX-Evil: 1")
    assert "sk-secret" not in str(e.value)


# 6. route grounds the labelling model's answers as label does

def test_route_grounds_answers_and_an_answer_not_on_the_page_is_no_answer(model, tmp_path, capsys):
    page_path = sample_pages(1)[0]
    labels = json.loads((SAMPLE / "labels" / page_path.name).read_text())
    on_page = labels["answers"]["total"]
    assert on_page
    server = FakeEndpoint([], default=("good", {"total": on_page, "subtotal": "987654.32", "tax": None,
                                               "cash": None, "change": None}))
    try:
        proj = make_route_project(tmp_path, server.url)
        code, out, err = run_cli(["route", str(model), str(page_path), "--project", str(proj),
                                  "--threshold", "1.0"], capsys)
    finally:
        server.close()
    assert code == 0, err
    line, summary = (json.loads(l) for l in out.splitlines())
    f = line["fields"]
    assert f["total"]["grounding"] in ("exact", "normalized") and f["total"]["value"] == on_page
    assert f["subtotal"] == {"value": None, "source": "labelling model", "grounding": "absent",
                             "confidence": f["subtotal"]["confidence"], "model_value": "987654.32",
                             "why": "below threshold"}
    assert f["tax"]["grounding"] == "null" and f["tax"]["value"] is None
    assert summary["summary"]["values_not_on_page"] == 1


# 7. route stops asking a stalled endpoint after three pages fail in a row

def until_hung_up(release, hung_up):
    """A Server's respond that never answers: it waits until the client closes the connection
    (appending to `hung_up`) or `release` is set."""
    import select
    import socket

    def respond(h):
        while not release.is_set():
            if select.select([h.connection], [], [], 0.05)[0]:
                try:
                    gone = not h.connection.recv(1, socket.MSG_PEEK)
                except OSError:
                    gone = True
                if gone:
                    hung_up.append(True)
                    return
    return respond


def test_route_against_a_stalled_endpoint_stops_after_three_failures_and_lists_the_rest(model, tmp_path, capsys):
    release, hung_up = threading.Event(), []
    server = Server(until_hung_up(release, hung_up))  # accepts, then never answers
    try:
        proj = make_route_project(tmp_path, server.url)
        pages = [str(p) for p in sample_pages(8)]
        code, out, err = run_cli(["route", str(model), *pages, "--project", str(proj), "--threshold", "1.0",
                                  "--timeout", "0.3", "--retries", "0", "--concurrency", "1"], capsys)
        # the client gave up on each of the three (its 0.3 s timeout; the server would have
        # waited forever): no clock to fail on a loaded machine
        t0 = time.monotonic()
        while len(hung_up) < 3 and time.monotonic() - t0 < 30:
            time.sleep(0.05)
    finally:
        release.set()
        server.close()
    lines = [json.loads(l) for l in out.splitlines()]
    summary = lines.pop()["summary"]
    assert code == 2  # nothing answered
    assert len(server.requests) == 3 and summary["requests"] == 3
    ids = [l["id"] for l in lines]
    assert summary["not_asked"] == ids[3:] and summary["pages_not_asked"] == 5
    assert all("not asked" in l["error"] for l in lines[3:])
    assert all(v["source"] is None for l in lines for v in l["fields"].values() if v["value"] is None)
    assert "failed in a row" in err and len(hung_up) == 3


# -- 8. extract streams a pipe: counting never consumes it -------------------------------------

def test_extract_on_a_fifo_reads_every_line_once(model, tmp_path, capsys):
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    lines = [json.dumps(json.loads(p.read_text())) + "\n" for p in sample_pages(3)]
    result = {}

    def extract():
        result["code"] = cli.main(["extract", str(model), str(fifo)])

    t = threading.Thread(target=extract, daemon=True)
    t.start()
    with open(fifo, "w") as w:  # opens once the command opens the pipe for reading
        w.writelines(lines)
    t.join(60)
    if t.is_alive():  # the command opened the pipe a second time: let it see the end
        with open(fifo, "w"):
            pass
        t.join(60)
    out, err = capsys.readouterr()
    assert result.get("code") == 0, err
    assert [json.loads(l)["id"] for l in out.splitlines()] == [p.stem for p in sample_pages(3)]


def test_a_device_named_as_jsonl_is_refused_and_a_huge_line_is_not_held(tmp_path, monkeypatch):
    import io

    from dxstudio.scale import pages as sp

    dev = tmp_path / "zero.jsonl"
    os.symlink("/dev/zero", dev)
    items = list(sp.page_items([str(dev)]))
    assert len(items) == 1 and items[0][1] is None and "not a regular file or a pipe" in items[0][2]
    assert sp.count_pages([str(dev)]) is None
    monkeypatch.setattr(sp, "MAX_JSON_BYTES", 100)
    stream = io.BytesIO(b"x" * 5000 + b"\n" + b'{"id": "a"}\n')
    got = list(sp.page_items(["-"], stdin=stream))
    assert [g[0] for g in got] == ["<stdin> line 1", "<stdin> line 2"]
    assert got[0][1] is None and "longer than 100 bytes" in got[0][2] and got[1][1] == b'{"id": "a"}\n'


# -- 9. import pdf: pixels per page and per file, time, inflate bombs, zero pages ----------------

def blank_pdf(path: Path, sizes) -> Path:
    import io

    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument.new()
    for w, h in sizes:
        pdf.new_page(w, h)
    buf = io.BytesIO()
    pdf.save(buf)
    path.write_bytes(buf.getvalue())
    return path


def text_pdf(path: Path, content: bytes, compress: bool = False, size=(612, 792)) -> Path:
    """A one-page PDF whose content stream is `content` (Helvetica), written out by hand."""
    import zlib

    stream = zlib.compress(content) if compress else content
    filt = b"/Filter/FlateDecode" if compress else b""
    objs = [b"<</Type/Catalog/Pages 2 0 R>>", b"<</Type/Pages/Kids[3 0 R]/Count 1>>",
            b"<</Type/Page/Parent 2 0 R/MediaBox[0 0 %d %d]/Resources<</Font<</F1 5 0 R>>>>/Contents 4 0 R>>" % size,
            b"<</Length %d%s>>stream\n" % (len(stream), filt) + stream + b"\nendstream",
            b"<</Type/Font/Subtype/Type1/BaseFont/Helvetica>>"]
    path.write_bytes(pdf_from_objects(objs))
    return path


HELLO = b"BT /F1 24 Tf 72 700 Td (Total 12.50) Tj ET"


def test_pdf_pages_past_the_pixel_limit_come_without_images_and_the_note_names_the_limit(tmp_path):
    from dxstudio.importers import import_pages
    from dxstudio.pdflimits import MAX_PDF_PAGE_PIXELS

    text_pdf(tmp_path / "huge.pdf", HELLO, size=(14400, 14400))
    p = Project.create(tmp_path / "proj", "x", [])
    t0 = time.process_time()
    report = import_pages("pdf", tmp_path / "huge.pdf", p)
    assert time.process_time() - t0 < 10  # CPU seconds: not rendered (a loaded machine cannot fail it)
    assert report.added == ["huge"]
    note = " ".join(m for _, m in report.notes)
    assert "huge.pdf: page 1" in note and f"{MAX_PDF_PAGE_PIXELS:,}" in note
    assert p.load_page("huge").image is None
    assert not (p.pages_dir / "images" / "huge.png").exists()


def test_pdf_file_pixel_and_time_budgets_name_the_file_and_the_limit(tmp_path):
    from dxstudio.importers import SourceError, render_pdf_images
    from dxstudio.pdflimits import PdfBudget

    path = blank_pdf(tmp_path / "many.pdf", [(612, 792)] * 5)
    notes = []
    budget = PdfBudget(path, SourceError, max_file_pixels=3 * 850 * 1100)
    images = render_pdf_images(path, budget=budget, notes=notes)
    assert [i is not None for i in images] == [True, True, True, False, False]
    assert all("many.pdf: page" in n and "pixels allowed for one PDF file" in n for n in notes)
    budget = PdfBudget(path, SourceError, max_seconds=0.0)
    with pytest.raises(SourceError, match=r"many.pdf: page 1: stopped after 0 s \(the limit for one PDF file\)"):
        budget.check_time(0)


def test_a_pdf_stream_that_inflates_past_the_limit_is_refused_before_pdfium_reads_it(tmp_path, monkeypatch):
    import zlib

    from dxstudio import pdflimits
    from dxstudio.importers import import_pages

    monkeypatch.setattr(pdflimits, "MAX_PDF_STREAM_BYTES", 4 << 20)
    bomb = HELLO + b"\n" + b" " * (16 << 20)  # 16 MB of spaces inflates from 16 kB
    text_pdf(tmp_path / "bomb.pdf", bomb, compress=True)
    double = tmp_path / "double.pdf"  # Flate inside Flate: the outer layer alone is small
    text_pdf(double, zlib.compress(bomb), compress=True)
    text_pdf(tmp_path / "fine.pdf", HELLO, compress=True)
    p = Project.create(tmp_path / "proj", "x", [])
    src = tmp_path
    report = import_pages("pdf", src, p)
    errors = dict(report.errors)
    assert report.added == ["fine"]
    for name in ("bomb.pdf", "double.pdf"):
        assert "inflates to more than 4 MB (the limit for one stream of a PDF)" in errors[str(src / name)]


def test_a_zero_page_pdf_says_so(tmp_path):
    from dxstudio.importers import import_pages

    blank_pdf(tmp_path / "empty.pdf", [])
    p = Project.create(tmp_path / "proj", "x", [])
    report = import_pages("pdf", tmp_path / "empty.pdf", p)
    assert report.errors == [(str(tmp_path / "empty.pdf"), f"{tmp_path / 'empty.pdf'}: the PDF has no pages")]


@pytest.mark.parametrize("order", [("empty", "damaged", "empty"), ("damaged", "empty", "damaged")])
def test_a_zero_page_pdf_says_so_whatever_pdfium_read_before(tmp_path, order):
    """pdfium refuses a zero-page PDF with its last error as the reason, which a damaged PDF
    read before leaves at "Data format error" (test_importers' PDFs made the test above fail
    when run first): the message comes from the file, in either order."""
    from dxstudio.importers import import_pages

    files = {"empty": blank_pdf(tmp_path / "empty.pdf", []),
             "damaged": tmp_path / "damaged.pdf"}
    files["damaged"].write_bytes(b"%PDF-1.4\nnot a PDF past its header\n")
    want = {"empty": "the PDF has no pages", "damaged": "not a readable PDF"}
    p = Project.create(tmp_path / "proj", "x", [])
    for name in order:
        report = import_pages("pdf", files[name], p)
        assert len(report.errors) == 1 and report.errors[0][0] == str(files[name]), report.errors
        assert report.errors[0][1].startswith(f"{files[name]}: {want[name]}"), (name, report.errors)
    assert report.added == []


# -- 11. pretrain's corpus reader: the hardened reader, one bad file named, the rest goes on -----

def cord_receipt(quad_x1=10):
    q = {"x1": quad_x1, "y1": 10, "x2": 40, "y2": 10, "x3": 40, "y3": 20, "x4": 10, "y4": 20}
    return {"meta": {"image_size": {"width": 100, "height": 100}}, "valid_line": [
        {"category": "total.total_price", "group_id": 1, "words": [{"text": "9.00", "quad": q}]}]}


def test_corpus_reader_names_each_hostile_cord_file_and_keeps_the_rest(tmp_path):
    from dxstudio.corpus.sources import read_source

    root = tmp_path / "cord"
    (root / "json").mkdir(parents=True)
    (root / "json" / "receipt_00000.json").write_text(json.dumps(cord_receipt()))
    (root / "json" / "receipt_00001.json").write_text('{"valid_line": ' + "[" * 100000 + "]" * 100000 + "}")
    (root / "json" / "receipt_00002.json").write_text(json.dumps(cord_receipt("NaN")))
    os.mkfifo(root / "json" / "receipt_00003.json")
    os.symlink("/dev/zero", root / "json" / "receipt_00004.json")
    secret = tmp_path / "elsewhere.json"
    secret.write_text(json.dumps(cord_receipt()))
    os.symlink(secret, root / "json" / "receipt_00005.json")
    (root / "json" / "receipt_00006.json").write_text(json.dumps(cord_receipt()))
    result = {}
    t = threading.Thread(target=lambda: result.update(rep=read_source(str(root))), daemon=True)
    t.start()
    t.join(60)
    if t.is_alive():  # the FIFO was opened and waited on: let it go
        with open(root / "json" / "receipt_00003.json", "w"):
            pass
        t.join(10)
    rep = result.get("rep")
    assert rep is not None and rep.kind == "cord"
    assert [d.page.id for d in rep.docs] == ["receipt_00000", "receipt_00006"]
    errors = {Path(f).name: m for f, m in rep.errors}
    assert sorted(errors) == [f"receipt_0000{k}.json" for k in (1, 2, 3, 4, 5)]
    assert "nested more than" in errors["receipt_00001.json"]
    assert "not a finite number" in errors["receipt_00002.json"]
    assert "not a regular file" in errors["receipt_00003.json"]  # a FIFO: never waited on
    assert "outside the corpus source" in errors["receipt_00004.json"]  # /dev/zero: a link out, never read
    assert "outside the corpus source" in errors["receipt_00005.json"]
    for name, m in errors.items():
        assert m.startswith(str(root / "json" / name)), m


def test_corpus_reader_names_a_docbank_file_with_a_nan_box(tmp_path):
    from dxstudio.corpus.sources import read_source

    root = tmp_path / "docbank"
    (root / "txt").mkdir(parents=True)
    good = "Title\t100\t50\t200\t70\t0\t0\t0\tF\ttitle\ntext\t100\t80\t140\t90\t0\t0\t0\tF\tparagraph\n"
    (root / "txt" / "a.txt").write_text(good)
    (root / "txt" / "b.txt").write_text(good.replace("\t200\t", "\tnan\t"))
    rep = read_source(str(root))
    assert [d.page.id for d in rep.docs] == ["a"]
    assert [Path(f).name for f, _ in rep.errors] == ["b.txt"] and "not four finite numbers" in rep.errors[0][1]


# -- 10. extract holds one window's inputs at a time ---------------------------------------------

def test_extract_builds_a_long_page_s_windows_one_at_a_time(model, monkeypatch):
    import weakref

    from dxstudio.engine import inputs
    from dxstudio.engine.container import load_model
    from dxstudio.engine.extract import predict_page
    from dxstudio.engine.model import to_runtime
    from dxstudio.engine.page import Page, Word

    m = load_model(model)
    n = 6 * m.cfg.max_words
    words = tuple(Word(["Total", "12.50", "Date"][i % 3], (float(i % 50) * 20, float(i // 50) * 10,
                                                          float(i % 50) * 20 + 18, float(i // 50) * 10 + 8))
                  for i in range(n))
    page = Page("long", 1000.0, float(n // 50 + 1) * 10, words)
    live, most = weakref.WeakSet(), [0]
    real = inputs.window_inputs

    def counted(*a, **kw):
        w = real(*a, **kw)
        live.add(w)
        most[0] = max(most[0], len(live))
        return w

    monkeypatch.setattr(inputs, "window_inputs", counted)
    pred = predict_page(m.cfg, to_runtime(m.params), page)
    assert len(pred.tags) == n
    assert most[0] <= 2  # the window in use and the next one being built; not all six


# -- 12. import sroie / funsd refuse values of the wrong kind, naming the file -----------------

def test_import_sroie_refuses_a_nested_key_value(tmp_path):
    from dxstudio.importers import import_pages

    root = tmp_path / "sroie"
    (root / "box").mkdir(parents=True)
    (root / "key").mkdir()
    for stem in ("a", "b"):
        (root / "box" / f"{stem}.csv").write_text("10,10,60,10,60,20,10,20,TOTAL 9.00\n")
    (root / "key" / "a.json").write_text(json.dumps({"company": "Shop", "total": {"a": [1, 2]}}))
    (root / "key" / "b.json").write_text(json.dumps({"company": "Shop", "total": "9.00"}))
    p = Project.create(tmp_path / "proj", "x", [])
    report = import_pages("sroie", root, p)
    errors = dict(report.errors)
    assert "value of 'total' is dict, not text" in errors[str(root / "key" / "a.json")]
    assert p.load_labels("a").answers is None  # nothing of the bad key stored
    assert p.load_labels("b").answers["total"] == "9.00"


def test_import_funsd_refuses_a_box_given_as_a_string(tmp_path):
    from dxstudio.importers import import_pages

    ann = tmp_path / "funsd" / "annotations"
    ann.mkdir(parents=True)
    word = {"text": "Date", "box": [10, 10, 40, 20]}
    (ann / "good.json").write_text(json.dumps({"form": [{"words": [word]}]}))
    (ann / "bad.json").write_text(json.dumps({"form": [{"words": [dict(word, box="1234")]}]}))
    (ann / "flag.json").write_text(json.dumps({"form": [{"words": [dict(word, box=[True, 1, 2, 3])]}]}))
    p = Project.create(tmp_path / "proj", "x", [])
    report = import_pages("funsd", tmp_path / "funsd", p)
    assert report.added == ["good"]
    errors = dict(report.errors)
    for name in ("bad.json", "flag.json"):
        assert "a word without text or box" in errors[str(ann / name)]


# -- 13, 14. --ray local: only results on stdout; no usage report; what listens where is documented --

def ray_listeners(psutil):
    """(process name, where it listens) of every Ray process this one started, and its own."""
    procs = {p.pid: p.name() for p in psutil.Process().children(recursive=True)}
    procs[os.getpid()] = "driver"
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True).stdout
    found = set()
    for line in out.splitlines():
        for pid, name in procs.items():
            if f"pid={pid}," in line:
                host = line.split()[3].rsplit(":", 1)[0]
                kind = ("all interfaces" if host in ("*", "0.0.0.0", "[::]") else
                        "loopback" if host.startswith("127.") or host == "[::1]" else "the machine's address")
                found.add((name.replace("ray::", ""), kind))
    return found, procs


def test_ray_local_prints_only_results_on_stdout_and_says_what_listens_where(capsys):
    ray = pytest.importorskip("ray")
    psutil = pytest.importorskip("psutil")
    if ray.is_initialized() or shutil.which("ss") is None:
        pytest.skip("needs a process without Ray running, and ss")
    from dxstudio.cli.common import emit_json
    from dxstudio.scale import cluster

    assert cluster.connect("local", 1)
    try:
        from ray._private.worker import print_to_stdstream

        # what the driver prints after a worker dies: a coloured raylet line
        print_to_stdstream({"is_err": False, "pid": "raylet", "ip": "127.0.0.1",
                            "lines": ["\x1b[33mA worker died or was killed while executing a task\x1b[0m"]}, False)
        emit_json({"id": "a"})
        listeners, procs = ray_listeners(psutil)
        envs = [psutil.Process(pid).environ().get("RAY_USAGE_STATS_ENABLED") for pid, name in procs.items()
                if name in ("raylet", "gcs_server")]
    finally:
        cluster.shutdown()
    out, err = capsys.readouterr()
    assert out == '{"id": "a"}\n'  # only results
    assert "A worker died" in err
    assert envs and all(e == "0" for e in envs)  # no usage report, so no cloud metadata lookups
    section = (REPO / "docs" / "security.md").read_text().split("## Ray", 1)[1].split("\n## ", 1)[0]
    documented = {tuple(cell.strip(" `") for cell in row.split("|")[1:3])
                  for row in section.splitlines() if row.startswith("| `")}
    assert listeners and listeners <= documented, listeners - documented
