"""Hostile and careless files (issue 9, items 4 to 9): each gives one clear line naming the
file, the page is skipped and the rest goes on."""
from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import pytest

from dxstudio.engine.container import ModelFileError, load_model
from dxstudio.engine.page import Page, PageError, Word, load_page
from dxstudio.fsutil import JSONInputError, loads_json, read_json, read_regular_file
from dxstudio.project import LabelError, Project, ProjectError

FIXTURES = Path(__file__).parent / "fixtures"

DEEP = "[" * 100000 + "]" * 100000
HOSTILE_JSON = {
    "deep": DEEP,
    "deep-object": '{"a":' * 50000 + "1" + "}" * 50000,
    "int-400": '{"id": "p", "width": ' + "9" * 400 + "}",
    "int-5000": '{"id": "p", "width": ' + "9" * 5000 + "}",
    "float-overflow": '{"id": "p", "width": 1e400}',
    "surrogate": '{"id": "p\\ud800", "width": 1}',
    "nan": '{"id": "p", "width": NaN}',
}


@pytest.mark.parametrize("name", sorted(HOSTILE_JSON))
def test_parse_json_refuses_hostile_text_with_a_plain_value_error(name):
    with pytest.raises(JSONInputError) as e:
        loads_json(HOSTILE_JSON[name])
    assert "\n" not in str(e.value) and len(str(e.value)) < 200


def test_parse_json_keeps_ordinary_json():
    assert loads_json('{"a": [1, 2.5, "x", null, true], "b": {"c": -12}}') == \
        {"a": [1, 2.5, "x", None, True], "b": {"c": -12}}
    assert loads_json(b"\xef\xbb\xbf[1]") == [1]
    deep_ok = "[" * 20 + "]" * 20
    assert loads_json(deep_ok) is not None


def _invoice_pages(n):
    base = load_page(FIXTURES / "pages" / "invoice-1.json")
    pages = []
    for k in range(n):
        words = list(base.words)
        words[4] = Word(f"INV-{k:04d}", words[4].box)
        pages.append(Page(f"inv-{k}", base.width, base.height, tuple(words)))
    return pages


@pytest.fixture
def small_project(tmp_path):
    from dxstudio.labelling import apply_answers

    p = Project.create(tmp_path / "proj", "invoices", ["vendor", "invoice_number", "total"])
    for page in _invoice_pages(6):
        p.add_page(page)
        apply_answers(p, page.id, {"vendor": "Globex Corporation", "invoice_number": page.words[4].text,
                                   "total": "1,440.00"}, "test")
    p.settings.update({"size": "tiny", "epochs": 1, "batch": 2, "warmup": 1, "heldout_fraction": 0.34})
    p.save()
    return p


# A hostile value placed where each reader gets to it.
VALUES = {"deep": "[" * 100000 + "]" * 100000, "int-400": "9" * 400, "int-5000": "9" * 5000,
          "float-overflow": "1e400", "surrogate": '"x\\ud800"', "nan": "NaN"}
PAGE = '{"id": "inv-2", "width": %s, "height": 800, "words": [{"text": "a", "box": [0, 0, 1, 1]}]}'
LABEL = '{"page": "inv-3", "answers": {"total": %s}}'
PROJECT = '{"name": "x", "schema": [], "settings": {"lr": %s}, "labelling": {"model": %s}}'


@pytest.mark.parametrize("name", sorted(VALUES))
def test_hostile_page_file_is_one_clear_error_and_the_rest_goes_on(small_project, name):
    from dxstudio.grounding import project_targets

    bad = small_project.page_path("inv-2")
    bad.write_text(PAGE % VALUES[name], encoding="utf-8")
    with pytest.raises(PageError) as e:
        small_project.load_page("inv-2")
    assert str(e.value).startswith(str(bad)) and "\n" not in str(e.value)
    pt = project_targets(small_project)
    assert [pid for pid, _ in pt.errors] == ["inv-2"]
    assert len(pt.kept) == 5


@pytest.mark.parametrize("name", sorted(VALUES))
def test_hostile_label_file_is_one_clear_error(small_project, name):
    from dxstudio.grounding import project_targets

    bad = small_project.label_path("inv-3")
    bad.write_text(LABEL % VALUES[name], encoding="utf-8")
    with pytest.raises(LabelError) as e:
        small_project.load_labels("inv-3")
    assert str(e.value).startswith(str(bad))
    pt = project_targets(small_project)
    assert [pid for pid, _ in pt.errors] == ["inv-3"] and len(pt.kept) == 5


