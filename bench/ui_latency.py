"""The app's GUI thread: the longest time one input event keeps it busy (issue 23: no call over
50 ms), on a copy of the bundled sample (200 receipts) with a tiny model's answers.

    QT_QPA_PLATFORM=offscreen python bench/ui_latency.py [--repeats 3] [--size 1024x768]

Each action is an input event delivered with QTest (a key or a click on the real widget) and
timed from before its delivery to the end of the events it queued (QApplication.processEvents);
background jobs (the model reading pages, Label pages, training) run on their own threads and
are not timed, only what they hand the GUI thread is. Prints the worst and the median of each
action, in wall time and in the GUI thread's CPU time (time.thread_time: what the GUI thread
itself did, which a busy machine inflates less), then one line of JSON. --profile FILE also
writes a cProfile of each action (FILE.<action>.prof) and prints where the slow ones spend it.
--threads also splits each action's worst wall time (Linux /proc/self/task/*/schedstat): the GUI
thread's own CPU, its wait for a core (run queue: other processes, the load), and the rest, when
it was not runnable at all (blocked: Python's lock held by another thread of the app, a mutex,
the disk), beside the CPU each other thread of the app used meanwhile (by its name).
--catch MS samples the GUI thread's Python stack every ~1 ms from a helper thread while an event
is timed and prints the samples of each event whose GUI-thread CPU reaches MS (the rare slow
events: what the GUI thread did in them), with the disk's completions meanwhile (/proc/softirqs
BLOCK) and each event's start on CLOCK_MONOTONIC, to read with `perf record -k CLOCK_MONOTONIC`.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--size", default="1280x900", help="the window's size, WxH (the issue's screens: "
                    "1024x768, 1280x1024, 1920x1080)")
    ap.add_argument("--profile", metavar="FILE", help="write a cProfile of each action's GUI-thread work "
                    "(FILE.<action>.prof) and print the top functions of the slowest actions")
    ap.add_argument("--threads", action="store_true", help="split each action's worst wall time into the GUI "
                    "thread's CPU, run-queue wait and blocked time, and name the app's other threads that ran")
    ap.add_argument("--switch-interval", type=float, metavar="S", help="an experiment: Python's switch interval "
                    "(sys.setswitchinterval) set after the window is made, in seconds")
    ap.add_argument("--catch", type=float, metavar="MS", help="sample the GUI thread's Python stack every ~1 ms "
                    "from a helper thread during each timed event and print the samples of any event whose "
                    "GUI-thread CPU reaches MS (what the rare slow events did), with the garbage collector's passes")
    args = ap.parse_args()
    try:
        width, height = (int(v) for v in args.size.lower().split("x"))
    except ValueError:
        ap.error(f"--size {args.size!r}: expected WxH, e.g. 1024x768")
    profiles: dict = {}

    from PySide6.QtCore import Qt
    from PySide6.QtTest import QTest
    from PySide6.QtWidgets import QApplication, QMessageBox

    from dxstudio.engine.config import size_config
    from dxstudio.engine.container import save_model
    from dxstudio.engine.params import new_params
    from dxstudio.project import Project

    app = QApplication.instance() or QApplication([])
    tmp = Path(tempfile.mkdtemp(prefix="dxstudio-ui-latency-"))
    root = tmp / "p"
    shutil.copytree(ROOT / "resources" / "sample", root, ignore=shutil.ignore_patterns("runs", ".cache"))
    fields = Project.open(root).field_names
    cfg = size_config("tiny", fields)
    model = root / "runs" / "20260101-000000" / "model.safetensors"
    model.parent.mkdir(parents=True)
    save_model(model, cfg, new_params(cfg, 3))
    os.environ["DXSTUDIO_HOME"] = str(tmp / "home")
    QMessageBox.question = staticmethod(lambda *a, **k: QMessageBox.StandardButton.Yes)  # deletes: yes

    from dxstudio.ui.app import MainWindow

    t0 = time.perf_counter()
    w = MainWindow(root, remember=False)
    opened = time.perf_counter() - t0
    if args.switch_interval is not None:
        sys.setswitchinterval(args.switch_interval)
    w.resize(width, height)
    w.show()
    w.activateWindow()
    QTest.qWait(200)
    w.model_answers.wait(600)
    times: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    split: dict[str, dict] = {}  # --threads: the worst event's split, per action
    totals: dict[str, float] = {}  # --threads: the split summed over every event timed
    gui_tid = threading.get_native_id()

    def tasks() -> dict[int, tuple[int, int, int]]:
        """{thread id: (ns on a CPU, ns waiting on a run queue, times it slept)} of every thread
        of this process (the GUI thread's sleeps: each wait for Python's lock is one)."""
        out = {}
        for tid in os.listdir("/proc/self/task"):
            try:
                run, wait = schedstat(tid)
                sleeps = 0
                if int(tid) == gui_tid:
                    with open(f"/proc/self/task/{tid}/status") as f:
                        sleeps = next(int(line.split()[1]) for line in f if line.startswith("voluntary_ctxt"))
            except (OSError, StopIteration):
                continue
            out[int(tid)] = (run, wait, sleeps)
        return out

    def thread_name(tid: int) -> str:
        for t in threading.enumerate():
            if t.native_id == tid:
                return t.name
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                return f"[{f.read().strip()}]"
        except OSError:
            return f"[{tid}]"

    def record_split(name, wall_ms, before, after, record):
        run = (after[gui_tid][0] - before[gui_tid][0]) / 1e6
        queued = (after[gui_tid][1] - before[gui_tid][1]) / 1e6
        if record:  # (the sum over every timed event: how the GUI thread's waits add up)
            for k, v in (("wall_ms", wall_ms), ("gui_cpu_ms", run), ("run_queue_ms", queued),
                         ("blocked_ms", max(wall_ms - run - queued, 0.0))):
                totals[k] = totals.get(k, 0.0) + v
        if wall_ms <= split.get(name, {}).get("wall_ms", -1):
            return
        others = {}
        for tid, (r, _, _) in after.items():
            if tid != gui_tid:
                ms = (r - before.get(tid, (0, 0, 0))[0]) / 1e6
                if ms >= 0.5:
                    label = thread_name(tid)
                    others[label] = others.get(label, 0.0) + ms
        split[name] = {"wall_ms": round(wall_ms, 1), "gui_cpu_ms": round(run, 1), "run_queue_ms": round(queued, 1),
                       "blocked_ms": round(max(wall_ms - run - queued, 0.0), 1),
                       "sleeps": after[gui_tid][2] - before[gui_tid][2],
                       "others_cpu_ms": {k: round(v, 1) for k, v in sorted(others.items(), key=lambda kv: -kv[1])}}

    sampler = _Sampler(threading.get_ident(), gui_tid) if args.catch else None
    caught: list = []
    disk: dict[str, int] = {}  # --catch: the disk's completions (all CPUs) during each action's events, summed

    def measured(name, fn, record=True):
        if sampler is not None:
            sampler.begin()
        prof = None
        if args.profile:
            import cProfile
            prof = profiles.setdefault(name, cProfile.Profile())
            prof.enable()
        before = tasks() if args.threads else None
        start, start_cpu = time.perf_counter(), time.thread_time()
        fn()
        end, end_cpu = time.perf_counter(), time.thread_time()
        if prof is not None:
            prof.disable()
        if sampler is not None:
            samples = sampler.end()
            disk[name] = disk.get(name, 0) + sum(sampler.blocks)
            if (end_cpu - start_cpu) * 1000 >= args.catch:
                caught.append((name, (end - start) * 1000, (end_cpu - start_cpu) * 1000, start, samples,
                               sampler.blocks))
        if before is not None:
            record_split(name, (end - start) * 1000, before, tasks(), record)
        if record:
            times.setdefault(name, []).append((end - start) * 1000)
            cpu.setdefault(name, []).append((end_cpu - start_cpu) * 1000)
        return (end - start) * 1000, (end_cpu - start_cpu) * 1000

    def timed(name, fn):
        measured(name, lambda: (fn(), app.processEvents()))

    def settle(name, busy, timeout=600.0):
        """Turn the event loop until busy() is false, timing each turn (the work of a job
        handed back to the GUI thread counts as the action's): the longest turn is recorded
        as one more event of the action (the idle turns would only drag its median down)."""
        end = time.monotonic() + timeout
        turns = {}
        while busy() and time.monotonic() < end:
            wall, thread = measured(name, app.processEvents, record=False)
            if thread >= turns.get("cpu", -1):
                turns.update(cpu=thread, wall=wall)
            time.sleep(0.002)
        if turns:
            times.setdefault(name, []).append(turns["wall"])
            cpu.setdefault(name, []).append(turns["cpu"])

    def key(widget, k, mod=Qt.NoModifier):
        return lambda: QTest.keyClick(widget, k, mod)

    def tab(i):
        bar = w.tabs.tabBar()
        return lambda: QTest.mouseClick(bar, Qt.LeftButton, pos=bar.tabRect(i).center())

    for _ in range(args.repeats):
        w.view.setFocus()
        for _ in range(5):
            timed("J next page", key(w.view, Qt.Key_J))
        timed("Right (select a word)", key(w.view, Qt.Key_Right))
        timed("1 (set a field)", key(w.view, Qt.Key_1))
        timed("Ctrl+Z undo", key(w.view, Qt.Key_Z, Qt.ControlModifier))
        timed("A accept", key(w.view, Qt.Key_A))
        timed("Q queue", key(w.view, Qt.Key_Q))
        timed("Shift+M take all", key(w.view, Qt.Key_M, Qt.ShiftModifier))
        timed("Ctrl+Z undo", key(w.view, Qt.Key_Z, Qt.ControlModifier))
        timed("Ctrl+F search", key(w, Qt.Key_F, Qt.ControlModifier))
        for ch in "tot":
            timed("type in search", lambda ch=ch: QTest.keyClicks(w.page_list.search, ch))
        timed("Esc clear search", key(w.page_list.search, Qt.Key_Escape))
        for i in range(w.tabs.count()):
            timed(f"tab {w.tabs.tabText(i).replace('&&', '&')}", tab(i))
        # a schema edit: add a field, save (200 label files re-read), rename it, save, undo
        schema = w.schema_panel
        timed("tab Schema", tab(1))
        timed("Add field", lambda: QTest.mouseClick(schema.add_button, Qt.LeftButton))
        app.focusWidget().setText("date") if hasattr(app.focusWidget(), "setText") else None
        schema.table.setFocus()
        busy = lambda: schema.schema_busy
        timed("Save schema (add)", lambda: QTest.mouseClick(schema.save_schema_button, Qt.LeftButton))
        settle("Save schema (add)", busy)
        schema.table.item(schema.table.rowCount() - 1, 0).setText("date_paid")
        timed("Save schema (rename, 200 files)", lambda: QTest.mouseClick(schema.save_schema_button, Qt.LeftButton))
        settle("Save schema (rename, 200 files)", busy)
        for _ in range(2):
            timed("Undo schema edit", lambda: QTest.mouseClick(schema.undo_schema_button, Qt.LeftButton))
            settle("Undo schema edit", busy)
        timed("tab Review", tab(0))
        w.view.setFocus()
        timed("F5 reload (nothing changed on disk)", key(w.view, Qt.Key_F5))
        reloader = getattr(w, "reloader", None)  # (a reload on a background job: its result counts too)
        settle("F5 reload: its result applied (worst turn)", lambda: reloader is not None and reloader.busy)
        settle("tab Train (counting done)", lambda: w.training_panel.counting(), 60)
        # the Train tab's two settings that change its count's sentence: Folds (the folds line
        # only) and Accepted pages only (a recount of every page, on a background job)
        panel = w.training_panel
        timed("tab Train", tab(w.tabs.indexOf(panel)))
        if "folds" in panel.inputs:
            spin = panel.inputs["folds"]
            timed("Folds up", lambda: spin.stepUp())
            timed("Folds down", lambda: spin.stepDown())
        if "accepted_only" in panel.inputs:
            box = panel.inputs["accepted_only"]
            for _ in range(2):
                timed("Accepted only (toggle)", lambda: box.click())
                settle("Accepted only (toggle)", lambda: panel.counting(), 60)
        timed("tab Review", tab(0))
    rows = {name: {"worst_ms": round(max(v), 1), "median_ms": round(statistics.median(v), 1),
                   "cpu_worst_ms": round(max(cpu[name]), 1), "cpu_median_ms": round(statistics.median(cpu[name]), 1),
                   "n": len(v)}
            for name, v in times.items()}
    width = max(len(n) for n in rows)
    print(f"{'':<{width}}  wall: worst / median   GUI-thread CPU: worst / median")
    for name, r in sorted(rows.items(), key=lambda kv: -kv[1]["worst_ms"]):
        print(f"{name:<{width}}  {r['worst_ms']:8.1f} {r['median_ms']:8.1f} ms   {r['cpu_worst_ms']:8.1f} "
              f"{r['cpu_median_ms']:8.1f} ms  ({r['n']})")
    over = [(name, v) for name, v in cpu.items() if max(v) >= 50]
    if over:  # (which of an action's events was slow: the first of its kind, one after a schema edit...)
        print("\nGUI-thread CPU of each event, in order, of the actions with one over 50 ms:")
        for name, v in over:
            print(f"  {name}: " + ", ".join(f"{x:.0f}" for x in v))
    if args.threads:
        print(f"\n{'the worst event of each, split':<{width}}    wall = GUI CPU + run queue + blocked ms (sleeps); "
              "the app's other threads' CPU meanwhile")
        for name, r in sorted(rows.items(), key=lambda kv: -kv[1]["worst_ms"]):
            sp = split.get(name)
            if sp is None:
                continue
            others = ", ".join(f"{k} {v:.1f}" for k, v in list(sp["others_cpu_ms"].items())[:4]) or "-"
            print(f"{name:<{width}}  {sp['wall_ms']:7.1f} = {sp['gui_cpu_ms']:6.1f} + {sp['run_queue_ms']:6.1f} + "
                  f"{sp['blocked_ms']:6.1f} ({sp['sleeps']:3d})   {others}")
            r["split"] = sp
        print(f"{'all events timed, summed':<{width}}  {totals['wall_ms']:7.0f} = {totals['gui_cpu_ms']:6.0f} + "
              f"{totals['run_queue_ms']:6.0f} + {totals['blocked_ms']:6.0f}")
    if args.profile:
        import pstats
        for name, prof in profiles.items():
            safe = "".join(c if c.isalnum() else "_" for c in name)
            prof.dump_stats(f"{args.profile}.{safe}.prof")
        for name, r in sorted(rows.items(), key=lambda kv: -kv[1]["cpu_worst_ms"]):
            if r["cpu_worst_ms"] < 50:
                break
            print(f"\n== {name} (summed over {r['n']} events) ==")
            pstats.Stats(profiles[name]).sort_stats("cumulative").print_stats(25)
    if sampler is not None:
        sampler.stop = True
        print("\ndisk completions during each action's events (/proc/softirqs BLOCK, all CPUs): "
              + ", ".join(f"{k} {v}" for k, v in sorted(disk.items(), key=lambda kv: -kv[1]) if v))
        print(f"\n{len(caught)} event(s) with GUI-thread CPU >= {args.catch:g} ms:")
        for name, wall, thread, start, samples, blocks in caught:
            print(f"== {name}: wall {wall:.1f} ms, GUI CPU {thread:.1f} ms, disk completions per CPU {blocks}, "
                  f"{len(samples)} samples, from "
                  f"{start:.6f} s (CLOCK_MONOTONIC, for perf record -k CLOCK_MONOTONIC) ==")
            _print_samples(samples, start)
    print(f"window opened in {opened * 1000:.0f} ms (not an input event); window {w.width()}x{w.height()}; "
          f"switch interval {sys.getswitchinterval() * 1000:g} ms")
    worst = max(rows.items(), key=lambda kv: kv[1]["worst_ms"])
    w.model_answers.shutdown()
    w.confirm_close = False
    w.close()
    shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps({"actions": rows, "totals": {k: round(v, 1) for k, v in totals.items()},
                      "switch_interval_ms": sys.getswitchinterval() * 1000, "worst": {"action": worst[0], **worst[1]}, "open_ms": round(opened * 1000),
                      "size": f"{w.width()}x{w.height()}"}))
    return 0


def schedstat(tid) -> tuple[int, int]:
    """(ns on a CPU, ns waiting on a run queue) of thread `tid` of this process (Linux)."""
    with open(f"/proc/self/task/{tid}/schedstat") as f:
        run, wait = f.read().split()[:2]
    return int(run), int(wait)


class _Sampler(threading.Thread):
    """--catch: the GUI thread's Python stack every ~1 ms while an event is timed, with the GUI
    thread's CPU so far (schedstat) and the garbage collector's passes. (The sampler needs Python's
    lock: a Qt call that holds it shows as a jump of CPU between two samples.)"""

    def __init__(self, ident: int, native_id: int):
        super().__init__(name="ui-latency-sampler", daemon=True)
        import gc
        self.gui_ident, self.gui_tid = ident, native_id
        self.active, self.stop, self.samples = False, False, []
        gc.callbacks.append(self._gc)
        self.start()

    def _cpu(self) -> float:
        return schedstat(self.gui_tid)[0] / 1e6

    def _gc(self, phase, info):
        if self.active:
            self.samples.append((time.perf_counter(), self._cpu(), (f"gc {phase} gen {info.get('generation')}",)))

    @staticmethod
    def block_irqs() -> list[int]:
        """The disk's completions handled so far on each CPU (/proc/softirqs BLOCK): a kernel
        without IRQ_TIME_ACCOUNTING charges their handling to whichever thread ran there."""
        try:
            with open("/proc/softirqs") as f:
                for line in f:
                    if line.split(":")[0].strip() == "BLOCK":
                        return [int(v) for v in line.split(":")[1].split()]
        except OSError:
            pass
        return []

    def begin(self):
        self.samples = []
        self.blocks = self.block_irqs()
        self.active = True

    def end(self) -> list:
        self.active = False
        self.blocks = [b - a for a, b in zip(self.blocks, self.block_irqs())]
        return self.samples

    def run(self):
        while not self.stop:
            time.sleep(0.001)
            if not self.active:
                continue
            frame = sys._current_frames().get(self.gui_ident)
            stack = []
            while frame is not None and len(stack) < 40:
                code = frame.f_code
                stack.append(f"{Path(code.co_filename).name}:{frame.f_lineno} {code.co_name}")
                frame = frame.f_back
            self.samples.append((time.perf_counter(), self._cpu(), tuple(stack)))


def _print_samples(samples, start):
    """One line a run of samples with the same stack: time from the event's start, the GUI
    thread's CPU used since the previous line, how many samples the run merged and the longest
    gap between two samples in it (a gap: the sampler waited for Python's lock, held by the GUI
    thread in a Qt call), the innermost frames."""
    if not samples:
        return
    prev_cpu, prev_t = samples[0][1], samples[0][0]
    last, count, gap = None, 0, 0.0
    for t, c, stack in samples:
        gap = max(gap, t - prev_t)
        prev_t = t
        count += 1
        if stack == last:
            continue
        inner = " < ".join(stack[:7])
        print(f"  {1000 * (t - start):7.1f} ms  cpu +{c - prev_cpu:6.1f}  n {count:3d} gap {1000 * gap:5.1f}  {inner}")
        prev_cpu, last, count, gap = c, stack, 0, 0.0


if __name__ == "__main__":
    sys.exit(main())
