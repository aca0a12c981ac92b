"""A run's fingerprint and its checkpoint, for fine-tuning (run.py) and pretraining (pretrain.py).

    fp = fingerprint(components)                           # SHA-256 of {name: sha256} in canonical JSON
    save_checkpoint(path, state, fp, components)           # weights, AdamW moments, step, fingerprint
    step = load_checkpoint(path, state, fp, components, total_steps)   # refused when another run's
    meta, tensors = read_checkpoint(path, tensors=False)   # validated like a model file

A checkpoint is a safetensors file: "param/NAME", "adam_m/NAME" and "adam_v/NAME" float32
tensors and the metadata "checkpoint": canonical JSON {step, fingerprint, components}. The
fingerprint ties it to everything that decides the bytes of the model, so a resumed run ends
with the bytes of an uninterrupted one.
"""
from __future__ import annotations

import hashlib
import os
import stat
import struct
from pathlib import Path

import numpy as np
from safetensors.numpy import load, save

from dxstudio.engine.container import MAX_HEADER_BYTES, ModelFileError, _read_header, canonical_json, read_model_bytes
from dxstudio.fsutil import JSONInputError, loads_json, write_bytes_atomic
from dxstudio.tuning.settings import TuneError


def sha256_hex(data: bytes) -> str:
    """The SHA-256 of bytes, in hex: what fingerprints and model cards record."""
    return hashlib.sha256(data).hexdigest()


def fingerprint(components) -> str:
    """The fingerprint of a run: the SHA-256 of its components ({name: sha256}, or a folded run's
    list of its parts' fingerprints) in canonical JSON."""
    return sha256_hex(canonical_json(components).encode())


def _state_tensors(state) -> dict:
    """The tensors a checkpoint holds for a TrainState, by name, in the file's order."""
    tensors = {"param/" + n: v for n, v in state.params.items()}
    for n in state.m:
        tensors["adam_m/" + n] = state.m[n]
        tensors["adam_v/" + n] = state.v[n]
    return tensors


def save_checkpoint(path, state, fingerprint: str, components: dict) -> None:
    """Write the state's weights, AdamW moments and step with the run's fingerprint (atomically)."""
    tensors = {k: np.ascontiguousarray(v) for k, v in _state_tensors(state).items()}
    meta = {"checkpoint": canonical_json({"step": state.step, "fingerprint": fingerprint,
                                          "components": components})}
    write_bytes_atomic(path, save(tensors, metadata=meta))


def load_checkpoint(path, state, fingerprint: str, components: dict, total_steps: int | None = None) -> int:
    """Load the checkpoint at path into state and return its step. TuneError naming the file
    when it belongs to another run (the components that changed), is past total_steps, or
    lacks or misshapes a tensor; the state is left untouched then."""
    meta, tensors = read_checkpoint(path)
    if meta.get("fingerprint") != fingerprint:
        old = meta.get("components", {})
        changed = [k for k, v in components.items() if old.get(k) != v]
        raise TuneError(f"{path}: the checkpoint belongs to another run: "
                        f"{', '.join(changed) or 'fingerprint'} changed since it was written")
    if total_steps is not None and meta["step"] > total_steps:
        raise TuneError(f"{path}: the checkpoint is at step {meta['step']}, beyond the run's {total_steps} steps")
    _check_tensors(path, tensors, _state_tensors(state))
    for name in state.params:
        state.params[name] = tensors["param/" + name].copy()
    for name in state.m:
        state.m[name] = tensors["adam_m/" + name].copy()
        state.v[name] = tensors["adam_v/" + name].copy()
    state.step = meta["step"]
    return state.step


def checkpoint_step(path) -> int | None:
    """The step of the checkpoint at path, or None when there is no readable one."""
    try:
        return int(read_checkpoint(path, tensors=False)[0]["step"])
    except (TuneError, KeyError, TypeError, ValueError):  # missing, cut or foreign
        return None


