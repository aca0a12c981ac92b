"""bench/funsd_finetune.py on tiny synthetic FUNSD-shaped forms (no ../shared/data needed)."""
import json
from pathlib import Path

from dxstudio.engine.container import load_model
from tests.conftest import load_script

ROOT = Path(__file__).resolve().parents[1]


ff = load_script(ROOT / "bench" / "funsd_finetune.py")


def _form(seed: int) -> dict:
    """A header, three question/answer pairs (linked) and an unlinked 'other' line."""
    ents, eid, y = [], 0, 10

    def ent(label, texts, x, y, linking=()):
        nonlocal eid
        words = [{"text": t, "box": [x + 70 * i, y, x + 70 * i + 60, y + 12]} for i, t in enumerate(texts)]
        ents.append({"id": eid, "label": label, "words": words, "linking": [list(p) for p in linking],
                     "text": " ".join(texts), "box": [x, y, x + 70 * len(texts), y + 12]})
        eid += 1
        return eid - 1

    ent("header", ["ORDER", "FORM", str(seed)], 100, y)
    for k, (q, a) in enumerate([("Date:", [f"0{seed}/12/98"]), ("Name:", ["J.", "Smith"]), ("Total:", [f"{seed}.50"])]):
        y += 30
        qi = eid
        ent("question", [q], 20, y, [(qi, qi + 1)])
        ent("answer", a, 120, y, [(qi, qi + 1)])
    ent("other", ["page", str(seed)], 20, y + 40)
    return {"form": ents}


def _data(tmp_path, n_train=3, n_test=2, bad=False):
    for split, n in (("training_data", n_train), ("testing_data", n_test)):
        d = tmp_path / split / "annotations"
        d.mkdir(parents=True)
        for i in range(n):
            (d / f"f{i}.json").write_text(json.dumps(_form(i + 1 + (10 if split == "testing_data" else 0))))
    if bad:
        (tmp_path / "training_data" / "annotations" / "zz_bad.json").write_text("{not json")
    return tmp_path


def _run(data, tmp_path, name, *extra):
    report = tmp_path / f"{name}.json"
    out = tmp_path / f"{name}.safetensors"
    rc = ff.main(["--new", "--size", "tiny", "--steps", "4", "--warmup", "1", "--lr", "0.01", "--batch", "4",
                  "--data", str(data), "--out", str(out), "--report", str(report), "--quiet", *extra])
    assert rc == 0
    return json.loads(report.read_text()), out


def test_form_doc_points_answers_at_their_question(tmp_path):
    data = _data(tmp_path, n_train=1, n_test=1)
    doc = ff.form_doc(data / "training_data" / "annotations" / "f0.json")
    words = [w.text for w in doc.page.words]
    assert doc.doc_type == "form"
    i = words.index("Smith")
    assert doc.roles[i] == "value" and doc.kv[i] == words.index("Name:")
    assert doc.roles[words.index("Name:")] == "key" and doc.kv[words.index("Name:")] == words.index("Name:")
    assert doc.roles[words.index("ORDER")] == "header" and doc.kv[words.index("page")] == words.index("page")


def test_finetune_report_shape_loss_moves_and_tag_head_stays(tmp_path, capsys):
    data = _data(tmp_path, bad=True)
    rep, out = _run(data, tmp_path, "d1")
    assert rep["training_forms"] == 3 and rep["testing_forms"] == 2 and rep["windows"] == 3
    assert len(rep["skipped"]) == 1 and "zz_bad.json" in rep["skipped"][0]  # named, the rest went on
    for k in ("before", "after"):
        r = rep[k]
        assert set(r) == {"words", "role_accuracy", "role_recall", "kv_links", "kv_accuracy"}
        assert set(r["role_recall"]) == {"other", "key", "value", "header"}
        assert r["words"] == 2 * 12 and r["kv_links"] == 2 * 4  # 4 linked answer words a form
        assert 0.0 <= r["role_accuracy"] <= 1.0 and 0.0 <= r["kv_accuracy"] <= 1.0
    assert rep["last_loss"] < rep["first_loss"]  # it trained
    assert rep["settings"]["steps"] == 4 and rep["input_layout"] == 2
    printed = capsys.readouterr().out.strip().splitlines()
    assert json.loads(printed[-1])["after"] == rep["after"]
    # tag loss 0: the tag head keeps its drawn rows, the role and pointer heads moved
    import dxstudio.engine.params as P
    from dxstudio.corpus.generic import GENERIC_FIELDS
    from dxstudio.engine.config import size_config
    start = P.new_params(size_config("tiny", GENERIC_FIELDS, input_layout=2), 1)
    tuned = load_model(out).params
    tag = [n for n in start if n.startswith("tag_head")]
    role = [n for n in start if n.startswith("role_head")]
    rel = [n for n in start if n.startswith(("rel_q", "rel_k"))]
    assert tag and role and rel
    assert all((start[n] == tuned[n]).all() for n in tag)
    assert any((start[n] != tuned[n]).any() for n in role)
    assert any((start[n] != tuned[n]).any() for n in rel)


def test_same_bytes_at_degree_2_and_missing_data_is_one_line(tmp_path, capsys):
    data = _data(tmp_path)
    _, out1 = _run(data, tmp_path, "d1")
    _, out2 = _run(data, tmp_path, "d2", "--degree", "2")
    assert out1.read_bytes() == out2.read_bytes()
    assert ff.main(["--new", "--size", "tiny", "--data", str(tmp_path / "nowhere"), "--quiet"]) == 2
    assert "nowhere" in capsys.readouterr().err
