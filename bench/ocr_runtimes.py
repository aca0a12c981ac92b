"""The same rapidocr models on two runtimes, onnxruntime (the shipped one) and OpenVINO, one
thread each: process CPU ms per run (median, the runtimes interleaved run by run so the machine's
load falls on each alike) at fixed input sizes, and how far OpenVINO's outputs are from
onnxruntime's (max abs difference) (docs/ocr.md, "Eleventh round").

    PYTHONPATH=$PWD:/work/ovpkgs python bench/ocr_runtimes.py [RUNS]   # needs the ocr extra and openvino
    PYTHONPATH=$PWD:/work/ovpkgs python bench/ocr_runtimes.py pages IMG...

`pages`: whole reads (ocr_file, the work of an import's worker) of each image by the shipped
engine and by the same engine with its sessions swapped, interleaved page by page: process CPU s
a page (median, mean; each variant's model compilations included, as a worker would pay them) and
pages whose words are the shipped engine's, to the word and box. Variants: `ov` every model on
OpenVINO as it comes (dynamic shapes); `ov-det-static` the detector on OpenVINO compiled for each
input shape it meets (a cache of compiled models by shape), the others on onnxruntime folded;
`ftz` onnxruntime with denormals flushed to zero (session.set_denormal_as_zero).

The models are the folded ones dxstudio runs (dxstudio/ocr_graph.py, made here in a temporary
folder) and the three as they come. OpenVINO compiles each model once with dynamic dimensions (as
the engine would), and once per input shape with the shape fixed (`static shape`), to see what a
fixed set of padded sizes would buy. Nothing of OpenVINO's is cached on disk (no CACHE_DIR).
"""
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

# (model, input shapes): the recogniser at the shipped 44 high (a short line padded to 147, a long
# one) and 48 high (small print), the detector at a receipt's 736 on its shorter side
CASES = (("ch_PP-OCRv4_rec_infer.onnx", [(1, 3, 44, 147), (1, 3, 44, 400), (1, 3, 48, 160), (1, 3, 48, 800)]),
         ("ch_PP-OCRv4_det_infer.onnx", [(1, 3, 736, 544), (1, 3, 1088, 736)]),
         ("ch_ppocr_mobile_v2.0_cls_infer.onnx", [(1, 3, 48, 192)]))


def main() -> None:
    import rapidocr_onnxruntime

    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 9
    models = Path(rapidocr_onnxruntime.__file__).parent / "models"
    with tempfile.TemporaryDirectory(prefix="ocr-runtimes-") as tmp:
        compare(Path(tmp), runs, models)


def compare(tmp, runs, models) -> None:
    """Each model of CASES at each of its shapes on each runtime, timed and compared."""
    import onnxruntime as ort
    import openvino as ov

    from dxstudio.ocr import session_options
    from dxstudio.ocr_graph import folded_model_path

    core = ov.Core()
    config = {"INFERENCE_NUM_THREADS": 1, "NUM_STREAMS": 1, "PERFORMANCE_HINT": "LATENCY"}
    print(f"onnxruntime {ort.__version__}, openvino {ov.__version__}; process CPU ms per run, median of {runs}")
    for name, shapes in CASES:
        src = models / name
        folded, note = folded_model_path(src, tmp)
        if folded is None:
            raise SystemExit(f"the folded model: {note}")
        ort_sess = ort.InferenceSession(str(folded), session_options(ort), providers=["CPUExecutionProvider"])
        feed = ort_sess.get_inputs()[0].name
        compiled, compile_s = {}, {}
        for tag, path, extra in (("openvino, folded", folded, {}),
                                 ("openvino, folded, f32 hint", folded, {"INFERENCE_PRECISION_HINT": "f32"}),
                                 ("openvino, as it comes", src, {}),
                                 ("openvino, as it comes, f32 hint", src, {"INFERENCE_PRECISION_HINT": "f32"})):
            t = time.process_time()
            compiled[tag] = core.compile_model(str(path), "CPU", {**config, **extra})
            compile_s[tag] = time.process_time() - t
        for shape in shapes:
            x = np.random.default_rng(0).uniform(-1, 1, shape).astype(np.float32)
            fixed = {}
            for tag, path in (("openvino, folded, static shape", folded), ("openvino, as it comes, static shape", src)):
                static = core.read_model(str(path))
                static.reshape({static.inputs[0]: ov.PartialShape(list(shape))})
                t = time.process_time()
                fixed[tag] = core.compile_model(static, "CPU", config)
                compile_s[tag] = time.process_time() - t
            fns = {"onnxruntime, folded (shipped)": lambda: ort_sess.run(None, {feed: x})[0]}
            for tag, cm in {**compiled, **fixed}.items():
                req = cm.create_infer_request()
                fns[tag] = (lambda r: lambda: r.infer({0: x})[0].copy())(req)
            ref = fns["onnxruntime, folded (shipped)"]()
            outs = {tag: fn() for tag, fn in fns.items()}  # the first run of each: warm-up
            times = {tag: [] for tag in fns}
            for _ in range(runs):
                for tag, fn in fns.items():
                    t = time.process_time()
                    fn()
                    times[tag].append(time.process_time() - t)
            base = float(np.median(times["onnxruntime, folded (shipped)"]))
            print(f"\n{src.stem} {shape}:")
            for tag in fns:
                med = float(np.median(times[tag]))
                diff = float(np.abs(outs[tag] - ref).max())
                made = f"  (compiled in {compile_s[tag]:.2f} s CPU)" if tag in compile_s else ""
                print(f"  {tag:36s} {med * 1e3:8.2f} ms  x{base / med:5.2f} vs onnxruntime  max |diff| {diff:.2e}{made}")