def test_label_file_with_deep_extra_key_loads_or_fails_cleanly(small_project):
    # 500 deep parses without RecursionError in json, but would break deepcopy on save
    bad = small_project.label_path("inv-1")
    d = json.loads(bad.read_text())
    d["extra"] = json.loads("[" * 500 + "]" * 500)
    bad.write_text(json.dumps(d))
    with pytest.raises(LabelError, match="nested more than"):
        small_project.load_labels("inv-1")


@pytest.mark.parametrize("name", sorted(VALUES))
def test_hostile_project_file_is_one_clear_error(small_project, name):
    v = VALUES[name]
    small_project.project_file.write_text(PROJECT % (v, v), encoding="utf-8")
    with pytest.raises(ProjectError) as e:
        Project.open(small_project.root)
    assert str(e.value).startswith(str(small_project.project_file))


def test_tune_over_a_project_with_one_hostile_page_still_runs(small_project, tmp_path):
    from dxstudio.tuning import TuneRun

    small_project.page_path("inv-1").write_text(DEEP)
    small_project.label_path("inv-4").write_text('{"page": "inv-4", "answers": {"total": "\\udfff"}}')
    run = TuneRun.prepare(Project.open(small_project.root), tmp_path / "run", {})
    assert sorted(pid for pid, _ in run.errors) == ["inv-1", "inv-4"]
    assert len(run.train_pages) + len(run.heldout_pages) == 4
    assert run.train()
    assert (tmp_path / "run" / "checkpoint.safetensors").exists()


def _model_file(path, header_text: str):
    raw = header_text.encode("utf-8")
    path.write_bytes(struct.pack("<Q", len(raw)) + raw)
    return path


@pytest.mark.parametrize("name", ["deep", "int-5000", "int-400", "surrogate", "float-overflow"])
def test_hostile_safetensors_header_is_a_model_file_error(tmp_path, name):
    texts = {"deep": '{"__metadata__": ' + "[" * 100000 + "]" * 100000 + "}",
             "int-5000": '{"x": {"dtype": "F32", "shape": [' + "9" * 5000 + '], "data_offsets": [0, 4]}}',
             "int-400": '{"x": {"dtype": "F32", "shape": [' + "9" * 400 + '], "data_offsets": [0, 4]}}',
             "surrogate": '{"__metadata__": {"format": "\\ud800"}}',
             "float-overflow": '{"__metadata__": {"format": "docextract-v0"}, "x": 1e400}'}
    path = _model_file(tmp_path / "m.safetensors", texts[name])
    with pytest.raises(ModelFileError) as e:
        load_model(path)
    assert str(e.value).startswith(str(path))


def test_hostile_config_inside_the_model_header(tmp_path):
    meta = {"format": "docextract-v0", "config": '{"d_model": ' + "9" * 5000 + "}"}
    path = _model_file(tmp_path / "m.safetensors", json.dumps({"__metadata__": meta}))
    with pytest.raises(ModelFileError, match="digits"):
        load_model(path)


# -- item 6: only regular files, with a size cap ----------------------------------------------

@pytest.fixture
def fifo(tmp_path):
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    path = tmp_path / "pipe.json"
    os.mkfifo(path)
    return path


def test_read_refuses_a_fifo_without_waiting(fifo):
    with pytest.raises(ValueError, match="not a regular file"):
        read_json(fifo)
    with pytest.raises(PageError, match="not a regular file"):
        load_page(fifo)


def test_model_refuses_a_fifo_and_dev_zero(fifo):
    with pytest.raises(ModelFileError, match="not a regular file"):
        load_model(fifo)
    if Path("/dev/zero").exists():
        with pytest.raises(ModelFileError, match="not a regular file"):
            load_model("/dev/zero")
        with pytest.raises(PageError, match="not a regular file"):
            load_page("/dev/zero")


def test_size_cap(tmp_path):
    big = tmp_path / "big.json"
    big.write_bytes(b"[" + b"0," * 1000 + b"0]")
    with pytest.raises(ValueError, match="allowed"):
        read_json(big, max_bytes=1000)
    assert read_regular_file(big, max_bytes=5000).startswith(b"[0,")


def test_import_refuses_a_fifo_and_dev_zero(tmp_path, fifo):
    from dxstudio.importers import SourceError, import_pages
    from dxstudio.labelling import import_answers_jsonl

    project = Project.create(tmp_path / "p", "p", ["total"])
    with pytest.raises(SourceError, match="not a regular file"):
        import_pages("json", fifo, project)
    with pytest.raises(LabelError, match="not a regular file"):
        import_answers_jsonl(project, fifo)
    if Path("/dev/zero").exists():
        with pytest.raises(SourceError, match="not a regular file"):
            import_pages("pdf", "/dev/zero", project)


