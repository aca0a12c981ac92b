"""Fine-tuning, free of Qt: the settings (settings.py), the run (run.py), its folder
(rundir.py), its checkpoint (checkpoint.py) and metrics (metrics.py), the pages it trains on
(pages.py), the split and schedule (schedule.py), the held-out scores and threshold
(scoring.py, evaluation.py) and pretraining (pretrain.py). The command line and the app both
drive it."""
from dxstudio.tuning.settings import (  # noqa: F401  (the package's public face)
    DEFAULTS, FORM_SETTINGS, NOT_FINGERPRINTED, SETTINGS, TuneError, resolve_settings,
)
from dxstudio.tuning.checkpoint import read_checkpoint  # noqa: F401
from dxstudio.tuning.evaluation import evaluate_model  # noqa: F401
from dxstudio.tuning.metrics import Event, metrics_rows, score_summary  # noqa: F401
from dxstudio.tuning.run import TuneRun  # noqa: F401
from dxstudio.tuning.folds import FoldedRun, prepare_run  # noqa: F401