class OpenVinoSession:
    """What rapidocr's session wrapper calls of an onnxruntime InferenceSession (get_inputs,
    get_outputs, run), on OpenVINO's CPU plugin, one thread; `static`: compiled once per input
    shape (kept by shape) instead of once with dynamic dimensions."""

    def __init__(self, core, path, config, static=False):
        self.core, self.path, self.config, self.static = core, str(path), config, static
        self.model = core.read_model(self.path)
        self.compiled = {}
        if not static:
            self.compiled[None] = core.compile_model(self.model, "CPU", config).create_infer_request()

    def get_inputs(self):
        return [type("Input", (), {"name": p.get_any_name()}) for p in self.model.inputs]

    def get_outputs(self):
        return [type("Output", (), {"name": p.get_any_name()}) for p in self.model.outputs]

    def run(self, names, feed):
        import openvino as ov

        x = next(iter(feed.values()))
        key = x.shape if self.static else None
        req = self.compiled.get(key)
        if req is None:
            model = self.core.read_model(self.path)
            model.reshape({model.inputs[0]: ov.PartialShape(list(x.shape))})
            req = self.compiled[key] = self.core.compile_model(model, "CPU", self.config).create_infer_request()
        return [req.infer({0: x})[0].copy()]


def variant(name):
    """The shipped engine, its sessions swapped as the variant says (see the module's text)."""
    import onnxruntime as ort

    from dxstudio import ocr

    eng = ocr.RapidEngine()
    wrappers = (eng.ocr.text_det.infer, eng.ocr.text_cls.infer, eng.ocr.text_rec.session)
    if name == "shipped":
        return eng
    if name == "ftz":
        for w in wrappers:
            opts = ocr.session_options(ort)
            opts.add_session_config_entry("session.set_denormal_as_zero", "1")
            w.session = ort.InferenceSession(w.session._model_path, sess_options=opts,
                                             providers=["CPUExecutionProvider"])
        return eng
    import openvino as ov
    import rapidocr_onnxruntime

    core = ov.Core()
    config = {"INFERENCE_NUM_THREADS": 1, "NUM_STREAMS": 1, "PERFORMANCE_HINT": "LATENCY"}
    models = Path(rapidocr_onnxruntime.__file__).parent / "models"
    names = ("ch_PP-OCRv4_det_infer.onnx", "ch_ppocr_mobile_v2.0_cls_infer.onnx", "ch_PP-OCRv4_rec_infer.onnx")
    if name == "ov":
        for w, n in zip(wrappers, names):
            w.session = OpenVinoSession(core, models / n, config)
    elif name == "ov-det-static":
        wrappers[0].session = OpenVinoSession(core, models / names[0], config, static=True)
    else:
        raise SystemExit(f"unknown variant {name!r}")
    return eng


def pages(paths) -> None:
    import os

    from dxstudio import ocr

    names = ["shipped"] + [v for v in os.environ.get("VARIANTS", "ov,ov-det-static,ftz").split(",") if v]
    blank = np.full((64, 64, 3), 255, np.uint8)
    ocr.read_image_bytes(ocr.encode_image(blank, "JPEG"), "blank.jpg", ".jpg")
    engines, per, same = {}, {n: [] for n in names}, dict.fromkeys(names, 0)
    for n in names:
        t = time.process_time()
        engines[n] = variant(n)
        engines[n].lines(blank)
        print(f"{n}: engine start {time.process_time() - t:.2f} s CPU", flush=True)
    for p in paths:
        p = Path(p)
        data = p.read_bytes()
        words = {}
        for n, eng in engines.items():
            ocr._engines["rapidocr"] = eng
            t = time.process_time()
            got = ocr.ocr_file("rapidocr", str(p), p.suffix, data)
            per[n].append(time.process_time() - t)
            words[n] = [page["words"] for page in got]
            same[n] += words[n] == words["shipped"]
    count = len(per["shipped"])
    base = float(np.median(per["shipped"]))
    print(f"{count} images; process CPU s a page, one thread")
    for n in names:
        med, mean = float(np.median(per[n])), float(np.mean(per[n]))
        print(f"{n:14s} median {med:.3f} mean {mean:.3f} s/page: {1 / med:.2f} / {1 / mean:.2f} pages/s/core "
              f"(median / mean page), x{base / med:.2f} the shipped median | same words {same[n]}/{count}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "pages":
        pages(sys.argv[2:])
    else:
        main()
