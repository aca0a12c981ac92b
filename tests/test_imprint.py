"""Setting head_init = imprint (the default) (dxstudio/tuning/imprint.py): the tag rows of fields no generic
class matches start from the base's final states over the training pages only; matched rows,
the O row and the backbone are unchanged; the same bytes at any degree and after resume."""
from __future__ import annotations


import numpy as np
import pytest

from dxstudio.corpus.generic import match_field
from dxstudio.engine.container import load_model
from dxstudio.project import Project
from dxstudio.tuning import TuneRun
from dxstudio.tuning import imprint as imprint_mod
from dxstudio.tuning.settings import TuneError
from tests.conftest import rename_project_fields

RENAMES = {"cash": "wibble", "change": "zorp"}  # names no generic class matches


@pytest.fixture
def custom_project(receipts_project):
    """The receipts project with cash and change renamed to names that match no class."""
    rename_project_fields(receipts_project, RENAMES)
    p = Project.open(receipts_project)
    for new in RENAMES.values():
        assert match_field(new) is None
    return receipts_project


def _rows(run, names):
    fields = list(run.cfg.fields)
    w, b = run.start_params["tag_head.weight"], run.start_params["tag_head.bias"]
    return {n: (w[1 + 2 * fields.index(n): 3 + 2 * fields.index(n)].copy(),
                b[1 + 2 * fields.index(n): 3 + 2 * fields.index(n)].copy()) for n in names}


def test_imprint_changes_only_the_unmatched_rows_from_training_pages_only(custom_project, tiny_base, tmp_path,
                                                                           monkeypatch):
    seen = []
    real = imprint_mod.final_states

    def spy(cfg, params, examples, kernels):
        seen.append([id(e.inputs) for e in examples])
        return real(cfg, params, examples, kernels)

    monkeypatch.setattr(imprint_mod, "final_states", spy)
    project = Project.open(custom_project)
    match = TuneRun.prepare(project, tmp_path / "m", {"epochs": 1, "head_init": "match"}, model_path=tiny_base)
    assert not seen  # match: no forward, the drawn rows as before
    imp = TuneRun.prepare(Project.open(custom_project), tmp_path / "i", {"epochs": 1, "head_init": "imprint"},
                          model_path=tiny_base)
    # the forward saw exactly the training pages' windows, none of the held-out ones
    assert imp.heldout_pages and seen == [[id(e.inputs) for e in imp.examples]]
    assert len(imp.examples) == len(imp.train_pages)
    assert {p for p, _, _ in imp.train_pages}.isdisjoint({p for p, _, _ in imp.heldout_pages})
    matched = [f for f in project.field_names if f not in RENAMES.values()]
    m_rows, i_rows = _rows(match, project.field_names), _rows(imp, project.field_names)
    for f in matched:  # matched fields keep the base's rows
        np.testing.assert_array_equal(m_rows[f][0], i_rows[f][0])
        np.testing.assert_array_equal(m_rows[f][1], i_rows[f][1])
    for key in ("tag_head.weight", "tag_head.bias"):
        np.testing.assert_array_equal(match.start_params[key][0], imp.start_params[key][0])  # O row
    for key in match.start_params:
        if not key.startswith("tag_head."):
            np.testing.assert_array_equal(match.start_params[key], imp.start_params[key])
    # the unmatched fields that have B words on the training pages got new B rows, of the base's norm
    assert set(imp.imprinted) == set(RENAMES.values())
    bw = np.asarray(load_model(tiny_base).params["tag_head.weight"], np.float64)
    want_norm = np.mean(np.linalg.norm(bw[1:], axis=1))
    for f in RENAMES.values():
        assert imp.imprinted[f]["B"] > 0
        assert not np.array_equal(m_rows[f][0][0], i_rows[f][0][0])
        assert np.linalg.norm(i_rows[f][0][0].astype(np.float64)) == pytest.approx(want_norm, rel=1e-5)
    # a fold's run imprints from that fold's training pages only
    seen.clear()
    fold = TuneRun.prepare(Project.open(custom_project), tmp_path / "f", {"epochs": 1, "head_init": "imprint"},
                           model_path=tiny_base, fold=(0, 2))
    assert fold.heldout_pages and seen == [[id(e.inputs) for e in fold.examples]]
    assert {p for p, _, _ in fold.train_pages}.isdisjoint({p for p, _, _ in fold.heldout_pages})
    # the report says what was imprinted; the fingerprint tells the two apart
    assert match.fingerprint != imp.fingerprint


