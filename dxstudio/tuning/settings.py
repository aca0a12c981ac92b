"""The tuning settings, declared once.

Every setting of fine-tuning (`dxstudio tune`, `dxstudio eval`, the app's Train tab) and of
pretraining (`dxstudio pretrain`) is one row of SETTINGS: its name, kind, default, accepted
range, help text, whether the run's fingerprint covers it, the commands it belongs to and,
when a person may change it in the app, its label in the Train form. A row of both commands
lists both; a setting whose default differs between them (pretraining's epochs, batch, lr, ...)
is a row of each, with the same name. Everything else is generated from this table:

    rows(c), defaults(c)      the rows and {name: default} of command c ("tune" or "pretrain")
    DEFAULTS                  defaults("tune")
    NOT_FINGERPRINTED         the names the fingerprint leaves out (they cannot change the bytes)
    resolve_settings(...)     defaults < dxproject.json "settings" < overrides, validated; an
                              unknown name is refused with the nearest known one
    add_arguments(parser, c)  the argparse options of command c (defaults shown in --help)
    overrides_from_args(a, c) the options a person gave, as overrides
    FORM_SETTINGS             the rows the Train form shows (dxstudio/ui/train_tab.py)
    markdown()                docs/tuning.md's settings tables (python -m dxstudio.tuning.settings --markdown)

Adding a setting is adding a row. Qt-free: the form reads `label` and `form` here and builds
its own widgets. eval takes the rows marked "eval" as options; its settings are tune's.
"""
from __future__ import annotations

import argparse
import difflib
import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from dxstudio.engine.config import SIZES
from dxstudio.engine.extract import DECODINGS
from dxstudio.engine.kernels.runtime import KERNELS
from dxstudio.fsutil import write_text_atomic


class TuneError(ValueError):
    """A run that cannot start or resume; str() says why."""


# The choices of the engine, in the order --help and errors name them: sizes from the smallest,
# the kernel paths with the default first
SIZE_CHOICES = tuple(sorted(SIZES, key=lambda name: (SIZES[name].d_model, name)))
DEFAULT_KERNELS = "fast"
KERNEL_CHOICES = (DEFAULT_KERNELS,) + tuple(k for k in KERNELS if k != DEFAULT_KERNELS)
COMMANDS = ("tune", "eval", "pretrain")  # the commands rows belong to; eval's settings are tune's

BASE_START_BACKBONE_SCALE = 0.3  # the backbone scale a null setting means from a pretrained base


