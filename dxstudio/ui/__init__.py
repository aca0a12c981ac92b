"""The dxstudio desktop app (PySide6, pyqtgraph): a front end of dxstudio.review and
dxstudio.tuning. The engine never imports anything from here."""
