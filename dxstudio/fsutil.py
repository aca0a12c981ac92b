"""Atomic file writes and guarded reads.

Writes: temp file in the same folder, fsync, rename, fsync the folder. A crash or power cut
during a save leaves either the old file or the new one, never a mix; a full disk is named
(DiskFullError) and leaves the old file as it was.

Reads: only regular files (a FIFO or /dev/zero is refused, never waited on or read without
end), at most a size cap; JSON is parsed by one hardened reader (loads_json) that refuses
nesting deeper than MAX_JSON_DEPTH, integers longer than MAX_JSON_INT_DIGITS digits,
numbers that overflow a float, NaN/Infinity and lone surrogates. See docs/security.md.
"""
from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import re
import stat
import tempfile
import time
from pathlib import Path

# Limits on what is read (docs/security.md, "Limits on inputs").
MAX_JSON_BYTES = 64 * 1024 * 1024  # a page, label or project file; real ones are kB
MAX_JSON_DEPTH = 64  # real files nest 5 deep
MAX_JSON_INT_DIGITS = 100  # a float holds about 308 digits; no real value needs 100
MAX_SOURCE_BYTES = 256 * 1024 * 1024  # one import source file (CSV, PDF, JSON)


class DiskFullError(OSError):
    """A write that failed because the disk (or the quota) is full; str() names the file."""

    def __str__(self) -> str:
        return f"{self.filename}: {self.strerror}"


class JSONInputError(ValueError):
    """Text that parse_json refuses; str() says why, without a file name."""


# ---------------------------------------------------------------------------------------
# Writing

def is_disk_full(e: BaseException) -> bool:
    return isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT)


def disk_full(path, e: OSError, what: str = "") -> DiskFullError:
    """The DiskFullError to raise for `e` (ENOSPC or EDQUOT) while writing `path`."""
    if isinstance(e, DiskFullError):
        return e
    quota = " (or the disk quota is used up)" if e.errno == errno.EDQUOT else ""
    return DiskFullError(e.errno, f"cannot write{what}: the disk is full{quota}; free some space and try again "
                                  f"(the previous version of the file, if any, is unchanged)", str(path))


def write_bytes_atomic(path, data: bytes) -> None:
    path = Path(path)
    try:
        _write_bytes_atomic(path, data)
    except OSError as e:
        if is_disk_full(e):
            raise disk_full(path, e, f" {len(data)} bytes") from None
        raise


def _write_bytes_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # the writer's pid in the name: a killed writer's file is told from a live one's (remove_orphan_tmp)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}-", suffix=".tmp", dir=path.parent)
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


ORPHAN_TMP_AGE = 3600.0  # seconds: a temp file without a writer's pid in its name is an orphan after this
_TMP_NAME = re.compile(r"\..+\.(\d+)-[^.]+\.tmp")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return pid > 0  # another user's process, or a pid no signal can reach: keep its file
    return True


def remove_orphan_tmp(folder, now: float | None = None) -> list[Path]:
    """Remove the temp files (.NAME.PID-XXXX.tmp) that atomic writes killed before their rename
    left in `folder`: those whose writer (the pid in the name) no longer runs here, and those
    named without a pid (older versions) once older than ORPHAN_TMP_AGE. A live writer's file,
    a link and anything not named so are left alone. Returns what was removed."""
    folder = Path(folder)
    now = time.time() if now is None else now
    removed = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for e in entries:
        name = e.name
        if not (name.startswith(".") and name.endswith(".tmp")):
            continue
        try:
            st = os.lstat(e.path)
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        m = _TMP_NAME.fullmatch(name)
        if m is not None:
            pid = int(m.group(1)[:12])
            orphan = pid != os.getpid() and not _pid_alive(pid)
        else:
            orphan = now - st.st_mtime > ORPHAN_TMP_AGE
        if orphan:
            try:
                os.unlink(e.path)
                removed.append(Path(e.path))
            except OSError:
                pass
    return removed


def _read_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_UMASK = _read_umask()  # read once, at import: os.umask briefly changes process state


def write_text_atomic(path, text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path, obj, indent: int | None = 2) -> None:
    write_text_atomic(path, json.dumps(obj, indent=indent, ensure_ascii=False, sort_keys=False) + "\n")


# ---------------------------------------------------------------------------------------
# Reading

def _size(n: int) -> str:
    return f"{n / 1024 / 1024:.0f} MB" if n >= 1024 * 1024 else f"{n} bytes"