def effective_backbone_scale(settings: dict, from_base: bool) -> float:
    """The backbone scale a run trains at: the setting, or when it is null the measured default
    for its start (a pretrained base or not)."""
    v = settings["backbone_scale"]
    return float(v) if v is not None else (BASE_START_BACKBONE_SCALE if from_base else 1.0)


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity mask, else the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class Setting:
    """One setting. kind: "int", "float", "choice" or "bool".

    low/high bound the value (inclusive unless low_open/high_open); nullable: null (None) is a
    value with a meaning (`null_means`); fingerprinted: the fingerprint covers it (False only for
    settings that cannot change the model bytes); commands: the commands it belongs to (it is
    their setting and their option; eval's settings are tune's, it takes the rows marked eval
    as options); label: the Train form's label (None: not in the form); form: hints for the form's
    widget (top: the largest value the widget offers; decimals; step; null_text: what the
    widget shows for null, which it stores as its lowest value); saved: False for a setting of
    the machine rather than the project (the form passes it to the run but does not save it).
    """
    name: str
    kind: str
    default: object
    help: str
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    choices: tuple = ()
    nullable: bool = False
    null_means: str = ""
    fingerprinted: bool = True
    commands: tuple = ("tune",)
    label: str | None = None
    form: dict = field(default_factory=dict)
    default_text: str | None = None  # how --help shows the default when the value alone says little
    doc_default: str | None = None  # how docs/tuning.md shows it, when default_text depends on the machine
    saved: bool = True  # False: the app's form does not save it into dxproject.json (a machine's setting)

    @property
    def option(self) -> str:
        return "--" + self.name.replace("_", "-")

    def range_text(self) -> str:
        if self.kind == "choice":
            return " or ".join(self.choices)
        if self.kind == "bool":
            return "true or false"
        parts = []
        if self.low is not None:
            parts.append(f"{'>' if self.low_open else '>='} {_num(self.low)}")
        if self.high is not None:
            parts.append(f"{'<' if self.high_open else '<='} {_num(self.high)}")
        what = "an integer" if self.kind == "int" else "a number"
        text = f"{what} {' and '.join(parts)}" if parts else what
        return text + (" or null" if self.nullable else "")

    def check(self, value):
        """The value if it is acceptable, else TuneError naming the setting."""
        if value is None:
            if self.nullable:
                return None
            raise TuneError(f"setting {self.name} must be {self.range_text()}, not null")
        if self.kind == "choice":
            if value not in self.choices:
                raise TuneError(f"setting {self.name} must be {self.range_text()}, not {value!r}")
            return value
        if self.kind == "bool":
            if not isinstance(value, bool):
                raise TuneError(f"setting {self.name} must be true or false, not {value!r}")
            return value
        if isinstance(value, bool) or not isinstance(value, int if self.kind == "int" else (int, float)):
            raise TuneError(f"setting {self.name} must be {self.range_text()}, not {value!r}")
        if self.kind == "float" and not math.isfinite(value):
            raise TuneError(f"setting {self.name} must be {self.range_text()}, not {value!r}")
        too_low = self.low is not None and (value <= self.low if self.low_open else value < self.low)
        too_high = self.high is not None and (value >= self.high if self.high_open else value > self.high)
        if too_low or too_high:
            raise TuneError(f"setting {self.name} must be {self.range_text()}, not {value!r}")
        return value


def _num(v) -> str:
    if isinstance(v, int) and v >= 1 << 32:
        return f"2^{v.bit_length()}-1" if v == (1 << v.bit_length()) - 1 else str(v)
    return f"{v:g}" if isinstance(v, float) else str(v)


_MAX_SEED = (1 << 64) - 1

