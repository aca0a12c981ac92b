"""dxstudio: local document extraction models from a labelling model's answers."""

__version__ = "0.1.0"  # the one place: pyproject.toml reads it, `dxstudio --version` prints it