# -- item 5: bounds on boxes and on model sizes -------------------------------------------------------

@pytest.mark.parametrize("box, width", [([0, 0, 1e308, 1e308], 600), ([0, 0, 1e300, 10], 600),
                                        ([-1e308, 0, 10, 10], 600), ([0, 0, 10, 10], 1e308),
                                        ([0, 0, 10, 10], 10 ** 400)],
                         ids=["box-1e308", "box-1e300", "box-negative", "width-1e308", "width-400-digits"])
def test_page_boxes_and_sizes_are_bounded(box, width):
    from dxstudio.engine.page import page_from_dict

    d = {"id": "p", "width": width, "height": 800, "words": [{"text": "a", "box": box}]}
    with pytest.raises(PageError, match="allowed|finite"):
        page_from_dict(d, "p.json")


def test_a_huge_box_page_is_skipped_by_extract(tmp_path, capsys):
    from dxstudio import cli
    from dxstudio.engine.config import size_config
    from dxstudio.engine.container import save_model
    from dxstudio.engine.params import new_params

    cfg = size_config("tiny")
    save_model(tmp_path / "m.safetensors", cfg, new_params(cfg, 7))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"id": "bad", "width": 600, "height": 800,
                               "words": [{"text": "a", "box": [0, 0, 1e308, 1e308]}]}))
    rc = cli.main(["extract", str(tmp_path / "m.safetensors"), str(bad), str(FIXTURES / "pages" / "invoice-1.json")])
    captured = capsys.readouterr()
    assert rc != 0 and str(bad) in captured.err and "Traceback" not in captured.err
    assert '"invoice-1"' in captured.out  # the good page still extracted


@pytest.mark.parametrize("key, value", [("max_chars", 10 ** 12), ("max_words", 10 ** 9), ("pos_buckets", 10 ** 9),
                                        ("max_chars", 257), ("max_words", 4097)])
def test_config_sizes_are_bounded(key, value):
    import dataclasses

    from dxstudio.engine.config import size_config

    cfg = dataclasses.replace(size_config("tiny"), **{key: value})
    with pytest.raises(ValueError, match=f"{key} is {value}, more than"):
        cfg.validate()
    dataclasses.replace(size_config("tiny"), max_words=4096, max_chars=256).validate()


def _rewrite_header(data: bytes, change) -> bytes:
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    change(header)
    raw = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + data[8 + n:]


@pytest.mark.parametrize("key, value", [("max_chars", 10 ** 12), ("max_words", 10 ** 9)])
def test_a_model_file_with_a_huge_size_is_refused(tmp_path, key, value):
    from dxstudio.engine.config import size_config
    from dxstudio.engine.container import model_bytes
    from dxstudio.engine.params import new_params

    cfg = size_config("tiny")
    data = model_bytes(cfg, new_params(cfg, 7))

    def change(h):
        c = json.loads(h["__metadata__"]["config"])
        c[key] = value
        h["__metadata__"]["config"] = json.dumps(c)

    path = tmp_path / "m.safetensors"
    path.write_bytes(_rewrite_header(data, change))
    with pytest.raises(ModelFileError, match=f"{key} is {value}, more than"):
        load_model(path)


# -- item 7: hostile checkpoints are validated like a model file --------------------------------------

def _stopped_run(project, run_dir):
    from dxstudio.tuning import TuneRun

    run = TuneRun.prepare(Project.open(project.root), run_dir, {})
    assert run.total_steps >= 2
    assert run.train(stop_after=1) is False
    return run


def _edit_checkpoint(path, edit_tensors=None, edit_meta=None, meta_text=None):
    from safetensors.numpy import load, save

    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    meta = json.loads(json.loads(data[8:8 + n])["__metadata__"]["checkpoint"])
    tensors = dict(load(data))
    if edit_tensors:
        edit_tensors(tensors)
    if edit_meta:
        edit_meta(meta)
    text = meta_text if meta_text is not None else json.dumps(meta)
    path.write_bytes(save(tensors, metadata={"checkpoint": text}))


def _drop_one(t):
    t.pop(sorted(k for k in t if k.startswith("param/"))[0])


def _int8(t):
    k = sorted(t)[0]
    t[k] = t[k].astype("int8")


def _float64(t):
    k = sorted(t)[0]
    t[k] = t[k].astype("float64")