# Defaults measured on ../shared/data (docs/tuning.md, "Settings and defaults"); dxproject.json "settings"
# and the command line override them. The order is the order of --help and of the Train form.
SETTINGS: tuple[Setting, ...] = (
    Setting("epochs", "int", 12, "passes over the training pages", low=1,
            label="Epochs", form={"top": 1000}),
    Setting("batch", "int", 4, "pages per step", low=1,
            label="Batch", form={"top": 512}),
    Setting("lr", "float", 2e-3, "peak learning rate after the warm-up", low=0, low_open=True,
            label="Learning rate", form={"decimals": 5, "step": 0.0005, "bottom": 0.00001, "top": 1.0}),
    Setting("warmup", "int", 20, "steps of linear warm-up to the peak rate", low=0,
            label="Warm-up steps", form={"top": 100000}),
    # null: 0.3 from a pretrained base (measured on SROIE at 20, 38 and 124 pages, docs/base-model.md
    # "Fine-tuning defaults for a base start"), 1 from any other start (docs/tuning.md "Defaults")
    Setting("backbone_scale", "float", None,
            "0 trains the tag head only; 1 trains everything at the head's rate", low=0,
            nullable=True, null_means=f"{BASE_START_BACKBONE_SCALE:g} from a pretrained base, 1 from any other start",
            default_text="auto",
            label="Backbone scale", form={"decimals": 3, "step": 0.1, "bottom": -0.1, "top": 10.0,
                                          "null_text": "auto"}),
    Setting("layer_decay", "float", 1.0,
            "layer-wise rate decay: each backbone layer below the top one trains at this times the rate of "
            "the layer above it (the embeddings lowest; 1 = off: every layer at the backbone's rate)",
            low=0, low_open=True, high=1),
    Setting("field_weight", "float", None, "weight of every B-/I- tag against O", low=0,
            nullable=True, null_means="each field's schema weight", default_text="the schema's",
            label="Field weight", form={"decimals": 2, "top": 100.0, "null_text": "schema"}),
    Setting("heldout_fraction", "float", 0.15, "share of the usable pages kept for scoring",
            low=0, high=1, commands=("tune", "eval"),
            label="Held-out fraction", form={"decimals": 2, "step": 0.05, "bottom": 0.01, "top": 0.9}),
    Setting("accepted_only", "bool", False,
            "train and score on pages a person accepted in review only (else also on unreviewed pages "
            "whose values were found on the page)", commands=("tune", "eval"),
            label="Accepted pages only"),
    Setting("share", "float", 0.99,
            "the LocalFirst rule: the share of values at or above the threshold that must be right "
            "(with threshold_rule bound: with 95% confidence)",
            low=0, low_open=True, high=1, high_open=True, commands=("tune", "eval")),
    Setting("min_values", "int", 5, "the LocalFirst rule: values at or above the threshold, at least "
            "(threshold_rule seed only)", low=1, commands=("tune", "eval")),
    # issue 21: the claim a threshold makes is the bound (docs/tuning.md "The claim is the bound")
    Setting("threshold_rule", "choice", "bound",
            "how a field's threshold is chosen: bound = the lowest confidence where the one-sided 95% "
            "lower bound of the precision reaches share; seed = where the share itself does, with "
            "min_values values (the seed's rule)", choices=("bound", "seed"), commands=("tune", "eval")),
    Setting("seed", "int", 1, "split, batch order, a new model's weights and a new tag head "
            "(pretrain: batch order and the new model's weights)",
            low=0, high=_MAX_SEED, commands=("tune", "eval", "pretrain"),
            label="Seed", form={"top": 2**31 - 1}),
    Setting("clip", "float", 1.0, "global gradient-norm threshold", low=0, low_open=True,
            nullable=True, null_means="no clipping", commands=("tune", "pretrain")),
    Setting("weight_decay", "float", 0.01, "AdamW weight decay", low=0, commands=("tune", "pretrain")),
    Setting("size", "choice", "base", "size of a new model (tune: when the project names none)",
            choices=SIZE_CHOICES, commands=("tune", "pretrain"), label="New model size"),
    Setting("input_layout", "int", 2,
            "input layout of a new model (docs/inputs.md: 1 = the 16 word features, 2 = with the "
            "keyword, amount and line context); a model file keeps its own", low=1, high=2,
            commands=("tune", "pretrain")),
    Setting("start", "choice", "base",
            "with no model named: base = the shipped pretrained base model (at the base size, "
            "docs/base-model.md), new = a new random model", choices=("base", "new"),
            label="Start from"),
    Setting("degree", "int", usable_cores(),
            "examples in parallel; the model bytes do not depend on it", low=1,
            fingerprinted=False, default_text=f"this machine's usable cores, {usable_cores()}",
            doc_default="the machine's usable cores", saved=False,
            label="Threads", form={"top": max(1, os.cpu_count() or 1)}),
    Setting("kernels", "choice", DEFAULT_KERNELS, "kernel path; both give the same bytes",
            choices=KERNEL_CHOICES, fingerprinted=False, commands=("tune", "eval", "pretrain")),
    Setting("checkpoint_every", "int", 50, "steps between checkpoints", low=1, fingerprinted=False),
    Setting("head_init", "choice", "imprint",
            "the tag rows of fields the starting model does not know (no generic class of the base "
            "matches the name, or new to the project's model): imprint = each field's B-/I- rows "
            "from the starting model's mean final state of that field's words on the training "
            "pages (not from a new random model), match = the run's random draw (the seed's) "
            "(docs/tuning.md)",
            choices=("imprint", "match")),
    Setting("repeats", "choice", "ignore",
            "other printings of a grounded value: ignore (target -1) or o (the seed's rule)",
            choices=("ignore", "o"), label="Repeated printings"),
    Setting("absent_value", "choice", "ignore",
            "a page with a value grounding does not find: ignore = kept when only one text value is "
            "not found and two or more others are, that field unscored on the page and the words where "
            "it may be printed ignored by the loss; exclude = left out of training and scoring (the "
            "seed's rule) (docs/project.md)",
            choices=("exclude", "ignore"), commands=("tune", "eval")),
    Setting("folds", "int", None,
            "cross-validated threshold: K runs each holding out every K-th page, then the final model "
            "on all usable pages", low=2, nullable=True,
            null_means="auto: auto_folds folds while a single split's held-out pages are too few for any "
                       "threshold (docs/tuning.md), else the seed's single split",
            default_text="auto",
            label="Folds", form={"top": 100, "bottom": 1, "null_text": "auto"}),
    Setting("auto_folds", "int", 5,
            "the folds a run uses when folds is unset and a single split could not hold enough values "
            "for any threshold (0: always the seed's single split)", low=0, high=100,
            fingerprinted=False),  # the folds it picks are in the fingerprint as folds
    # seeded augmentation of the training pages (dxstudio/tuning/augment.py); 0 = off
    Setting("augment_values", "float", 0.0,
            "augmentation: the chance that a labelled value's digits are replaced by random digits "
            "each time its page trains (0 = off)", low=0, high=1),
    Setting("augment_swap", "float", 0.0,
            "augmentation: the chance that a labelled value's words are replaced by those of another "
            "training value of the same field and shape each time its page trains (0 = off)", low=0, high=1),
    Setting("augment_case", "float", 0.0,
            "augmentation: the chance that each word is printed in another case (upper, lower or capitalised) "
            "each time its page trains (0 = off)", low=0, high=1),
    Setting("augment_drop", "float", 0.0,
            "augmentation: the chance that each O word is dropped each time its page trains (0 = off)",
            low=0, high=0.9),
    Setting("augment_jitter", "float", 0.0,
            "augmentation: each word's box moved by up to this share of the page size (0 = off)",
            low=0, high=0.05),
    Setting("augment_shift", "float", 0.0,
            "augmentation: each line moved sideways by up to this share of the page width (0 = off)",
            low=0, high=0.2),
    # early stopping and checkpoint averaging (dxstudio/tuning/early_stop.py); 0 = off
    Setting("early_stop", "int", 0, "early stopping: stop when the early-stop pages' mean agreement has not "
            "risen for this many epochs; the model is the best epoch's (0 = off: the last epoch's)", low=0),
    Setting("early_stop_share", "float", 0.15, "early stopping: the share of the training documents held back "
            "to score each epoch (not trained on)", low=0, low_open=True, high=0.5),
    Setting("average_last", "int", 0, "checkpoint averaging: the model is the mean of the weights at the end "
            "of this many epochs, ending at the kept one (0 or 1 = off)", low=0),
    # keyed_layout: measured on FUNSD, SROIE and CORD renamed pages outside the projects
    # (docs/base-model.md "Values over several rows, and only beside their keys", "A field's key
    # alone, and a value inside its key's words"); keyed_learned
    # before it ("Rules learnt per field"), keyed before that ("Values after their keys",
    # docs/model.md "Span decoding"), printing before that
    Setting("decoding", "choice", "keyed_layout",
            "how values are read off the tags: span = each field's best-scoring BIO span, one value per "
            "page, the fields in turn; seed = the seed's most confident run of argmax tags; joint = the "
            "spans of the best joint assignment (no word in two fields); printing = joint, then each "
            "value's words moved to the printing of it the labelling rule labels; keyed = printing, then a "
            "field with no value takes the words printed after its keywords on their row, and a value "
            "starting there runs on to their end; keyed_learned = keyed with rules learnt per field on the "
            "training pages (learned keywords only): a field whose labelled values were nearly always "
            "exactly the words after its key is read by its key alone, one whose values nearly always "
            "hold a digit takes no keyed words without one; keyed_layout = keyed_learned with the words after "
            "a key read on over the next rows that start where they start (an address, a list of names), and "
            "no value without a keyword beside or above it for a field whose training values nearly always "
            "had one, nor after a longer key of which its keyword is only a part; a digit field whose "
            "key's words were seldom exactly its value is filled with the part of them the model reads "
            "best; a field whose keys were nearly always printed with a colon takes no words after its "
            "keyword printed without one (scores and outputs say which)",
            choices=DECODINGS, commands=("tune", "eval")),
    # learned: measured on SROIE under its own and a custom schema, and FUNSD, pages outside the
    # projects (docs/base-model.md "Keywords of a user's fields"); tuning/keywords.py
    Setting("keywords", "choice", "learned",
            "the words the printing reading places each value after (or under): name = the field's name "
            "(the seed's rule); schema = its name split into words (abbreviations read) and its "
            "description's words; learned = schema's and the printed words beside or above its labelled "
            "values on the training pages, stored in the model (scores say which)",
            choices=("name", "schema", "learned"), commands=("tune", "eval")),
    Setting("threshold_by", "choice", "value",
            "what right means for the threshold: the label's value, or exactly its words (the seed's rule)",
            choices=("value", "words")),

    # dxstudio pretrain (tuning/pretrain.py, docs/base-model.md): the rows of its own, where its
    # default differs from fine-tuning's or fine-tuning has no such setting. Its order in
    # settings.json: seed, clip, weight_decay, size, input_layout, kernels (the rows above), then these.
    Setting("epochs", "int", 1, "passes over the corpus's windows (unless steps is set)", low=1,
            commands=("pretrain",)),
    Setting("steps", "int", None, "steps in all (overrides epochs; the learning rate decays over them)",
            low=1, nullable=True, null_means="epochs passes", commands=("pretrain",)),
    Setting("batch", "int", 8, "windows per step", low=1, commands=("pretrain",)),
    Setting("lr", "float", 1e-3, "peak learning rate after the warm-up", low=0, low_open=True,
            commands=("pretrain",)),
    Setting("warmup", "int", 50, "steps of linear warm-up to the peak rate", low=0, commands=("pretrain",)),
    Setting("window", "int", 256, "words per example (a longer document gives several windows)", low=1,
            commands=("pretrain",)),
    Setting("limit", "int", None, "use only the first N documents of each source", low=1, nullable=True,
            null_means="every document", commands=("pretrain",)),
    Setting("field_weight", "float", 3.0, "weight of every B-/I- tag against O", low=0, low_open=True,
            commands=("pretrain",)),
    Setting("loss_tag", "float", 1.0, "weight of the tag loss term", low=0, commands=("pretrain",)),
    Setting("loss_role", "float", 0.5, "weight of the role loss term", low=0, commands=("pretrain",)),
    Setting("loss_doc", "float", 0.25, "weight of the document-type loss term", low=0, commands=("pretrain",)),
    Setting("loss_items", "float", 0.25, "weight of the line-item loss term", low=0, commands=("pretrain",)),
    Setting("loss_kv", "float", 0.25, "weight of the key-value loss term", low=0, commands=("pretrain",)),
    Setting("degree", "int", 1, "examples in parallel; the model bytes do not depend on it", low=1,
            fingerprinted=False, commands=("pretrain",)),
    Setting("checkpoint_every", "int", 100, "steps between checkpoints", low=1, fingerprinted=False,
            commands=("pretrain",)),
)

