"""Atomic file writes: temp file in the same folder, fsync, rename, fsync the folder.

A crash or power cut during a save leaves either the old file or the new one, never a mix.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path


def write_bytes_atomic(path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        # mkstemp makes the file private (0600); give it the mode a plain open() would
        os.fchmod(fd, 0o666 & ~_UMASK)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:  # some file systems refuse fsync on a folder; the rename is still atomic
        pass


def _read_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_UMASK = _read_umask()  # read once, at import: os.umask briefly changes process state


def write_text_atomic(path, text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path, obj, indent: int | None = 2) -> None:
    write_text_atomic(path, json.dumps(obj, indent=indent, ensure_ascii=False, sort_keys=False) + "\n")


def read_json(path, error=ValueError):
    """Parse a UTF-8 JSON file; any problem raises `error` with one line naming the file."""
    return parse_json(read_file_bytes(path, error), path, error)


def read_file_bytes(path, error=ValueError) -> bytes:
    """A file's bytes; a problem raises `error` with one line naming the file."""
    path = Path(path)
    try:
        return path.read_bytes()
    except OSError as e:
        raise error(f"{path}: cannot read ({e.strerror or e})") from None


def parse_json(raw: bytes, path, error=ValueError):
    """Parse bytes read from `path` as UTF-8 JSON (for callers that keep the bytes, e.g. to hash
    exactly what they read); a problem raises `error` naming the file."""
    try:
        return json.loads(raw.decode("utf-8-sig"))  # a byte-order mark is tolerated
    except UnicodeDecodeError:
        raise error(f"{path}: not UTF-8 text") from None
    except json.JSONDecodeError as e:
        raise error(f"{path}: not JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