def read_checkpoint(path, tensors: bool = True) -> tuple[dict, dict]:
    """(metadata {step, fingerprint, components}, tensors by name) of a run's checkpoint.
    Validated like a model file: a regular file of bounded size, a header read by the
    hardened JSON reader, metadata of the right shape (TuneError otherwise)."""
    path = Path(path)
    if not path.exists():
        raise TuneError(f"{path}: no checkpoint to resume from")
    try:
        data = read_model_bytes(path) if tensors else _header_bytes(path)
        header, _ = _read_header(path, data)
    except ModelFileError as e:
        raise TuneError(f"{path}: not a readable checkpoint ({e.problem})") from None
    meta = header.get("__metadata__")
    try:
        meta = loads_json(meta["checkpoint"])
    except (TypeError, KeyError, JSONInputError) as e:
        raise TuneError(f"{path}: not a readable checkpoint (no valid 'checkpoint' metadata: {e})") from None
    if not isinstance(meta, dict):
        raise TuneError(f"{path}: the checkpoint metadata must be an object, not {type(meta).__name__}")
    step = meta.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise TuneError(f"{path}: the checkpoint has no valid step ({str(step)[:40]})")
    if not isinstance(meta.get("fingerprint"), str) or not isinstance(meta.get("components", {}), dict):
        raise TuneError(f"{path}: the checkpoint has no valid fingerprint")
    if not tensors:
        return meta, {}
    try:
        arrays = load(data)
    except Exception as e:  # the library's errors are not one family
        raise TuneError(f"{path}: not a readable checkpoint ({' '.join(str(e).split())[:200]})") from None
    return meta, arrays


def _header_bytes(path: Path) -> bytes:
    """The length field and header of a safetensors file, without reading the tensors (the
    run list asks every run for its step)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO must not block the open
        with open(fd, "rb", buffering=0) as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise ModelFileError(path, "not a regular file (a device, FIFO or socket is never read)")
            os.set_blocking(fd, True)
            head = f.read(8)
            if len(head) == 8:
                (n,) = struct.unpack("<Q", head)
                if 0 < n <= MAX_HEADER_BYTES:
                    head += f.read(n)
            return head
    except OSError as e:
        raise ModelFileError(path, f"cannot read ({e.strerror or e})") from None


def _check_tensors(path, tensors: dict, expected: dict) -> None:
    """Every tensor the state needs, float32 of the right shape and finite; nothing else."""
    missing = [k for k in expected if k not in tensors]
    if missing:
        raise TuneError(f"{path}: the checkpoint lacks tensor {missing[0]!r} ({len(missing)} missing)")
    extra = sorted(k for k in tensors if k not in expected)
    if extra:
        raise TuneError(f"{path}: the checkpoint has an unexpected tensor {extra[0]!r}")
    for k, want in expected.items():
        arr = tensors[k]
        if arr.dtype != np.float32:
            raise TuneError(f"{path}: checkpoint tensor {k!r} is {arr.dtype}, expected float32")
        if tuple(arr.shape) != tuple(np.shape(want)):
            raise TuneError(f"{path}: checkpoint tensor {k!r} has shape {tuple(arr.shape)}, "
                            f"expected {tuple(np.shape(want))}")
        if not np.isfinite(arr).all():
            raise TuneError(f"{path}: checkpoint tensor {k!r} has non-finite values")


class CheckpointedRun:
    """The checkpoint of a run (TuneRun, PretrainRun): its file in the run folder, written and read
    back with the run's fingerprint and components. The run has `rundir`, `state`,
    `fingerprint`, `components` and `total_steps`."""

    @property
    def checkpoint_path(self) -> Path:
        return self.rundir.checkpoint_path

    def save_checkpoint(self) -> None:
        save_checkpoint(self.checkpoint_path, self.state, self.fingerprint, self.components)

    def load_checkpoint(self) -> int:
        return load_checkpoint(self.checkpoint_path, self.state, self.fingerprint, self.components, self.total_steps)