# Checks across rows, by command: (command, check(settings) -> the problem or None)
RULES: tuple = (
    ("pretrain", lambda s: "every loss weight is 0: nothing to train"
     if not any(s[k] > 0 for k in ("loss_tag", "loss_role", "loss_doc", "loss_items", "loss_kv")) else None),
)



def _settings_of(command: str) -> str:
    if command not in COMMANDS:
        raise ValueError(f"no settings of command {command!r}; choose one of {', '.join(COMMANDS)}")
    return "tune" if command == "eval" else command  # eval's settings are tune's


def rows(command: str = "tune") -> tuple:
    """The rows of a command's settings, in the table's order (eval: tune's)."""
    c = _settings_of(command)
    return tuple(r for r in SETTINGS if c in r.commands)


def defaults(command: str = "tune") -> dict:
    return {r.name: r.default for r in rows(command)}


def not_fingerprinted(command: str = "tune") -> tuple:
    """Settings that cannot change the model bytes; they are left out of the fingerprint so that a
    run may be resumed at another degree or kernel path, or checkpointed more or less often."""
    return tuple(r.name for r in rows(command) if not r.fingerprinted)


BY_NAME = {r.name: r for r in rows("tune")}
DEFAULTS = defaults("tune")
NOT_FINGERPRINTED = not_fingerprinted("tune")
FORM_SETTINGS = tuple(r for r in rows("tune") if r.label is not None)
_WHAT = {"tune": "tuning", "pretrain": "pretraining"}


