"""Careless and hostile import sources (issue 9, items 4, 8 and 9): one clear line naming the
file, the other files imported, nothing read from outside the source."""
from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import pytest

from dxstudio.importers import SourceError, image_size, import_pages
from dxstudio.project import Project

BOX = "10,10,100,10,100,30,10,30,SHOP NAME\n10,50,100,50,100,70,10,70,TOTAL 12.50\n"


def sroie_folder(root: Path, stems=("a", "b", "c")) -> Path:
    (root / "box").mkdir(parents=True)
    (root / "key").mkdir()
    for s in stems:
        (root / "box" / f"{s}.csv").write_text(BOX)
        (root / "key" / f"{s}.json").write_text(json.dumps({"company": "SHOP NAME", "total": "12.50"}))
    return root


@pytest.fixture
def project(tmp_path):
    return Project.create(tmp_path / "proj", "p")


@pytest.mark.parametrize("key", [
    '{"total": ' + "[" * 100000 + "]" * 100000 + "}",
    '{"total": ' + "9" * 5000 + "}",
    '{"total": "12\\ud800"}',
])
def test_hostile_sroie_key_is_one_error_and_the_rest_goes_on(tmp_path, project, key):
    src = sroie_folder(tmp_path / "src")
    (src / "key" / "b.json").write_text(key)
    report = import_pages("sroie", src, project)
    assert sorted(report.added) == ["a", "b", "c"] and report.answers == 2
    assert [f for f, _ in report.errors] == [str(src / "key" / "b.json")]
    assert report.errors[0][1].startswith(str(src / "key" / "b.json"))
    assert project.load_labels("a").answers["total"] == "12.50"


def test_non_utf8_image_sizes_csv_is_reported_and_the_pages_still_come(tmp_path, project):
    src = sroie_folder(tmp_path / "src")
    (src / "image_sizes.csv").write_bytes(b"id,width,height\na,\xff\xfe300,400\n")
    report = import_pages("sroie", src, project)
    assert sorted(report.added) == ["a", "b", "c"]
    assert report.errors == [(str(src / "image_sizes.csv"), f"{src / 'image_sizes.csv'}: not UTF-8 text (byte 18)")]


@pytest.mark.parametrize("data", [
    b"\xff\xd8",
    b"\xff\xd8\xff",
    b"\xff\xd8\xff\xff\xff",
    b"\xff\xd8\xff\xe0\x00",
    b"\xff\xd8\xff\xe0\x00\x10JFIF",
    b"\xff\xd8\xff\xe0\x00\x00\xff\xe0\x00\x01",
    b"\xff\xd8\xff\xc0\x00\x11\x08\x01",
    b"\xff\xd8\xff\xd9",
])
def test_truncated_jpeg_gives_no_size_and_no_traceback(tmp_path, data):
    path = tmp_path / "x.jpg"
    path.write_bytes(data)
    assert image_size(path) is None


def test_whole_jpeg_header_still_reads(tmp_path):
    path = tmp_path / "x.jpg"
    sof = b"\xff\xc0" + struct.pack(">HBHH", 17, 8, 480, 640) + b"\x03" + b"\x00" * 9
    path.write_bytes(b"\xff\xd8\xff\xe0\x00\x04ab" + sof)
    assert image_size(path) == (640, 480)


def test_sroie_with_a_truncated_jpeg_imports(tmp_path, project):
    src = sroie_folder(tmp_path / "src", ["a"])
    (src / "img").mkdir()
    (src / "img" / "a.jpg").write_bytes(b"\xff\xd8\xff\xff")
    report = import_pages("sroie", src, project)
    assert report.added == ["a"] and not report.errors


def cord_file(path: Path, line: dict) -> Path:
    good = {"category": "total.total_price", "words": [
        {"text": "12.50", "quad": {"x1": 10, "y1": 10, "x2": 50, "y2": 10, "x3": 50, "y3": 30, "x4": 10, "y4": 30},
         "is_key": 0}]}
    path.write_text(json.dumps({"valid_line": [good, line], "meta": {"image_size": {"width": 100, "height": 100}}}))
    return path


@pytest.mark.parametrize("line", [{"words": 5}, {"words": "abc"}, {"words": {"text": "x"}},
                                  {"category": 5, "words": []}])
