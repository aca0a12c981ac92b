"""A tuned model's answers on one held-out page, for the Results screen, Qt-free.

    model = load_run_model(model_path, kernels, settings)   # once per shown run
    view = heldout_answers(project, model, page_id)         # HeldOutAnswers

`settings` are the run's stored settings (report.json's run.settings, settings.json's): the
page's targets are built with the run's absent_value and repeats, as the run built them, not
with today's defaults (a run tuned with absent_value = ignore shows the page it kept).

The page's outcomes are the scorer's (scoring.field_outcome on the same label words and the
same prediction the report counted), so what the screen marks right and wrong is what the
report's numbers count. The UI only draws the result.
"""
from __future__ import annotations

from dataclasses import dataclass

from dxstudio.engine.container import load_model
from dxstudio.engine.extract import DEFAULT_DECODING, model_decoding, predict_page, reading_keywords
from dxstudio.engine.model import to_runtime
from dxstudio.grounding import Excluded, page_targets
from dxstudio.tuning.pages import run_targets_settings
from dxstudio.tuning.scoring import CORRECT, field_outcome

# outcomes that have a value on at least one side: the page shows a mark for them
_MARKED = {"correct", "wrong", "missed", "spurious"}


@dataclass
class RunModel:
    cfg: object
    params: object  # runtime layout
    kernels: str
    decoding: str = DEFAULT_DECODING  # how its values are read (engine/extract.py model_decoding)
    keywords: dict | None = None  # where (engine/extract.py reading_keywords; None: the fields' names)
    # how the run built its pages' targets (run_targets_settings): the held-out page is built the same way
    absent_value: str = "exclude"
    repeats: str = "o"


@dataclass
class HeldOutAnswers:
    """A held-out page for the results screen: tags are the labels' (dxstudio.grounding
    page_targets), answers {field: FieldValue | None} the model's (None where the field is
    unscored on this page), outcomes {field: scorer outcome} of every field,
    marks {field: True right | False wrong} where either side has a value."""
    page: object
    tags: list
    statuses: dict
    answers: dict
    outcomes: dict
    marks: dict


def load_run_model(model_path, kernels: str, settings: dict | None = None) -> RunModel:
    """A run's model.safetensors, ready to predict (ModelFileError naming the file); settings:
    the run's stored settings (run_targets_settings)."""
    loaded = load_model(model_path)
    absent, repeats = run_targets_settings(settings)
    return RunModel(loaded.cfg, to_runtime(loaded.params), kernels, model_decoding(loaded.thresholds),
                    reading_keywords(loaded.keywords, loaded.cfg.fields), absent, repeats)


def heldout_answers(project, model: RunModel, page_id: str) -> HeldOutAnswers:
    """One held-out page as the run's model answers it now, against its labels after review.
    Raises ValueError/OSError (naming the file) when the page or its label file is broken or
    the page is excluded now."""
    cfg = model.cfg
    page = project.load_page(page_id)
    labels = project.load_labels(page_id)
    targets = page_targets(page, labels, list(cfg.fields), cfg.max_words, repeats=model.repeats,
                           absent=model.absent_value)
    if isinstance(targets, Excluded):
        raise ValueError(f"{project.label_path(page_id)}: the page is excluded now ({targets.reason})")
    pred = predict_page(cfg, model.params, page, model.kernels, model.decoding, model.keywords)
    answers, outcomes, marks = {}, {}, {}
    for f in cfg.fields:
        if f in targets.unscored:  # counts nowhere
            answers[f], outcomes[f] = None, "unscored"
            continue
        v = pred.fields.get(f)
        answers[f] = v
        outcome, _ = field_outcome(tuple(targets.field_words.get(f, ())),
                                   (v.words, v.confidence) if v is not None else None)
        outcomes[f] = outcome
        if outcome in _MARKED:
            marks[f] = outcome == CORRECT
    statuses = {f: g.get("status") for f, g in labels.grounding.items()}
    return HeldOutAnswers(page, [int(t) for t in targets.tags], statuses, answers, outcomes, marks)