def unknown_setting(name, known, where: str, command: str = "tune") -> TuneError:
    """The error for a setting name no row has: where it was given, and the nearest known name."""
    return TuneError(f"{where}unknown {_WHAT[_settings_of(command)]} setting {name!r}; "
                     f"did you mean {nearest_setting(name, known)!r}?")


def nearest_setting(name, known) -> str:
    """The known name nearest to `name`: the one its words' initials spell (learning_rate: lr),
    else difflib's closest."""
    text = str(name).lower().replace("-", "_")
    initials = "".join(w[:1] for w in text.split("_") if w)
    if len(initials) > 1 and initials in known:
        return initials
    return difflib.get_close_matches(text, list(known), n=1, cutoff=0.0)[0]


def resolve_settings(project_settings: dict | None, overrides: dict | None = None, command: str = "tune",
                     source=None) -> dict:
    """The defaults of the command's rows, then dxproject.json "settings", then the overrides;
    each checked against its row, then the command's RULES. An unknown name raises TuneError
    naming it and the nearest known one, and the file (`source`, the project file, or
    dxproject.json) when it comes from the project's settings. Null means "not set" here, so
    the default (which may itself be null) stays."""
    table = {r.name: r for r in rows(command)}
    s = {name: r.default for name, r in table.items()}
    project_where = f"{source}: \"settings\": " if source is not None else 'dxproject.json "settings": '
    for src, where in ((project_settings or {}, project_where), (overrides or {}, "")):
        for k, v in src.items():
            if k not in table:
                raise unknown_setting(k, table, where, command)
            if v is not None:
                s[k] = v
    for row in table.values():
        s[row.name] = row.check(s[row.name])
    c = _settings_of(command)
    for rule_command, check in RULES:
        problem = check(s) if rule_command == c else None
        if problem:
            raise TuneError(problem)
    return s