def test_cord_with_a_malformed_line_is_one_error(tmp_path, project, line):
    src = tmp_path / "cord" / "json"
    src.mkdir(parents=True)
    cord_file(src / "receipt_00000.json", line)
    cord_file(src / "receipt_00001.json", {"category": "menu.nm", "words": []})
    report = import_pages("cord", tmp_path / "cord", project)
    assert report.added == ["receipt_00001"]
    assert [f for f, _ in report.errors] == [str(src / "receipt_00000.json")]
    assert "line 1" in report.errors[0][1]


def test_cord_with_a_huge_image_size_is_one_error(tmp_path, project):
    src = tmp_path / "cord"
    src.mkdir()
    p = cord_file(src / "receipt_00000.json", {"words": []})
    d = json.loads(p.read_text())
    p.write_text(json.dumps(d).replace('"width": 100', '"width": ' + "9" * 400))
    report = import_pages("cord", src, project)
    assert report.added == [] and report.errors[0][0] == str(p)


# -- item 9: links out of the source are not followed --------------------------------------------------

@pytest.fixture
def secret(tmp_path):
    path = tmp_path / "outside" / "passwd"
    path.parent.mkdir()
    path.write_text("root:x:0:0:root:/root:/bin/bash\n")
    return path


def test_a_link_out_of_a_sroie_source_is_not_followed(tmp_path, project, secret):
    src = sroie_folder(tmp_path / "src", ["a"])
    os.symlink(secret, src / "box" / "evil.csv")
    report = import_pages("sroie", src, project)
    assert report.added == ["a"]
    assert [f for f, _ in report.errors] == [str(src / "box" / "evil.csv")]
    msg = report.errors[0][1]
    assert "outside the import source" in msg and "root:x" not in msg


def test_a_linked_key_or_image_sizes_is_not_followed(tmp_path, project, secret):
    src = sroie_folder(tmp_path / "src", ["a", "b"])
    (src / "key" / "b.json").unlink()
    os.symlink(secret, src / "key" / "b.json")
    os.symlink(secret, src / "image_sizes.csv")
    report = import_pages("sroie", src, project)
    assert sorted(report.added) == ["a", "b"]
    errors = dict(report.errors)
    assert set(errors) == {str(src / "key" / "b.json"), str(src / "image_sizes.csv")}
    assert all("outside the import source" in m and "root:x" not in m for m in errors.values())


def test_a_linked_folder_out_of_a_json_source_is_not_followed(tmp_path, project, secret):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    page = {"id": "stolen", "width": 10, "height": 10, "words": [{"text": "a", "box": [0, 0, 1, 1]}]}
    (outside / "stolen.json").write_text(json.dumps(page))
    src = tmp_path / "src"
    src.mkdir()
    (src / "ok.json").write_text(json.dumps(dict(page, id="ok")))
    os.symlink(outside / "stolen.json", src / "link.json")
    os.symlink(secret, src / "passwd.json")
    report = import_pages("json", src, project)
    assert report.added == ["ok"]
    assert sorted(f for f, _ in report.errors) == [str(src / "link.json"), str(src / "passwd.json")]
    assert all("root:x" not in m for _, m in report.errors)


def test_a_link_inside_the_source_is_fine(tmp_path, project):
    src = sroie_folder(tmp_path / "src", ["a"])
    os.symlink(src / "box" / "a.csv", src / "box" / "b.csv")
    report = import_pages("sroie", src, project)
    assert sorted(report.added) == ["a", "b"] and not report.errors


def test_a_linked_cord_file_and_funsd_image_are_not_followed(tmp_path, project, secret):
    src = tmp_path / "cord"
    src.mkdir()
    cord_file(src / "receipt_00000.json", {"words": []})
    os.symlink(secret, src / "receipt_00001.json")
    report = import_pages("cord", src, project)
    assert report.added == ["receipt_00000"] and [f for f, _ in report.errors] == [str(src / "receipt_00001.json")]
    funsd = tmp_path / "funsd"
    (funsd / "annotations").mkdir(parents=True)
    (funsd / "images").mkdir()
    form = {"form": [{"words": [{"text": "hello", "box": [1, 1, 20, 10]}]}]}
    (funsd / "annotations" / "f1.json").write_text(json.dumps(form))
    os.symlink(secret, funsd / "images" / "f1.png")
    report = import_pages("funsd", funsd, project)
    assert report.added == [] and "outside the import source" in report.errors[0][1]
