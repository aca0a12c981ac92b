"""onnxruntime session options, the folded models (dxstudio/ocr_graph.py) and int8 dynamic
quantisation, on rapidocr's recogniser and detector: process CPU ms per run (median of 7, the
settings interleaved run by run so the machine's load falls on each alike) at fixed input
sizes, and how far each output is from the model as it comes (docs/ocr.md, "Fifth round").

    python bench/ocr_sessions.py            # needs the ocr extra (onnx, onnxruntime, rapidocr)

The words these settings read are measured on receipts by bench/ocr_settings.py.
"""
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402


def main() -> None:
    import onnxruntime as ort
    import rapidocr_onnxruntime

    from dxstudio.ocr_graph import folded_model_path

    models = Path(rapidocr_onnxruntime.__file__).parent / "models"
    tmp = Path(tempfile.mkdtemp(prefix="ocr-sessions-"))

    def opts(level="ORT_ENABLE_ALL", arena=True, pattern=True):
        o = ort.SessionOptions()
        o.intra_op_num_threads = o.inter_op_num_threads = 1
        o.log_severity_level = 4
        o.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
        o.enable_cpu_mem_arena = arena
        o.enable_mem_pattern = pattern
        o.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        return o

    for name, shapes in (("ch_PP-OCRv4_rec_infer.onnx", [(1, 3, 48, 160), (1, 3, 48, 480), (4, 3, 48, 320)]),
                         ("ch_PP-OCRv4_det_infer.onnx", [(1, 3, 736, 544)])):
        src = models / name
        folded, note = folded_model_path(src, tmp)
        if folded is None:
            raise SystemExit(f"the folded model: {note}")
        files = {"as it comes": src, "folded": folded}
        try:
            from onnxruntime.quantization import QuantType, quantize_dynamic

            for tag, ops in (("int8 MatMul", ["MatMul"]), ("int8 Conv+MatMul", ["Conv", "MatMul"])):
                out = tmp / f"{src.stem}.{tag.replace(' ', '_').replace('+', '_')}.onnx"
                quantize_dynamic(str(folded), str(out), op_types_to_quantize=ops, weight_type=QuantType.QUInt8)
                files[f"folded, {tag}"] = out
        except ImportError as e:
            print(f"no quantisation: {e}")
        def session(path, o):
            return ort.InferenceSession(str(path), o, providers=["CPUExecutionProvider"])

        runs = {f"{f}, ORT_ENABLE_ALL": session(path, opts()) for f, path in files.items()}
        for level in ("ORT_ENABLE_EXTENDED", "ORT_ENABLE_BASIC"):
            runs[f"folded, {level}"] = session(folded, opts(level))
        runs["folded, arena off"] = session(folded, opts(arena=False))
        runs["folded, memory pattern off"] = session(folded, opts(pattern=False))
        inp = runs["as it comes, ORT_ENABLE_ALL"].get_inputs()[0].name
        for shape in shapes:
            x = np.random.default_rng(0).uniform(-1, 1, shape).astype(np.float32)
            ref = runs["as it comes, ORT_ENABLE_ALL"].run(None, {inp: x})[0]
            diff = {k: float(np.abs(s.run(None, {inp: x})[0] - ref).max()) for k, s in runs.items()}
            took = {k: [] for k in runs}
            for _ in range(7):
                for k, s in runs.items():
                    t = time.process_time()
                    s.run(None, {inp: x})
                    took[k].append(time.process_time() - t)
            print(f"{name} input {shape}: process CPU ms per run (median of 7); max |output - as it comes|")
            for k in runs:
                print(f"  {k:40s} {np.median(took[k]) * 1000:8.1f}   {diff[k]:.2e}")


if __name__ == "__main__":
    main()
