"""Past one process: extraction, routing and data-parallel training on local worker processes
or a Ray cluster, with the same bytes as one process (docs/scale.md).

    pages.py     the pages of a command line (files, folders, JSON-lines streams) and the
                 work on one page, shared by the serial, process and Ray paths
    ordered.py   an ordered map over a stream of chunks: in one process, in local worker
                 processes or as Ray tasks; results come back in input order
    cluster.py   Ray: connecting (`--ray local` or an address), the model put in the object
                 store once, the tasks, the per-example gradient sets of a training step

Ray is an optional extra (pip install "dxstudio[cluster]"); nothing here imports it at module
level, so the rest of the program never needs it. The engine stays free of all of this: it
only takes an optional gradient runner (dxstudio.engine.training.TrainState.runner).
"""
from __future__ import annotations

INSTALL_HINT = 'Ray is not installed; install the cluster extra: pip install "dxstudio[cluster]" (or pip install -e ".[cluster]" in a checkout)'


class ScaleError(Exception):
    """A problem with the workers or the cluster; str() is one line saying what to do."""


def import_ray():
    """The ray module, or ScaleError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise ScaleError(INSTALL_HINT) from None
    return ray