def fingerprinted(settings: dict) -> dict:
    """The settings the fingerprint covers."""
    return {k: v for k, v in settings.items() if k not in NOT_FINGERPRINTED}


# ---------------------------------------------------------------------------------------
# Command-line options

def _parse(row: Setting):
    def parse(text: str):
        try:
            return row.check(int(text) if row.kind == "int" else float(text))
        except ValueError:  # TuneError is one
            raise argparse.ArgumentTypeError(f"must be {row.range_text().removesuffix(' or null')}, "
                                             f"not {text!r}") from None
    return parse


def _shown_default(row: Setting, doc: bool = False) -> str:
    if doc and row.doc_default:
        return row.doc_default
    if row.default_text:
        return row.default_text
    if row.default is None:
        return row.null_means
    if row.kind == "bool":
        return "true" if row.default else "false"
    return _num(row.default)


def add_arguments(parser, command: str) -> None:
    """The options of `dxstudio COMMAND` for the settings it takes; the default is the project's
    saved setting, else the one shown."""
    group = parser.add_argument_group(
        "settings (default: the value shown)" if _settings_of(command) == "pretrain" else
        "settings (default: the project's dxproject.json \"settings\", else the value shown)")
    for row in SETTINGS:
        if command not in row.commands:
            continue
        shown = _shown_default(row)
        help_text = f"{row.help} (default {shown})".replace("%", "%%")  # argparse formats help with %
        if row.kind == "choice":
            group.add_argument(row.option, dest=row.name, choices=row.choices, help=help_text)
        elif row.kind == "bool":
            group.add_argument(row.option, dest=row.name, action=argparse.BooleanOptionalAction, default=None,
                               help=help_text)
        else:
            group.add_argument(row.option, dest=row.name, type=_parse(row), metavar=row.kind.upper(),
                               help=help_text)