def read_regular_file(path, max_bytes: int = MAX_SOURCE_BYTES, error=ValueError) -> bytes:
    """The bytes of a regular file of at most max_bytes; anything else (missing, a folder, a
    FIFO, a device, too big) raises `error` with one line naming the file."""
    path = Path(path)
    try:
        # O_NONBLOCK: opening a FIFO with no writer must not wait forever
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise error(f"{path}: no such file") from None
    except IsADirectoryError:
        raise error(f"{path}: is a folder, not a file") from None
    except OSError as e:
        raise error(f"{path}: cannot read ({e.strerror or e})") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise error(f"{path}: is a folder, not a file")
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{path}: not a regular file (a device, FIFO or socket is never read)")
        if st.st_size > max_bytes:
            raise error(f"{path}: {_size(st.st_size)}, more than the {_size(max_bytes)} allowed")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        chunks, total = [], 0
        while True:  # read at most max_bytes + 1: a file growing while read is caught too
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:
                raise error(f"{path}: more than the {_size(max_bytes)} allowed")
        return b"".join(chunks)
    except OSError as e:
        raise error(f"{path}: cannot read ({e.strerror or e})") from None
    finally:
        os.close(fd)


def _parse_int(s: str) -> int:
    digits = len(s) - (s[0] == "-")
    if digits > MAX_JSON_INT_DIGITS:
        raise JSONInputError(f"an integer of {digits} digits (at most {MAX_JSON_INT_DIGITS} are allowed)")
    return int(s)


def _parse_float(s: str) -> float:
    f = float(s)
    if not math.isfinite(f):
        raise JSONInputError(f"the number {s[:20]}{'...' if len(s) > 20 else ''} is too large for a float")
    return f


def _parse_constant(name: str):
    raise JSONInputError(f"{name} is not finite (and not a JSON number)")


def _has_surrogate(s: str) -> bool:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _check_tree(obj, max_depth: int) -> None:
    """Depth and strings of a parsed value, without recursion."""
    stack = [(obj, 1)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, str):
            if _has_surrogate(v):
                raise JSONInputError(f"the text {v[:40]!r} holds a lone surrogate (not valid Unicode)")
        elif isinstance(v, (dict, list)):
            if depth > max_depth:
                raise JSONInputError(f"nested more than {max_depth} deep")
            if isinstance(v, dict):
                for k, x in v.items():
                    stack.append((k, depth + 1))
                    stack.append((x, depth + 1))
            else:
                stack.extend((x, depth + 1) for x in v)


def loads_json(text, object_pairs_hook=None, max_depth: int = MAX_JSON_DEPTH):
    """json.loads for text nobody vouches for. Raises JSONInputError (a ValueError) with a
    short reason for bad syntax, deep nesting, huge integers, float overflow, NaN/Infinity
    and lone surrogates; never RecursionError, OverflowError or UnicodeEncodeError."""
    if isinstance(text, (bytes, bytearray, memoryview)):
        try:
            text = bytes(text).decode("utf-8-sig")  # a byte-order mark is tolerated
        except UnicodeDecodeError:
            raise JSONInputError("not UTF-8 text") from None
    try:
        obj = json.loads(text, parse_int=_parse_int, parse_float=_parse_float,
                         parse_constant=_parse_constant, object_pairs_hook=object_pairs_hook)
    except JSONInputError:
        raise
    except json.JSONDecodeError as e:
        raise JSONInputError(f"not JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    except RecursionError:
        raise JSONInputError(f"nested more than {max_depth} deep") from None
    except ValueError as e:  # from object_pairs_hook (a duplicate key, say)
        raise JSONInputError(" ".join(str(e).split())) from None
    _check_tree(obj, max_depth)
    return obj


def read_json(path, error=ValueError, max_bytes: int = MAX_JSON_BYTES):
    """Parse a UTF-8 JSON file with loads_json; any problem (unreadable, not a regular file,
    too big, not UTF-8, not JSON, hostile content) raises `error` with one line naming the file."""
    return parse_json(read_file_bytes(path, error, max_bytes), path, error)


def read_file_bytes(path, error=ValueError, max_bytes: int = MAX_JSON_BYTES) -> bytes:
    """A regular file's bytes (at most max_bytes); a problem raises `error` with one line naming the file."""
    return read_regular_file(path, max_bytes, error)


def parse_json(raw: bytes, path, error=ValueError):
    """Parse bytes read from `path` with loads_json (for callers that keep the bytes, e.g. to
    hash exactly what they read); a problem raises `error` naming the file."""
    try:
        return loads_json(raw)
    except JSONInputError as e:
        raise error(f"{Path(path)}: {e}") from None


def sha256_file(path) -> str:
    """The SHA-256 hex digest of a file, read in 1 MiB blocks (a model file need not fit twice)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
