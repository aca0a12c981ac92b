"""rapidocr's PP-OCRv4 models with their per-layer arithmetic folded (docs/ocr.md, "Fifth round").

The recogniser and detector (PPLCNetV3) follow every convolution with a "learnable affine
block" (x * s + b, two scalars) and a hard-swish written out as four element-wise operators
(x * clip(x + 3, 0, 6) / 6), then another affine block: eight passes over the activations per
layer that onnxruntime does not fuse, plus the layout changes around them (its NCHWc kernels
do not take them): 40% of the recogniser's time on receipts. `fold_model` rewrites the graph:

* conv -> x*s -> +b           the scalars folded into the conv's weights and bias
                               (W*s, B*s + b);
* x*clip(x+3,0,6)/6            HardSigmoid(x; 1/6, 1/2) * x (two operators, not four);
* x*s -> +b -> conv            folded into a following conv that pads nothing (a 1 x 1 conv:
                               W*s per input channel, B + b * sum W); before a padded conv
                               they stay (the zeros it pads would change);

the same function to float32 rounding (the words read are measured against the original in
docs/ocr.md). Nothing else is touched. `folded_model_path` makes the folded model once (the
`onnx` package is needed only then) under the user's cache folder, named by the digest of the
source model and FOLD_VERSION, and checks the digest of the cached file it wrote before every
use: a cache that differs (an edit, a broken write) is made again, never loaded.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from dxstudio.fsutil import sha256_file

FOLD_VERSION = 1  # bump when fold_model's output changes: old caches are then not used


def _scalar(consts, name):
    a = consts.get(name)
    if a is None or a.size != 1:
        return None
    return a.reshape(()).astype("float32")


def fold_model(model):
    """The onnx ModelProto `model` with the affine blocks folded and hard-swish shortened
    (module docstring); a new proto, `model` unchanged. Deterministic: the same bytes for
    the same model."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    consts = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    nodes = []
    for n in g.node:  # Constant nodes become initializers (looked up by name below)
        if n.op_type == "Constant" and len(n.attribute) == 1 and n.attribute[0].name == "value":
            consts[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
        else:
            nodes.append(n)
    outputs = {o.name for o in g.output}

    def consumers(name):
        return [n for n in nodes if name in n.input]

    def only_consumer(name, op):
        cs = consumers(name)
        if len(cs) == 1 and cs[0].op_type == op and name not in outputs:
            return cs[0]
        return None

    def affine_after(name):
        """(mul, add, s, b) when `name` feeds only x*s and that only +b (scalars), else None."""
        mul = only_consumer(name, "Mul")
        if mul is None:
            return None
        other = mul.input[0] if mul.input[1] == name else mul.input[1]
        s = _scalar(consts, other)
        if s is None:
            return None
        add = only_consumer(mul.output[0], "Add")
        if add is None:
            return None
        other = add.input[0] if add.input[1] == mul.output[0] else add.input[1]
        b = _scalar(consts, other)
        if b is None:
            return None
        return mul, add, s, b

    def drop(*ns):
        ids = {id(x) for x in ns}
        nodes[:] = [x for x in nodes if id(x) not in ids]

    def set_const(name, arr):
        consts[name] = np.ascontiguousarray(arr, dtype=np.float32)

    def weight_and_bias(conv):
        """A conv's weight and bias in binary32 (a conv without a bias input: zeros)."""
        w = consts[conv.input[1]].astype(np.float32)
        has_bias = len(conv.input) > 2 and conv.input[2]
        return w, consts[conv.input[2]].astype(np.float32) if has_bias else np.zeros(w.shape[0], np.float32)

    count = 0
    # 1. conv -> *s -> +b  into the conv
    for conv in [n for n in nodes if n.op_type == "Conv"]:
        hit = affine_after(conv.output[0])
        if hit is None or conv.input[1] not in consts:
            continue
        mul, add, s, b = hit
        w, bias = weight_and_bias(conv)
        wname, bname = conv.input[1] + "_folded", conv.output[0] + "_bias_folded"
        set_const(wname, w * s)
        set_const(bname, bias * s + b)
        conv.input[:] = [conv.input[0], wname, bname]
        conv.output[0] = add.output[0]
        drop(mul, add)
        count += 1
    # 2. x*clip(x+3, 0, 6)/6  ->  x * HardSigmoid(x; 1/6, 1/2)
    for div in [n for n in nodes if n.op_type == "Div"]:
        six = _scalar(consts, div.input[1])
        if six is None or float(six) != 6.0:
            continue
        mul = next((n for n in nodes if n.op_type == "Mul" and div.input[0] in n.output), None)
        if mul is None or len(consumers(mul.output[0])) != 1:
            continue
        clip = next((n for n in nodes if n.op_type == "Clip" and n.output[0] in mul.input), None)
        if clip is None or len(consumers(clip.output[0])) != 1 or len(clip.input) != 3:
            continue
        lo, hi = _scalar(consts, clip.input[1]), _scalar(consts, clip.input[2])
        if lo is None or hi is None or float(lo) != 0.0 or float(hi) != 6.0:
            continue
        plus = next((n for n in nodes if n.op_type == "Add" and clip.input[0] in n.output), None)
        if plus is None or len(consumers(plus.output[0])) != 1:
            continue
        x = [i for i in plus.input if _scalar(consts, i) is None]
        three = [i for i in plus.input if _scalar(consts, i) is not None]
        if len(x) != 1 or len(three) != 1 or float(_scalar(consts, three[0])) != 3.0:
            continue
        x = x[0]
        if sorted(mul.input) != sorted([x, clip.output[0]]):
            continue
        hs = helper.make_node("HardSigmoid", [x], [div.output[0] + "_hsig"], alpha=1.0 / 6.0, beta=0.5)
        out = helper.make_node("Mul", [x, hs.output[0]], [div.output[0]])
        at = nodes.index(plus)
        drop(plus, clip, mul, div)
        nodes[at:at] = [hs, out]
        count += 1
    # 3. *s -> +b -> conv that pads nothing: into the conv
    for conv in [n for n in nodes if n.op_type == "Conv"]:
        add = next((n for n in nodes if n.op_type == "Add" and conv.input[0] in n.output), None)
        if add is None or conv.input[1] not in consts:
            continue
        pads = next((helper.get_attribute_value(a) for a in conv.attribute if a.name == "pads"), [0])
        auto = next((helper.get_attribute_value(a) for a in conv.attribute if a.name == "auto_pad"), b"NOTSET")
        if any(int(p) for p in pads) or auto not in (b"NOTSET", b"VALID"):
            continue
        mul = next((n for n in nodes if n.op_type == "Mul" and n.output[0] in add.input), None)
        if mul is None:
            continue
        src = [i for i in mul.input if _scalar(consts, i) is None]
        if len(src) != 1:
            continue
        hit = affine_after(src[0]) if len(consumers(src[0])) == 1 else None
        if hit is None or hit[1] is not add or len(consumers(add.output[0])) != 1:
            continue
        _, _, s, b = hit
        w, bias = weight_and_bias(conv)
        wname, bname = conv.output[0] + "_w_prefolded", conv.output[0] + "_b_prefolded"
        set_const(wname, w * s)
        set_const(bname, bias + b * w.sum(axis=(1, 2, 3), dtype=np.float32))
        conv.input[:] = [src[0], wname, bname]
        drop(mul, add)
        count += 1
    used = {i for n in nodes for i in n.input}
    del g.node[:]
    g.node.extend(nodes)
    del g.initializer[:]
    g.initializer.extend(numpy_helper.from_array(consts[k], k) for k in sorted(consts) if k in used)
    m.producer_name = f"{m.producer_name} + dxstudio fold v{FOLD_VERSION} ({count} rewrites)"
    onnx.checker.check_model(m)
    return m


def cache_dir() -> Path:
    """Where folded models are kept: $DXSTUDIO_OCR_CACHE, else the user's cache folder
    ($XDG_CACHE_HOME or ~/.cache; %LOCALAPPDATA% on Windows) / dxstudio / ocr-models."""
    env = os.environ.get("DXSTUDIO_OCR_CACHE")
    if env:
        return Path(env)
    if os.name == "nt" and os.environ.get("LOCALAPPDATA"):
        return Path(os.environ["LOCALAPPDATA"]) / "dxstudio" / "cache" / "ocr-models"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "dxstudio" / "ocr-models"


def folded_model_path(source, folder=None):
    """(path, note): the folded model of the ONNX file `source`, made once under `folder`
    (cache_dir()) and checked on every use against the digest recorded when it was made; a
    cached file whose digest differs is made again. (None, why) when it cannot be made here
    (the onnx package missing, a folder that cannot be written): the caller uses `source`."""
    source = Path(source)
    folder = Path(folder) if folder is not None else cache_dir()
    src_digest = sha256_file(source)
    stem = f"{source.stem}.fold{FOLD_VERSION}.{src_digest[:16]}"
    target, record = folder / f"{stem}.onnx", folder / f"{stem}.json"
    try:
        meta = json.loads(record.read_text())
        if meta.get("source_sha256") == src_digest and target.is_file() and sha256_file(target) == meta.get("sha256"):
            return target, "cached"
    except (OSError, ValueError, AttributeError):
        pass
    try:
        import onnx
    except ImportError:
        return None, "the onnx package is not installed (pip install onnx): the models run unfolded"
    try:
        folded = fold_model(onnx.load(str(source)))
        data = folded.SerializeToString()
        folder.mkdir(parents=True, exist_ok=True)
        from dxstudio.fsutil import write_bytes_atomic

        write_bytes_atomic(target, data)
        meta = {"source": source.name, "source_sha256": src_digest, "fold_version": FOLD_VERSION,
                "sha256": hashlib.sha256(data).hexdigest()}
        write_bytes_atomic(record, (json.dumps(meta, indent=1, sort_keys=True) + "\n").encode())
    except OSError as e:
        return None, f"the folded model could not be written under {folder} ({e}): the models run unfolded"
    except Exception as e:  # a model this rewrite does not know (another rapidocr): run it as it comes
        return None, f"{source.name} could not be folded ({type(e).__name__}: {e}): the models run unfolded"
    return target, "made"