def test_imprint_gives_the_same_bytes_at_degree_1_and_2_and_after_resume(custom_project, tiny_base, tmp_path):
    s = {"epochs": 2, "head_init": "imprint", "checkpoint_every": 2}
    one = TuneRun.prepare(Project.open(custom_project), tmp_path / "one", {**s, "degree": 1}, model_path=tiny_base)
    assert one.train()
    rep = one.finish()
    assert set(rep["run"]["imprinted"]) == set(RENAMES.values())
    full = (tmp_path / "one" / "model.safetensors").read_bytes()
    two = TuneRun.prepare(Project.open(custom_project), tmp_path / "two", {**s, "degree": 2}, model_path=tiny_base)
    ref = TuneRun.prepare(Project.open(custom_project), tmp_path / "ref", {**s, "kernels": "reference"},
                          model_path=tiny_base)
    for key in ("tag_head.weight", "tag_head.bias"):  # the same rows at any degree, on either kernel path
        np.testing.assert_array_equal(one.start_params[key], two.start_params[key])
        np.testing.assert_array_equal(one.start_params[key], ref.start_params[key])
    assert two.total_steps > 2
    assert two.train(stop_after=2) is False
    resumed = TuneRun.prepare(Project.open(custom_project), tmp_path / "two", {**s, "degree": 1},
                              model_path=tiny_base)
    assert resumed.train(resume=True)
    resumed.finish()
    assert (tmp_path / "two" / "model.safetensors").read_bytes() == full
    # and it is not the match run's model
    m = TuneRun.prepare(Project.open(custom_project), tmp_path / "m", {"epochs": 2, "checkpoint_every": 2,
                                                                       "head_init": "match"}, model_path=tiny_base)
    assert m.train()
    m.finish()
    assert (tmp_path / "m" / "model.safetensors").read_bytes() != full


def test_imprint_is_the_default_and_a_new_random_model_is_not_imprinted(custom_project, tiny_base, tmp_path):
    # the default imprints a custom schema's fields from a base
    d = TuneRun.prepare(Project.open(custom_project), tmp_path / "dflt", {}, model_path=tiny_base)
    assert set(d.imprinted) == set(RENAMES.values())
    # a new random model's states carry nothing learnt: its start and fingerprint are match's
    new_i = TuneRun.prepare(Project.open(custom_project), tmp_path / "ni", {"start": "new"})
    new_m = TuneRun.prepare(Project.open(custom_project), tmp_path / "nm", {"start": "new", "head_init": "match"})
    assert new_i.start_source.startswith("new ") and new_i.imprinted == {}
    assert new_i.fingerprint == new_m.fingerprint


def test_nothing_imprinted_keeps_the_seeds_fingerprint_and_a_bad_value_is_named(receipts_project, tiny_base,
                                                                                 tmp_path):
    # every field of the receipts project matches a class: nothing to imprint; the start and the
    # fingerprint are match's (the seed's)
    a = TuneRun.prepare(Project.open(receipts_project), tmp_path / "a", {}, model_path=tiny_base)
    b = TuneRun.prepare(Project.open(receipts_project), tmp_path / "b", {"head_init": "match"}, model_path=tiny_base)
    assert a.imprinted == {} and a.fingerprint == b.fingerprint
    for key in a.start_params:
        np.testing.assert_array_equal(a.start_params[key], b.start_params[key])
    with pytest.raises(TuneError, match="setting head_init must be imprint or match, not 'prototype'"):
        TuneRun.prepare(Project.open(receipts_project), tmp_path / "c", {"head_init": "prototype"},
                        model_path=tiny_base)


def test_imprint_rows_leave_a_field_without_words_alone():
    from types import SimpleNamespace

    cfg = SimpleNamespace(fields=("a", "b"))
    w = np.arange(5 * 4, dtype=np.float32).reshape(5, 4)
    b = np.arange(5, dtype=np.float32)
    out_w, out_b, counts = imprint_mod.imprint_rows(cfg, {"tag_head.weight": w, "tag_head.bias": b}, [], [0, 1],
                                                    "fast", w, b)
    np.testing.assert_array_equal(out_w, w)
    np.testing.assert_array_equal(out_b, b)
    assert counts == {}
