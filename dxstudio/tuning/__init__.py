"""Fine-tuning, free of Qt: the run (run.py), the split and schedule (schedule.py) and the
held-out scores and threshold (scoring.py). The command line and the app both drive it."""
from dxstudio.tuning.run import (  # noqa: F401  (the package's public face)
    DEFAULTS, NOT_FINGERPRINTED, Event, TuneError, TuneRun, evaluate_model, metrics_rows,
    read_checkpoint, resolve_settings, score_summary,
)
from dxstudio.tuning.folds import FoldedRun, prepare_run  # noqa: F401
