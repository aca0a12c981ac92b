"""The dxstudio desktop app (PySide6, pyqtgraph): a front end of dxstudio.review and
dxstudio.tuning. The engine never imports anything from here."""
import os as _os

# Qt's raster painting hands a large fill or image conversion to a pool of threads ("Thread
# (pooled)") and the GUI thread waits until each has done its part: on a machine whose cores are
# busy those threads wait for a core while the GUI thread, blocked, waits for them, which made
# most of the GUI thread's blocked time in bench/ui_latency.py --threads (issue 23). The app
# paints on the GUI thread alone. Read by Qt when it first paints, so set before that, on the
# first import of any dxstudio.ui module; a value already in the environment is kept.
_os.environ.setdefault("QT_NO_GUI_THREADPOOL", "1")
