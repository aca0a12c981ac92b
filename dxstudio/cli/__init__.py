"""The command line: main.py parses and dispatches; one module a group of commands."""
from dxstudio.cli.main import main  # noqa: F401
