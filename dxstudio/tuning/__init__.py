"""Fine-tuning, free of Qt: the settings (settings.py), the run (run.py), its folder
(rundir.py), the split and schedule (schedule.py) and the held-out scores and threshold
(scoring.py). The command line and the app both drive it."""
from dxstudio.tuning.settings import (  # noqa: F401  (the package's public face)
    DEFAULTS, FORM_SETTINGS, NOT_FINGERPRINTED, SETTINGS, TuneError, resolve_settings,
)
from dxstudio.tuning.run import (  # noqa: F401
    Event, TuneRun, evaluate_model, metrics_rows, read_checkpoint, score_summary,
)
from dxstudio.tuning.folds import FoldedRun, prepare_run  # noqa: F401