def _reshape(t):
    k = next(k for k in sorted(t) if t[k].ndim == 2)
    t[k] = t[k][:-1].copy()


def _nan(t):
    import numpy as np

    k = sorted(t)[0]
    t[k] = t[k].copy()
    t[k].flat[0] = np.nan


def _extra(t):
    import numpy as np

    t["param/evil"] = np.zeros(3, np.float32)


CHECKPOINT_CASES = {
    "no-step": dict(edit_meta=lambda m: m.pop("step")),
    "step-text": dict(edit_meta=lambda m: m.update(step="3")),
    "step-negative": dict(edit_meta=lambda m: m.update(step=-1)),
    "step-1e9": dict(edit_meta=lambda m: m.update(step=10 ** 9)),
    "metadata-list": dict(meta_text="[1, 2, 3]"),
    "metadata-deep": dict(meta_text="[" * 100000 + "]" * 100000),
    "metadata-not-json": dict(meta_text="{step"),
    "missing-tensor": dict(edit_tensors=_drop_one),
    "int8-tensor": dict(edit_tensors=_int8),
    "float64-tensor": dict(edit_tensors=_float64),
    "wrong-shape": dict(edit_tensors=_reshape),
    "nan-tensor": dict(edit_tensors=_nan),
    "extra-tensor": dict(edit_tensors=_extra),
}


@pytest.mark.parametrize("case", sorted(CHECKPOINT_CASES))
def test_a_hostile_checkpoint_is_refused_with_one_line(small_project, tmp_path, case):
    from dxstudio.tuning import TuneError, TuneRun

    run_dir = tmp_path / "run"
    _stopped_run(small_project, run_dir)
    ckpt = run_dir / "checkpoint.safetensors"
    _edit_checkpoint(ckpt, **CHECKPOINT_CASES[case])
    resumed = TuneRun.prepare(Project.open(small_project.root), run_dir, {})
    with pytest.raises(TuneError) as e:
        resumed.train(resume=True)
    assert str(e.value).startswith(str(ckpt)) and "\n" not in str(e.value)
    assert not (run_dir / "model.safetensors").exists()


