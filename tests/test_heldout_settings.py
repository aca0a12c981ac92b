"""The Results screen's held-out answers (dxstudio/tuning/heldout.py) build a page's targets with
the run's own absent_value (and repeats), read from the run's stored settings, not with the
defaults of today: a run tuned with absent_value = ignore shows the page it kept."""
import pytest

from dxstudio.labelling import apply_answers
from dxstudio.project import Project
from dxstudio.tuning.heldout import heldout_answers, load_run_model, run_targets_settings
from dxstudio.tuning.run import TuneRun


def _held_out_item_page(root) -> str:
    """A page an ignore run holds out whose text value `item` is set."""
    project = Project.open(root)
    probe = TuneRun.prepare(project, root / "runs" / "probe", {"absent_value": "ignore"})
    ids = [pid for pid, _, _ in probe.heldout_pages if project.load_labels(pid).answers.get("item")]
    assert ids, "no held-out page with an item"
    return ids[0]


def test_a_run_tuned_with_ignore_shows_the_page_it_kept(receipts_project):
    root = receipts_project
    pid = _held_out_item_page(root)
    project = Project.open(root)
    page = project.load_page(pid)
    answers = dict(project.load_labels(pid).answers)
    # the item as the labelling model would give it with a word the OCR did not read: its
    # pieces are on the page, the value is not (grounding: absent)
    answers["item"] = answers["item"] + " QZXWV"
    apply_answers(project, pid, answers, "llm", page=page)

    run = TuneRun.prepare(Project.open(root), root / "runs" / "ign", {"absent_value": "ignore"})
    assert pid in [r[0] for r in run.heldout_pages]  # kept (item unscored), and held out
    run.train()
    report = run.finish()
    row = next(r for r in report["pages"] if r["id"] == pid)
    assert row["outcomes"]["item"] == "unscored"
    assert report["run"]["settings"]["absent_value"] == "ignore"

    model_path = root / "runs" / "ign" / "model.safetensors"
    # the run's stored settings: the page is shown as the report scored it
    model = load_run_model(model_path, "fast", report["run"]["settings"])
    assert (model.absent_value, model.repeats) == ("ignore", report["run"]["settings"]["repeats"])
    shown = heldout_answers(Project.open(root), model, pid)
    assert shown.outcomes["item"] == "unscored" and shown.answers["item"] is None and "item" not in shown.marks
    for name, outcome in row["outcomes"].items():
        assert shown.outcomes[name] == outcome, (name, outcome)
    # built with the other rule, the same page is excluded: what the screen showed before
    with pytest.raises(ValueError, match="the page is excluded now .*item"):
        heldout_answers(Project.open(root), load_run_model(model_path, "fast", {"absent_value": "exclude"}), pid)


def test_settings_missing_from_an_old_run_are_the_rules_it_ran_with():
    # a run stored before absent_value / repeats existed was built with exclude and o
    assert run_targets_settings(None) == ("exclude", "o")
    assert run_targets_settings({"kernels": "fast"}) == ("exclude", "o")
    assert run_targets_settings({"absent_value": "ignore", "repeats": "ignore"}) == ("ignore", "ignore")