def overrides_from_args(args, command: str) -> dict:
    """The settings given on the command line (those left out are None and not overrides)."""
    return {row.name: getattr(args, row.name) for row in SETTINGS
            if command in row.commands and getattr(args, row.name, None) is not None}


# ---------------------------------------------------------------------------------------
# docs/tuning.md

DOC_BEGIN = "<!-- the settings tables: generated by `python -m dxstudio.tuning.settings --markdown` from SETTINGS; edit the rows, not this -->"
DOC_END = "<!-- end of the generated settings tables -->"


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown() -> str:
    """docs/tuning.md's settings tables (between DOC_BEGIN and DOC_END), one per command's
    settings, made from the rows (tests/test_settings.py compares the doc with this)."""
    out = [DOC_BEGIN, ""]
    titles = {"tune": "`dxstudio tune`, `dxstudio eval` and the Train tab (dxproject.json \"settings\")",
              "pretrain": "`dxstudio pretrain` (docs/base-model.md)"}
    for c in ("tune", "pretrain"):
        out += [f"Settings of {titles[c]}:", "",
                "| setting | default | range | fingerprinted | options of | what it does |",
                "|---|---|---|---|---|---|"]
        for r in rows(c):
            options = ", ".join(x for x in r.commands if x in (("tune", "eval") if c == "tune" else ("pretrain",)))
            out.append(f"| {r.name} | {_cell(_shown_default(r, doc=True))} | {_cell(r.range_text())} | "
                       f"{'yes' if r.fingerprinted else 'no'} | {options} | {_cell(r.help)} |")
        out.append("")
    out.append(DOC_END)
    return "\n".join(out) + "\n"


def doc_section(text: str) -> str | None:
    """The generated part of a document's text (DOC_BEGIN to DOC_END, both lines kept), or None."""
    a, b = text.find(DOC_BEGIN), text.find(DOC_END)
    if a < 0 or b < a:
        return None
    return text[a:b + len(DOC_END)] + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dxstudio.tuning.settings",
                                 description="the settings table as docs/tuning.md shows it")
    ap.add_argument("--markdown", action="store_true", help="print the settings tables (Markdown)")
    ap.add_argument("--write", metavar="DOC", help="replace the generated tables in DOC (e.g. docs/tuning.md)")
    args = ap.parse_args(argv)
    if args.write:
        path = Path(args.write)
        text = path.read_text(encoding="utf-8")
        old = doc_section(text)
        if old is None:
            print(f"{path}: no generated settings tables (the line {DOC_BEGIN!r} and its end)", file=sys.stderr)
            return 1
        write_text_atomic(path, text.replace(old, markdown()))
        return 0
    sys.stdout.write(markdown())
    return 0


if __name__ == "__main__":
    sys.exit(main())