def test_a_checkpoint_that_is_a_fifo_or_not_safetensors(small_project, tmp_path):
    from dxstudio.tuning import TuneError, read_checkpoint

    run_dir = tmp_path / "run"
    _stopped_run(small_project, run_dir)
    ckpt = run_dir / "checkpoint.safetensors"
    assert read_checkpoint(ckpt, tensors=False)[0]["step"] == 1
    ckpt.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00" + b"[" * 16)
    with pytest.raises(TuneError, match="not a readable checkpoint"):
        read_checkpoint(ckpt)
    if hasattr(os, "mkfifo"):
        ckpt.unlink()
        os.mkfifo(ckpt)
        with pytest.raises(TuneError, match="not a regular file"):
            read_checkpoint(ckpt)


def test_a_good_checkpoint_still_resumes(small_project, tmp_path):
    from dxstudio.tuning import TuneRun

    run_dir = tmp_path / "run"
    _stopped_run(small_project, run_dir)
    resumed = TuneRun.prepare(Project.open(small_project.root), run_dir, {})
    assert resumed.train(resume=True)


# -- item 11: a diverging run stops at the first non-finite loss ----------------------------------------

@pytest.mark.parametrize("setting", ["lr", "weight_decay", "backbone_scale"])
@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
def test_a_huge_setting_stops_at_the_first_non_finite_loss(small_project, tmp_path, setting):
    from dxstudio.tuning import TuneError, TuneRun, read_checkpoint

    run_dir = tmp_path / "run"
    run = TuneRun.prepare(Project.open(small_project.root), run_dir, {"epochs": 6, "checkpoint_every": 1})
    assert run.train(stop_after=1) is False  # a good checkpoint at step 1
    good = (run_dir / "checkpoint.safetensors").read_bytes()
    bad = TuneRun.prepare(Project.open(small_project.root), tmp_path / "bad",
                          {"epochs": 6, "checkpoint_every": 1, setting: 1e30})
    events = []
    with pytest.raises(TuneError, match="training diverged") as e:
        bad.train(events.append)
    msg = str(e.value)
    assert "\n" not in msg and "1e+30" in msg
    steps = [ev.step for ev in events if ev.kind == "step"]
    assert len(steps) < bad.total_steps  # it stopped early, not after a whole run on NaN
    assert not (tmp_path / "bad" / "model.safetensors").exists()
    if (tmp_path / "bad" / "checkpoint.safetensors").exists():  # every checkpoint kept is a good one
        read_checkpoint(tmp_path / "bad" / "checkpoint.safetensors")
        resumed = TuneRun.prepare(Project.open(small_project.root), tmp_path / "bad",
                                  {"epochs": 6, "checkpoint_every": 1, setting: 1e30})
        with pytest.raises(TuneError, match="training diverged"):
            resumed.train(resume=True)
    rows = [json.loads(l) for l in (tmp_path / "bad" / "metrics.jsonl").read_text().splitlines()] \
        if (tmp_path / "bad" / "metrics.jsonl").exists() else []
    assert all(r.get("loss") is None or r["loss"] == r["loss"] for r in rows)  # no NaN logged
    # the good run in another folder is untouched
    assert (run_dir / "checkpoint.safetensors").read_bytes() == good


# -- item 14: a full disk names the file ---------------------------------------------------------------

def _disk_full(*args, **kwargs):
    import errno

    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_names_the_file_and_keeps_the_old_version(tmp_path, monkeypatch):
    from dxstudio.fsutil import DiskFullError, write_bytes_atomic, write_json_atomic

    path = tmp_path / "labels" / "p.json"
    write_json_atomic(path, {"old": 1})
    monkeypatch.setattr(os, "fsync", _disk_full)
    with pytest.raises(DiskFullError) as e:
        write_bytes_atomic(path, b'{"new": 2}')
    assert str(e.value).startswith(str(path)) and "disk is full" in str(e.value)
    assert isinstance(e.value, OSError)
    assert json.loads(path.read_text()) == {"old": 1}
    assert [p.name for p in path.parent.iterdir()] == ["p.json"]  # no temp file left


def test_tune_on_a_full_disk_is_one_line(small_project, tmp_path, monkeypatch, capsys):
    from dxstudio import cli

    monkeypatch.setattr(os, "fsync", _disk_full)
    rc = cli.main(["tune", str(small_project.root), "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err
    line = [l for l in err.splitlines() if "disk is full" in l]
    assert line and str(tmp_path / "run") in line[0]


def test_metrics_on_a_full_disk_names_the_file(small_project, tmp_path, monkeypatch):
    import dxstudio.tuning.metrics as run_module  # the module that appends metrics.jsonl
    from dxstudio.fsutil import DiskFullError
    from dxstudio.tuning import TuneRun

    real_open = open

    def full_open(path, mode="r", *a, **kw):
        if "a" in mode:
            _disk_full()
        return real_open(path, mode, *a, **kw)

    monkeypatch.setattr(run_module, "open", full_open, raising=False)
    run = TuneRun.prepare(Project.open(small_project.root), tmp_path / "run", {})
    with pytest.raises(DiskFullError, match="metrics.jsonl: cannot write: the disk is full"):
        run.train()


def test_import_and_label_on_a_full_disk_are_one_line(small_project, tmp_path, monkeypatch, capsys):
    from dxstudio import cli

    src = tmp_path / "pages"
    src.mkdir()
    page = json.loads((FIXTURES / "pages" / "invoice-1.json").read_text())
    (src / "invoice-1.json").write_text(json.dumps(page))
    (tmp_path / "a.jsonl").write_text(json.dumps({"id": "inv-0", "answers": {"total": "1,440.00"}}) + "\n")
    monkeypatch.setattr(os, "fsync", _disk_full)
    for argv, name in ((["import", "json", str(src), str(small_project.root)], "import"),
                       (["label", str(small_project.root), "--jsonl", str(tmp_path / "a.jsonl")], "label")):
        rc = cli.main(argv)
        err = capsys.readouterr().err
        assert rc == 2 and "Traceback" not in err, err
        assert f"dxstudio {name}: " in err and "disk is full" in err and str(small_project.root) in err


def test_the_step_alone_is_read_from_the_header(small_project, tmp_path):
    from dxstudio.tuning import TuneError, read_checkpoint

    run_dir = tmp_path / "run"
    _stopped_run(small_project, run_dir)
    ckpt = run_dir / "checkpoint.safetensors"
    data = ckpt.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    ckpt.write_bytes(data[:8 + n])  # the tensors cut off: the step is still there
    assert read_checkpoint(ckpt, tensors=False)[0]["step"] == 1
    with pytest.raises(TuneError, match="not a readable checkpoint"):
        read_checkpoint(ckpt)
    if hasattr(os, "mkfifo"):
        ckpt.unlink()
        os.mkfifo(ckpt)
        with pytest.raises(TuneError, match="not a regular file"):
            read_checkpoint(ckpt, tensors=False)
