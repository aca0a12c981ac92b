"""Shared fixtures, built from files inside the repository (the bundled sample project
resources/sample, tests/fixtures), and the `shared_data` marker.

A test that truly needs the real data sets in ../shared/data (beside the repository) carries
`@pytest.mark.shared_data("sroie-train", ...)`, naming the folders it reads; without them it
is skipped with a reason naming the missing folder, and the pytest header and summary say how
many tests that was. Every other test runs anywhere.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# The tests compile the engine's kernels on first need, as before, on the kernel path they ask
# for (dxstudio.engine.readiness; tests/test_first_use.py runs the first-use path itself), and
# no test leaves a detached compile behind.
os.environ.setdefault("DXSTUDIO_ENGINE_PREPARED", "1")
os.environ.setdefault("DXSTUDIO_BACKGROUND_PREPARE", "0")

from dxstudio.fsutil import write_json_atomic  # noqa: E402  (after the settings above)

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
SAMPLE = REPO / "resources" / "sample"
FIXTURES = Path(__file__).resolve().parent / "fixtures"

RECEIPTS = 16  # pages in the receipts project
RECEIPT_SETTINGS = {"size": "tiny", "epochs": 2, "batch": 4, "warmup": 2, "lr": 0.01, "auto_folds": 0,
                    "backbone_scale": 0.5, "heldout_fraction": 0.25, "checkpoint_every": 3}


# -- the shared_data marker ------------------------------------------------------------------
def shared_paths(item) -> list[Path]:
    """The ../shared/data folders a test's shared_data marks name (the whole folder if none)."""
    paths = []
    for mark in item.iter_markers("shared_data"):
        paths += [SHARED / a for a in mark.args] or [SHARED]
    return paths


def pytest_configure(config):
    if getattr(config.option, "loadscopereorder", None) and getattr(config.option, "dist", "no") == "loadfile":
        config.option.loadscopereorder = False  # pytest_collection_modifyitems orders the files
    config._shared_data_skipped = []
    config.summary_notes = []  # one-line notes a test leaves for the end of the run


def pytest_report_header(config):
    if SHARED.is_dir():
        return f"shared_data: {SHARED} is here; tests marked shared_data run"
    return f"shared_data: {SHARED} is missing; tests marked shared_data will be skipped"


# The test files that call no compiled kernel of the engine and start no process (measured:
# each file alone, recording Numba's first compile of a dxstudio function and subprocess.Popen;
# about 60 s of the suite on a quiet machine). Under pytest-xdist they go first: the worker that
# does not prepare the kernels runs them while the other compiles (PreparationWait), and waits
# before the first test of any other file. A file missing here only makes it wait sooner; one
# listed that compiles a kernel waits inside the test (the summary names it: take it off).
KERNEL_FREE_FILES = frozenset(f"tests/{name}.py" for name in """
    test_base_model test_bench_common test_blocks test_cli test_cli_first_use test_corpus
    test_field_errors test_gbdt_baseline test_grounding test_grounding_absent test_grounding_scale
    test_hostile_imports test_importers test_inputs test_inputs_context test_labelling
    test_labelling_hostile test_learning_curve test_localfirst test_mean_agreement test_project
    test_review_session test_routing test_schedule test_schema_edit test_scoring test_settings
    ui/test_close_hang ui/test_documents_review ui/test_engine_preparing ui/test_localfirst_ui
    ui/test_review ui/test_start_text ui/test_unknown_setting ui/test_walk
    """.split())


def _file_of(item) -> str:
    return item.nodeid.split("::")[0]


def pytest_collection_modifyitems(config, items):
    # The files holding a test that waits for a build for another CPU (the cpu_build mark) run
    # last, each in its own order: the builds compile in the background from the start of the
    # run, and a worker that reached such a test early sat idle until its build was done. The
    # same order on every pytest-xdist worker (it compares their collections).
    # pytest-xdist's loadfile hands out the files largest first (its --loadscope-reorder, on by
    # default, which would put these early again): under xdist that order is made here (the
    # kernel-free files first, then the others, each largest first; the late files after them),
    # and xdist's own reordering is turned off (pytest_configure).
    late = {_file_of(item) for item in items if item.get_closest_marker("cpu_build")}
    files = {}
    for item in items:
        files.setdefault(_file_of(item), []).append(item)
    order = list(files)
    if getattr(config, "workerinput", None) is not None:
        order.sort(key=lambda f: (f not in KERNEL_FREE_FILES, -len(files[f])))  # stable
    items[:] = [i for f in order if f not in late for i in files[f]] + [i for f in order if f in late for i in files[f]]
    for item in items:
        missing = [p for p in shared_paths(item) if not p.exists()]
        if missing:
            config._shared_data_skipped.append(item.nodeid)
            item.add_marker(pytest.mark.skip(
                reason=f"shared_data: {missing[0]} is missing (the real data sets beside the repository)"))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    for note in config.summary_notes:
        terminalreporter.write_line(note)
    reports = terminalreporter.stats.get("skipped", [])
    # those selected and skipped (from the reports: under pytest-xdist the workers collect)
    skipped = [r for r in reports if _skip_reason(r).startswith("shared_data: ")]
    if skipped:
        terminalreporter.write_line(
            f"shared_data: {len(skipped)} test(s) skipped because data in {SHARED} is missing "
            f"(pytest -rs lists them)", yellow=True)
    for reason, count in skip_reasons(reports):
        terminalreporter.write_line(f"skipped {count}: {reason}", yellow=True)


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return reason.removeprefix("Skipped: ")


def skip_reasons(reports) -> list[tuple[str, int]]:
    """Every reason a test was skipped, with how many (most first): a missing optional package
    (Ray without the cluster extra) is counted as plainly as missing data. A shared_data skip
    names the folder missing; they are counted together."""
    from collections import Counter

    counts = Counter()
    for r in reports:
        reason = _skip_reason(r)
        if reason.startswith("shared_data: "):
            reason = f"shared_data: data in {SHARED} is missing"
        counts[reason] += 1
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


# -- a hung test ends, with its name -----------------------------------------------------------
@pytest.hookimpl(tryfirst=True)
def pytest_timeout_set_timer(item, settings):
    """pytest-timeout's thread method (pyproject: timeout_method = "thread"; a SIGALRM does not
    reach a process asleep in Qt's event loop), with the test's name first: the thread method
    dumps every thread's stack and ends the run, and under -q nothing else would name it."""
    import threading

    if settings.method != "thread" or not settings.timeout:
        return None  # pytest-timeout's own handling

    def expired():
        import pytest_timeout
        capman = item.config.pluginmanager.getplugin("capturemanager")
        if capman:  # past the output capture, to the terminal (timeout_timer then shows the captured)
            capman.suspend_global_capture(item)
        terminal = item.config.get_terminal_writer()
        terminal.line(f"\nTIMEOUT: {item.nodeid} ran over {settings.timeout:g} s; its output and the "
                      "stacks of every thread follow", red=True)
        terminal.flush()
        folder = getattr(item.config, "workerinput", {}).get("dx_timeouts")
        if folder:  # a pytest-xdist worker: its terminal is not shown; the controller reports this file
            import faulthandler

            with open(Path(folder) / _timeout_file(item.nodeid), "w") as fh:
                fh.write(f"TIMEOUT: {item.nodeid} ran over {settings.timeout:g} s; the stacks of every thread:\n")
                fh.flush()
                faulthandler.dump_traceback(fh, all_threads=True)
        for build in getattr(item.config, "_cpu_builds", {}).values():
            build.stop()  # the run ends here: no build compiles on after it
        pytest_timeout.timeout_timer(item, settings)

    def start():
        timer = threading.Timer(settings.timeout, expired)
        timer.name = f"pytest_timeout {item.nodeid}"
        timer.daemon = True
        item._dx_timer = timer
        timer.start()

    item._dx_restart_timer = start  # a wait for the other worker's preparation starts it afresh
    start()
    return True


def terminal_fd(config) -> int:
    """The run's own stderr, past pytest's output capture (which replaces descriptor 2 with a
    file while a test runs): where a watchdog that ends the process must write, or its report
    is lost with the process."""
    capman = config.pluginmanager.getplugin("capturemanager")
    try:
        saved = capman._global_capturing.err.targetfd_save  # pytest's FDCapture of descriptor 2
    except AttributeError:  # no fd capture (-s, --capture=sys), or another pytest
        return sys.__stderr__.fileno()
    return saved


def _timeout_file(nodeid: str) -> str:
    import hashlib

    return hashlib.sha256(nodeid.encode()).hexdigest()[:24] + ".txt"


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """pytest-xdist's controller, for each worker: where a timed-out test leaves its stacks, and
    where the first worker leaves the builds for other CPUs."""
    import tempfile

    config = node.config
    if not getattr(config, "_dx_shared", None):
        config._dx_shared = Path(tempfile.mkdtemp(prefix="dx-xdist-"))
        (config._dx_shared / "timeouts").mkdir()
        (config._dx_shared / "builds").mkdir()
    node.workerinput["dx_timeouts"] = str(config._dx_shared / "timeouts")
    node.workerinput["dx_builds"] = str(config._dx_shared / "builds")


@pytest.hookimpl(optionalhook=True)
def pytest_handlecrashitem(crashitem, report, sched):
    """A worker ended (a timeout's os._exit): say the test's name and, if it timed out, its stacks."""
    folder = getattr(sched.config, "_dx_shared", None)
    note = folder / "timeouts" / _timeout_file(crashitem) if folder else None
    if note and note.is_file():
        report.longrepr = f"{report.longrepr}\n{note.read_text(errors='replace')}"


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """--dist loadfile (the README's command) with pytest-xdist 3.8's scheduler mended after a
    worker dies (a segfault, a timeout's os._exit): that scheduler sends the dead worker's whole
    workload back to the queue, the files it had finished and the test it died on included, so
    the test that killed one worker kills the next, and a replacement handed only finished tests
    waits forever (pytest-xdist issues 784, 1323, 1327: a run hung in Qt-free code for minutes
    here). The mended one requeues only the unfinished tests, never the one it died on (reported
    failed, with its name, once), hands a worker more while it holds two tests or fewer, and once
    nothing is left to hand out tells every worker to end after what it holds."""
    if getattr(config.option, "dist", "no") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class LoadFileAfterCrash(LoadFileScheduling):
        def remove_node(self, node):
            workload = self.assigned_work.pop(node)
            pending = [(scope, nodeid) for scope, unit in workload.items() for nodeid, done in unit.items() if not done]
            if not pending:
                return None
            scope, crashitem = pending[0]  # the test it was running: tests run in the order sent
            workload[scope][crashitem] = True
            self.workqueue.update({s: unit for s, unit in workload.items() if not all(unit.values())})
            for other in self.assigned_work:
                self._reschedule(other)
            return crashitem

        def _reschedule(self, node):
            if node.shutting_down:
                return
            # a worker runs a test once it holds the next one (or is told to end): a replacement
            # handed one unit of one test would wait for ever, so give it more while it holds few
            while self.workqueue and self._pending_of(self.assigned_work[node]) <= 2:
                self._assign_work_unit(node)
            if not self.workqueue:  # a worker ends once it has run what it holds
                for other in self.assigned_work:
                    if not other.shutting_down:
                        other.shutdown()

    return LoadFileAfterCrash(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_cancel_timer(item):
    """Cancel only once the test's teardown is over. pytest-timeout also cancels when a test
    fails (pytest_exception_interact, meant for pdb), which left the teardown unguarded: the
    hang seen in CI was a failed test's teardown, pytest-qt closing a window that asked a
    question nobody answered."""
    timer = getattr(item, "_dx_timer", None)
    if timer is None:
        return None
    if getattr(item, "_dx_torn_down", False):
        timer.cancel()
        timer.join()
        item._dx_timer = None
    return True


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item):
    yield
    item._dx_torn_down = True


# -- the engine's kernels built for other CPUs, in the background from the session's start ----
# tests/test_kernel_paths.py compares the bytes of the fast kernels compiled afresh for other
# instruction sets (tests/cpu_subprocess_check.py in a subprocess: all the kernels, about 100 s
# of CPU each). A test asks for its build with @pytest.mark.cpu_build(NAME) and the `cpu_build`
# fixture; every build the selected tests ask for starts when collection ends, all at once, so
# they compile on a free core while the suite goes on instead of one after another in the
# middle of it. Under pytest-xdist (-n 2, the README's and CI's command) the first worker to
# finish collecting claims each build, starts it at once and leaves the result in a folder the
# controller gave every worker, where the other reads it (or builds it itself, should that
# worker have died).
# Each is bounded (CPU_BUILD_LIMIT, then killed; its tests' timeout is that, not the suite's
# 600 s, as under load a build waited for takes longer) and none outlives the session.
HASWELL_FEATURES = "+avx,+avx2,+fma,+bmi,+bmi2,+f16c,+popcnt,+sse4.2,+cx16,+movbe,+lzcnt"
CPU_BUILDS = {  # name: (NUMBA_CPU_NAME, NUMBA_CPU_FEATURES); None: the host's
    "generic": ("generic", None),  # baseline x86-64: SSE2 only
    "haswell": ("haswell", HASWELL_FEATURES),  # AVX2, and FMA available to LLVM
    "host": (None, None),  # the host's own instruction set, compiled afresh
}
# the builds whose target has no FMA and no register wider than xmm: their assembly is read for a
# sample of kernels (cpu_subprocess_check.py DXSTUDIO_CHECK_ASSEMBLY), 7-9 s of CPU less each
ASSEMBLY_SAMPLE_BUILDS = {"generic"}
# One thread: a build for another CPU runs the compiled sections' serial builds only and never
# compiles their parallel ones (runtime.section_par), half of its CPU (53 s of 105 for the
# generic build). The parallel builds are the same bodies with the rows over threads; their
# bytes are the serial ones' on the host (test_kernel_paths, test_fused_*: parallel builds).
CPU_BUILD_THREADS = "1"
CPU_BUILD_LIMIT = 1800  # seconds of wall time for one build (about 100 s of CPU when idle)
# Where this process compiled the host's kernels itself (a fresh clone, CI: prepare_engine below
# compiles them all), their assembly is at hand: the host build's facts (no FMA, the registers)
# come from it, and the build it stands for is not compiled a second time. "host": always;
# "haswell": where the host's vector instructions are the haswell build's (host_isa_is_haswells).
# Only where that test is selected, and not for a heavy test. Under pytest-xdist the worker that
# compiled the kernels (the other loads them from the cache it filled) leaves their facts for
# the other (prepare_engine), so both skip the same build.
COVERED_HERE_REASON = ("this run compiled the host's kernels itself, or loaded those a run with the same sources "
                       "compiled ({}): "
                       "test_kernel_paths.py::test_the_host_build_compiled_in_this_run_has_no_fma checks that build; "
                       "the generic build checks other bytes; -m heavy builds this one too")


def host_isa_is_haswells() -> bool:
    """The host's vector instruction set is the haswell build's: AVX2 with FMA, no AVX-512 (the
    features that decide the kernels' code: register width and whether LLVM could fuse a
    multiply-add). Then the haswell build is this CPU's check too."""
    import platform

    from llvmlite import binding as ll

    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    features = ll.get_host_cpu_features()
    return bool(features.get("avx2")) and bool(features.get("fma")) and not features.get("avx512f")


def host_build_here(elsewhere: dict | None = None) -> dict | None:
    """cpu_subprocess_check.assembly_facts() of this process's kernels when it compiled every
    one it holds (none loaded from Numba's cache) or `elsewhere` has the assembly of those it
    loaded (the other worker compiled them beside it in this run), else None; after computing the digests the
    builds for other CPUs compute (so that every kernel they compile is among these). Facts
    computed here are stored (host_facts_file); a process that loaded the kernels from the cache
    reads the facts a run with the same sources, tools and CPU stored ("stored": their file), so
    a rerun does not compile the build they stand for either."""
    check = load_script(REPO / "tests" / "cpu_subprocess_check.py")
    check.digests()
    facts = check.assembly_facts(sample=False, elsewhere=elsewhere)
    stored = host_facts_file()
    if facts["assembly_chars"] > 0 and facts["kernels_without_assembly"] == 0:
        if stored is not None:
            write_json_atomic(stored, facts)
        return facts
    if stored is not None and stored.is_file():
        try:
            return dict(json.loads(stored.read_text()), stored=str(stored))
        except ValueError:  # a damaged file: as if none
            return None
    return None


def host_facts_file() -> "Path | None":
    """Where the host build's facts for these engine sources, tools and CPU (its name and
    features) are stored beside the builds' results; None with DXSTUDIO_TEST_BUILD_CACHE=0."""
    from llvmlite import binding as ll

    features = ",".join(sorted(k for k, v in ll.get_host_cpu_features().items() if v))
    return build_result_file("host-facts", dict(os.environ, DXSTUDIO_HOST_FEATURES=features))


def _die_with_parent():
    """In the build's child, before exec: killed when the pytest process that started it ends,
    however it ends (a timeout's os._exit skips every cleanup; such a build once compiled on for
    half an hour after its run)."""
    import ctypes
    import signal

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG (Linux)
    except (OSError, AttributeError):
        pass


class CpuBuild:
    """One cpu_subprocess_check.py subprocess, started now; `publish`: a folder to leave its
    outcome in (NAME.json, written whole) for other workers, from a thread as soon as it ends."""

    def __init__(self, name, folder, publish=None):
        import subprocess
        import sys
        import tempfile
        import threading
        import time

        cpu_name, features = CPU_BUILDS[name]
        env = dict(os.environ)
        env.pop("NUMBA_CPU_FEATURES", None)
        env.pop("NUMBA_CPU_NAME", None)
        if cpu_name:
            env["NUMBA_CPU_NAME"] = cpu_name
        if features:
            env["NUMBA_CPU_FEATURES"] = features
        env["NUMBA_CACHE_DIR"] = str(folder / "numba-cache")
        env["DXSTUDIO_NUMBA_CACHE"] = "0"  # compile afresh: never reuse the host's cached build
        env["NUMBA_NUM_THREADS"] = CPU_BUILD_THREADS
        env.pop("DXSTUDIO_CHECK_ASSEMBLY", None)
        if name in ASSEMBLY_SAMPLE_BUILDS:  # no FMA on that target: a sample's assembly shows it
            env["DXSTUDIO_CHECK_ASSEMBLY"] = "sample"
        self.name, self.started = name, time.monotonic()
        self._lock, self._outcome = threading.Lock(), None
        self.proc, self.reused = None, build_result_file(name, env)
        if self.reused is not None and self.reused.is_file():
            try:
                self._outcome = json.loads(self.reused.read_text())
            except (OSError, ValueError):
                self._outcome = None
            if self._outcome is not None:
                self._outcome["reused"] = str(self.reused)
                if publish:
                    self._publish(Path(publish))
                return
        self.out, self.err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen([sys.executable, str(REPO / "tests" / "cpu_subprocess_check.py")], env=env,
                                     stdout=self.out, stderr=self.err, stdin=subprocess.DEVNULL, text=True,
                                     preexec_fn=_die_with_parent)
        if publish:
            threading.Thread(target=self._publish, args=(Path(publish),), daemon=True,
                             name=f"cpu build {name}").start()

    def outcome(self) -> dict:
        """{"code": exit status or None (ran over the limit, killed), "out": stdout, "err": stderr}."""
        import subprocess
        import time

        with self._lock:
            if self._outcome is None:
                try:
                    code = self.proc.wait(timeout=max(CPU_BUILD_LIMIT - (time.monotonic() - self.started), 1))
                except subprocess.TimeoutExpired:
                    self.stop()
                    code = None
                self.out.seek(0)
                self.err.seek(0)
                self._outcome = {"code": code, "out": self.out.read(), "err": self.err.read()}
                if code == 0 and self.reused is not None:  # for the next run of the same build
                    try:
                        write_json_atomic(self.reused, self._outcome)
                    except OSError:
                        pass
            return self._outcome

    def _publish(self, folder: Path):
        write_json_atomic(folder / f"{self.name}.json", self.outcome())

    def result(self) -> dict:
        return build_result(self.name, self.outcome())

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


# A build's result is a function of what it compiles and with what: the engine's sources, the
# check script, Python, NumPy, Numba, llvmlite, the target CPU and the environment that steers
# the kernels. A run that finds the result of a build of exactly those (a rerun of the suite on
# an unchanged engine) reads it instead of compiling again (about 110 s of CPU each); the summary
# says so ("reused the identical build's result"), and the host's digests it is compared with
# are computed afresh every run. A fresh clone (CI) has none and builds; DXSTUDIO_TEST_BUILD_CACHE=0
# always builds. Kept in $XDG_CACHE_HOME/dxstudio-tests (~/.cache).
def build_result_file(name, env) -> "Path | None":
    import hashlib
    import platform

    import llvmlite
    import numba
    import numpy
    from llvmlite import binding as ll

    if os.environ.get("DXSTUDIO_TEST_BUILD_CACHE", "1") == "0":
        return None
    h = hashlib.sha256()
    sources = sorted((REPO / "dxstudio" / "engine").rglob("*.py")) + [
        REPO / "tests" / "cpu_subprocess_check.py", REPO / "tests" / "synthetic.py"]
    for path in sources:
        h.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes() + b"\0")
    steer = sorted((k, v) for k, v in env.items()
                   if k.startswith(("NUMBA_", "DXSTUDIO_", "OMP_", "GOMP_")) and k != "NUMBA_CACHE_DIR")
    h.update(repr((name, steer, sys.version, platform.machine(), ll.get_host_cpu_name(), numpy.__version__,
                   numba.__version__, llvmlite.__version__)).encode())
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dxstudio-tests" / "cpu-builds"
    return base / f"{name}-{h.hexdigest()[:32]}.json"


class PublishedBuild:
    """A build another pytest-xdist worker started: its outcome, once that worker left it."""

    def __init__(self, name, folder):
        import time

        self.name, self.path, self.started = name, Path(folder) / f"{name}.json", time.monotonic()

    def result(self) -> dict:
        import time

        while not self.path.is_file():
            if not _alive(self.path.with_suffix(".claim")):  # the worker building it ended: build here
                return CpuBuild(self.name, Path(tempfile_dir())).result()
            if time.monotonic() - self.started > CPU_BUILD_LIMIT + 60:
                pytest.fail(f"the {self.name} build started by the first worker left no result in "
                            f"{CPU_BUILD_LIMIT + 60} s ({self.path})")
            time.sleep(1)
        return build_result(self.name, json.loads(self.path.read_text()))

    def stop(self):
        pass


def tempfile_dir() -> str:
    import tempfile

    return tempfile.mkdtemp(prefix="dx-cpu-build-")


def _alive(claim: Path) -> bool:
    """Whether the process whose pid the claim file holds still runs."""
    try:
        os.kill(int(claim.read_text()), 0)
    except ProcessLookupError:
        return False
    except (OSError, ValueError):  # not written yet, or not ours to signal: take it as running
        return True
    return True


def claimed_build(name, shared) -> "CpuBuild | PublishedBuild":
    """Under pytest-xdist: the first worker whose test needs the build starts it and leaves its
    outcome in the shared folder; every other worker reads it there."""
    claim = Path(shared) / f"{name}.claim"
    try:
        fd = os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return PublishedBuild(name, shared)
    with os.fdopen(fd, "w") as fh:
        fh.write(str(os.getpid()))
    return CpuBuild(name, Path(tempfile_dir()), publish=shared)


def build_result(name, outcome) -> dict:
    if outcome["code"] is None:
        pytest.fail(f"the {name} build (cpu_subprocess_check.py) ran over {CPU_BUILD_LIMIT} s; killed")
    assert outcome["code"] == 0, f"cpu_subprocess_check.py failed for the {name} build:\n{outcome['err'][-3000:]}"
    return json.loads(outcome["out"])


def _build_wanted(item):
    mark = item.get_closest_marker("cpu_build")
    if mark is None or item.get_closest_marker("skip"):
        return None
    if any(m.args and m.args[0] is True for m in item.iter_markers("skipif")):
        return None
    return mark.args[0]


def pytest_collection_finish(session):
    import tempfile

    config = session.config
    for item in session.items:  # a build waited for is bounded by its own limit
        if item.get_closest_marker("cpu_build") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(CPU_BUILD_LIMIT + 120))
    wanted = sorted({b for b in map(_build_wanted, session.items) if b})
    config._cpu_builds, config._host_build_here = {}, None
    run_builds = wanted and not config.option.collectonly
    xdist = bool(getattr(config, "workerinput", {}).get("dx_builds"))  # a pytest-xdist worker
    if run_builds:
        folder = Path(tempfile.mkdtemp(prefix="dx-cpu-builds-"))
        config._cpu_builds_folder = folder
    # the builds this run's own host kernels may stand for wait for them (prepare_engine); every
    # other build starts now, beside the preparation. On a CPU whose vector instructions are not
    # the haswell build's (AVX-512, say) nothing here stands for the haswell build: it starts now
    # too (it waited for the preparation, then its test waited for it: 207 s of a worker idle in
    # a run beside two busy loops, bench/README.md "The test suite's time").
    coverable = {"host", "haswell"} if host_isa_is_haswells() else {"host"}
    if run_builds:
        for name in wanted:
            if name not in coverable:  # these wait for the host's kernels (prepare_engine)
                if xdist:  # the first worker to get here builds it, from now; the other reads its result
                    config._cpu_builds[name] = claimed_build(name, config.workerinput["dx_builds"])
                    continue
                (folder / name).mkdir()
                config._cpu_builds[name] = CpuBuild(name, folder / name)
    checker = any(item.name == "test_the_host_build_compiled_in_this_run_has_no_fma" for item in session.items)
    want_facts = bool(run_builds and checker and any(b in coverable for b in wanted))
    waiting = prepare_engine(config, session.items, want_facts)
    if not run_builds:
        return
    if waiting is not None:  # the other worker prepares: these builds are settled once it is done
        waiting.on_ready = lambda: _settle_covered_builds(config, session.items, coverable, xdist, folder)
        return
    if want_facts and not xdist:
        config._host_build_here = host_build_here()
    _settle_covered_builds(config, session.items, coverable, xdist, folder)


def _settle_covered_builds(config, items, coverable, xdist, folder) -> None:
    """The builds the host's kernels compiled in this run stand for are skipped; the others of
    `coverable` start (under pytest-xdist: claimed, or read from the worker that claimed them)."""
    covered = set()
    if config._host_build_here:
        covered = {"host"} | ({"haswell"} if host_isa_is_haswells() else set())
    still = set()
    for item in items:
        name = _build_wanted(item)
        if name in covered and not item.get_closest_marker("heavy"):
            item.add_marker(pytest.mark.skip(reason=COVERED_HERE_REASON.format(
                "its vector instructions are the haswell build's" if name == "haswell" else "this CPU")))
        elif name in coverable:
            still.add(name)
    for name in sorted(still):
        if xdist:
            config._cpu_builds[name] = claimed_build(name, config.workerinput["dx_builds"])
            continue
        (folder / name).mkdir()
        config._cpu_builds[name] = CpuBuild(name, folder / name)


# -- the engine's kernels, compiled (or loaded from Numba's cache) once before the first test --
# In a fresh clone the first test to use the engine compiled every kernel it met (about 100 s of
# CPU) inside its own 600 s timeout, beside the builds for other CPUs: at load 10 on 2 cores
# that test ran over and ended the run. dxstudio.engine.readiness.prepare() runs every kernel
# once when collection ends, outside any test's timeout, for a run of PREPARE_MIN_TESTS or more
# (the suite, a few modules); a smaller selection compiles on first need, as before. Under
# pytest-xdist the workers share the work (a lock beside the cache): the first prepares, the
# second compiles the training step's own kernels beside it (_prepare_training_beside), runs its
# kernel-free files, then loads what the two cached.
PREPARE_MIN_TESTS = 50


def prepare_engine(config, items, want_facts=False) -> "PreparationWait | None":
    """want_facts, under pytest-xdist: the worker that compiled the kernels leaves their
    assembly facts (host_build_here) for the other, which loaded them from the cache, so both
    skip the builds those facts stand for (config._host_build_here).
    Under pytest-xdist the worker that finds another preparing does not wait for it: it runs its
    kernel-free files meanwhile and returns the PreparationWait that holds back its other tests
    until the kernels are in the cache."""
    import time

    wanted = os.environ.get("DXSTUDIO_TEST_PREPARE")
    if wanted == "0" or (wanted != "1" and len(items) < PREPARE_MIN_TESTS) or config.option.collectonly:
        return None
    from dxstudio.engine import readiness

    start = time.process_time()
    shared = getattr(config, "workerinput", {}).get("dx_builds")
    try:
        folder = readiness._cache_dir()
        lock = None
        if folder is not None and getattr(config, "workerinput", None) is not None:
            import fcntl

            folder.mkdir(parents=True, exist_ok=True)
            lock = open(folder / "dxstudio-tests-prepare.lock", "w")
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # the other worker compiles them: help, then go on with the tests
                _prepare_training_beside(config, want_facts and shared, shared)
                return PreparationWait(config, lock, want_facts and shared)
        try:
            if lock is not None and shared:  # the other worker's help starts once they are cached
                try:
                    readiness.compile_products()
                finally:  # (after a failure too: it never waits for nothing)
                    (Path(shared) / PRODUCTS_READY).touch()
            readiness.prepare(beside=lock is None)  # under pytest-xdist the other worker helps instead
            if want_facts and shared:
                _host_facts(config, shared)
        finally:
            if lock is not None:
                lock.close()
    except Exception as e:  # a broken engine: its tests fail one by one, with their names
        config.summary_notes.append(f"engine kernels: preparing before the first test failed ({e!r})")
        return None
    config.summary_notes.append(f"engine kernels: prepared before the first test in {time.process_time() - start:.0f} s "
                                "of CPU (compiled, or loaded from Numba's cache)")
    return None


# Left in the run's shared folder by the preparing worker once mm_nt's builds are in the cache
# (readiness.compile_products): the other's help starts then and loads them (12 s of CPU each
# where both compiled them). The wait costs no CPU time of the run: the build for another CPU
# (the generic one) compiles beside the preparation from the start.
PRODUCTS_READY = "products-ready"
PRODUCTS_WAIT = 300  # seconds; past it the help starts anyway


def _prepare_training_beside(config, facts_folder, shared) -> None:
    """In the worker that found the other preparing: compile the training step's own kernels
    (readiness.prepare_training: the backward from a reference forward, so none of the other's
    forward kernels) beside it, before its kernel-free files, once the other has cached the
    products both call (PRODUCTS_READY in `shared`); the other's training stage then loads them
    from the cache. On a busy machine the preparation was one worker's two to three minutes
    while the other, its kernel-free files done, waited for it (227 s).
    facts_folder: where the other computes the host build's facts, the assembly of the kernels
    compiled here is left for it (TRAINING_ASSEMBLY), as it holds none of them."""
    import time

    from dxstudio.engine import readiness

    if facts_folder:
        (Path(facts_folder) / TRAINING_ASSEMBLY).with_suffix(".started").touch()
    deadline = time.monotonic() + PRODUCTS_WAIT
    while shared and not (Path(shared) / PRODUCTS_READY).is_file() and time.monotonic() < deadline:
        time.sleep(0.2)
    start = time.process_time()
    try:
        readiness.prepare_training()
    except Exception as e:  # the other worker's preparation compiles them anyway
        config.summary_notes.append(f"engine kernels: compiling the training step's beside the other worker failed ({e!r})")
    else:
        config.summary_notes.append(f"engine kernels: compiled the training step's beside the other worker's preparation "
                                    f"in {time.process_time() - start:.0f} s of CPU")
    finally:
        if facts_folder:
            found = {}
            try:
                check = load_script(REPO / "tests" / "cpu_subprocess_check.py")
                found = {k: asm for k, asm in check.assembly_map().items() if asm is not None}
            finally:  # an empty one at worst: the other does not wait for ever
                write_json_atomic(Path(facts_folder) / TRAINING_ASSEMBLY, found)


# The assembly of the kernels the second worker compiled beside the first's preparation
# (_prepare_training_beside), for the host build's facts the first computes (_host_facts)
TRAINING_ASSEMBLY = "training-assembly.json"
TRAINING_ASSEMBLY_WAIT = 900  # seconds; it is written seconds after the compile, even where that failed


def _training_assembly(shared) -> "dict | None":
    """The second worker's assembly (TRAINING_ASSEMBLY) where it is compiling beside this one:
    waited for, as the host build's facts need every kernel's."""
    import time

    path = Path(shared) / TRAINING_ASSEMBLY
    if not path.with_suffix(".started").is_file():
        return None
    deadline = time.monotonic() + TRAINING_ASSEMBLY_WAIT
    while not path.is_file() and time.monotonic() < deadline:
        time.sleep(0.5)
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _host_facts(config, shared) -> None:
    """The host build's assembly facts: computed by the worker that prepared the kernels (with
    the assembly of those the other compiled beside it) and left for the other, or read where
    that worker left them."""
    facts = Path(shared) / "host-facts.json"
    if facts.is_file():  # the worker before compiled them
        config._host_build_here = json.loads(facts.read_text()) or None
    else:
        config._host_build_here = host_build_here(_training_assembly(shared))
        write_json_atomic(facts, config._host_build_here)


class PreparationWait:
    """In the pytest-xdist worker that found the other preparing the engine (it holds the lock
    and compiles every kernel, one to two minutes of CPU, more on a busy machine): this worker's
    kernel-free files (KERNEL_FREE_FILES) run meanwhile, and the first test of any other file
    waits here, before it starts, until the lock is free, then loads the kernels from the cache
    the other filled. A test of a listed file that calls a compiled kernel of the engine for the
    first time in this process, on any thread, or starts a process (which would compile the
    kernels again on its own), waits where it does so. The wait is not the test's time: its
    timeout starts afresh after it.
    on_ready: called once, after the wait (the builds the preparation's facts settle)."""

    def __init__(self, config, lock, facts_folder):
        import subprocess
        import threading

        from numba.core.dispatcher import Dispatcher

        self.config, self.lock, self.facts_folder = config, lock, facts_folder
        self.on_ready = None
        self._guard, self.done = threading.Lock(), False
        self._compile, self._popen = Dispatcher._compile_for_args, subprocess.Popen.__init__
        wait, compile_, popen = self.wait, self._compile, self._popen

        def compile_for_args(dispatcher, *args, **kws):
            if getattr(dispatcher.py_func, "__module__", "").startswith("dxstudio."):
                wait()
            return compile_(dispatcher, *args, **kws)

        def popen_init(proc, *args, **kws):
            wait()
            return popen(proc, *args, **kws)

        Dispatcher._compile_for_args = compile_for_args
        subprocess.Popen.__init__ = popen_init
        config._dx_preparation_wait = self

    def wait(self, before_test: bool = False) -> None:
        import fcntl
        import subprocess
        import time

        from numba.core.dispatcher import Dispatcher

        if self.done:
            return
        with self._guard:
            if self.done:
                return
            item = getattr(self.config, "_dx_current_item", None)
            timer = getattr(item, "_dx_timer", None)
            if timer is not None:
                timer.cancel()
            start = time.monotonic()
            fcntl.flock(self.lock, fcntl.LOCK_EX)  # the other worker's preparation is over
            self.lock.close()
            Dispatcher._compile_for_args, subprocess.Popen.__init__ = self._compile, self._popen
            self.done = True
            if self.facts_folder:
                _host_facts(self.config, self.facts_folder)
            if self.on_ready is not None:
                self.on_ready()
            where = f" in {item.nodeid}" if item is not None else ""
            if item is not None and not before_test and _file_of(item) in KERNEL_FREE_FILES:
                self.config.summary_notes.append(
                    f"engine kernels: {_file_of(item)} compiled a kernel or started a process while the other worker "
                    "prepared them: take it off tests/conftest.py KERNEL_FREE_FILES")
            self.config.summary_notes.append(
                f"engine kernels: the other worker prepared them; this one ran its tests meanwhile and waited "
                f"{time.monotonic() - start:.0f} s{where}")
            if timer is not None and getattr(item, "_dx_restart_timer", None):
                item._dx_restart_timer()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    item.config._dx_current_item = item
    yield
    item.config._dx_current_item = None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Where the other worker is still preparing the kernels (PreparationWait), a test of a file
    not in KERNEL_FREE_FILES waits for it here, and so does a test that waits for a build for
    another CPU: which of the builds the preparation's facts stand for is only known once it is
    done."""
    waiting = getattr(item.config, "_dx_preparation_wait", None)
    if waiting is None or waiting.done:
        return
    building = item.get_closest_marker("cpu_build")
    if building or _file_of(item) not in KERNEL_FREE_FILES:
        # here, before the test: a test that starts a kernel on a thread of its own and waits
        # for it with a limit would otherwise spend that limit in the wait
        waiting.wait(before_test=True)
    if building:
        skip = item.get_closest_marker("skip")  # added just now, by the builds settled
        if skip is not None:
            pytest.skip(skip.kwargs.get("reason", ""))


def pytest_sessionfinish(session):
    """A pytest-xdist worker hands its summary notes (the preparation's CPU seconds, the builds')
    to the controller, whose terminal prints them (pytest_testnodedown)."""
    out = getattr(session.config, "workeroutput", None)
    if out is not None:
        out["dx_notes"] = list(getattr(session.config, "summary_notes", []))


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    notes = node.config.__dict__.setdefault("summary_notes", [])
    for note in getattr(node, "workeroutput", {}).get("dx_notes", []):
        if note.startswith("engine kernels:"):  # each worker's own (one compiled, one loaded)
            note = f"{note} [{node.gateway.id}]"
        if note not in notes:
            notes.append(note)


def pytest_unconfigure(config):
    for build in getattr(config, "_cpu_builds", {}).values():
        build.stop()
    for folder in (getattr(config, "_cpu_builds_folder", None), getattr(config, "_dx_shared", None)):
        if folder:
            shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def cpu_build(request, tmp_path) -> dict:
    """The result of cpu_subprocess_check.py for the build the test's cpu_build mark names:
    {"digests", "cpu_name", "vector_registers", "fma_instructions", "assembly_chars",
    "fma_when_contraction_allowed", "cpu_seconds"}. Started at the session's start (or now, for
    a test selected some other way)."""
    name = request.node.get_closest_marker("cpu_build").args[0]
    builds = request.config.__dict__.setdefault("_cpu_builds", {})
    if name not in builds:
        shared = getattr(request.config, "workerinput", {}).get("dx_builds")
        builds[name] = claimed_build(name, shared) if shared else CpuBuild(name, tmp_path)
    result = builds[name].result()
    reused = getattr(builds[name], "_outcome", None) or {}
    if reused.get("reused"):
        note = (f"cpu build {name}: reused the identical build's result ({result['cpu_seconds']:.0f} s of CPU when "
                f"built), {reused['reused']}; DXSTUDIO_TEST_BUILD_CACHE=0 builds it again")
    else:
        note = f"cpu build {name}: {result['cpu_seconds']:.0f} s of CPU (tests/cpu_subprocess_check.py)"
    if note not in request.config.summary_notes:
        request.config.summary_notes.append(note)
    return result


# -- the receipts project --------------------------------------------------------------------
def first_item(page) -> str | None:
    """The page's first run of two or three words made only of letters (on most receipts the
    name of the first thing bought): a multi-word value to ground."""
    run = []
    for w in page.words:
        if re.fullmatch(r"[A-Za-z]{2,}", w.text):
            run.append(w.text)
            if len(run) == 3:
                break
        elif len(run) >= 2:
            break
        else:
            run = []
    return " ".join(run) if len(run) >= 2 else None


@pytest.fixture(scope="session")
def receipts_project_template(tmp_path_factory):
    """A project of the bundled sample's first 16 CORD receipts with their annotated total,
    subtotal, tax, cash and change as the labelling model's answers, plus a text field `item`
    (first_item: a multi-word value). receipt_00056's subtotal is not printed on the page, so
    one page has conflicts. Tiny-model settings that tune in about a second."""
    from dxstudio.labelling import apply_answers
    from dxstudio.project import Field, Project

    sample = Project.open(SAMPLE)
    ids = sample.page_ids()[:RECEIPTS]
    assert len(ids) == RECEIPTS, f"{SAMPLE} has fewer than {RECEIPTS} pages"
    base = tmp_path_factory.mktemp("receipts")
    project = Project.create(base / "project", "receipts",
                             schema=sample.schema + [Field("item", "the first thing bought, as printed")])
    project.settings.update(RECEIPT_SETTINGS)
    project.save()
    project.pages_dir.mkdir(exist_ok=True)
    for pid in ids:
        shutil.copy(sample.page_path(pid), project.page_path(pid))
        image = sample.pages_dir / "images" / f"{pid}.png"  # the page's drawn image, which it names
        if image.is_file():
            (project.pages_dir / "images").mkdir(exist_ok=True)
            shutil.copy(image, project.pages_dir / "images" / image.name)
        page = project.load_page(pid)
        answers = dict(sample.load_labels(pid).answers, item=first_item(page))
        apply_answers(project, pid, answers, "import", page=page)
    return base / "project"


@pytest.fixture
def receipts_project(receipts_project_template, tmp_path):
    """A fresh copy per test, so a test may change labels freely."""
    dst = tmp_path / "project"
    shutil.copytree(receipts_project_template, dst)
    return dst


def rename_project_fields(root, renames: dict) -> None:
    """Rename fields of the project at root in its schema (descriptions cleared) and its labels."""
    import dataclasses

    from dxstudio.project import Project

    p = Project.open(root)
    changed, problems = p.rename_fields_in_labels(renames)
    assert changed and not problems
    p.schema = [dataclasses.replace(f, name=renames.get(f.name, f.name), description="") for f in p.schema]
    p.save()


TINY_BASE_SETTINGS = {"size": "tiny", "steps": 6, "batch": 3, "warmup": 2, "lr": 0.01, "window": 48,
                      "checkpoint_every": 6}


@pytest.fixture(scope="session")
def tiny_base(tmp_path_factory):
    """A tiny base model pretrained for 6 steps on a small synthetic corpus (a starting model
    whose head knows the generic classes); tests read it, none changes it."""
    from dxstudio.tuning.pretrain import PretrainRun

    d = tmp_path_factory.mktemp("base")
    run = PretrainRun.prepare(["synthetic:12:5"], d / "run", TINY_BASE_SETTINGS)
    assert run.train()
    run.finish()
    return d / "run" / "model.safetensors"


def sample_project(root, pages: int, settings: dict, sample=None):
    """A project at root (made) holding the first `pages` pages of the bundled sample (or of the
    sample folder given), their labels as they ship and the sample's schema, with `settings` as
    the project's settings; returns root."""
    sample = Path(sample or SAMPLE)
    root = Path(root)
    (root / "pages").mkdir(parents=True)
    (root / "labels").mkdir()
    for page in sorted((sample / "pages").glob("*.json"))[:pages]:
        shutil.copy(page, root / "pages")
        if (sample / "labels" / page.name).exists():
            shutil.copy(sample / "labels" / page.name, root / "labels")
    data = json.loads((sample / "dxproject.json").read_text())
    data["settings"] = dict(settings)
    (root / "dxproject.json").write_text(json.dumps(data))
    return root


@pytest.fixture
def small_project(tmp_path):
    """Eight pages of the bundled sample with its labels as they ship, tiny-model settings that
    checkpoint every step (resume and snapshot tests)."""
    return sample_project(tmp_path / "p", 8, {"size": "tiny", "auto_folds": 0, "epochs": 2, "batch": 2, "warmup": 1,
                                              "heldout_fraction": 0.25, "checkpoint_every": 1})


def set_review(root, pid, **change):
    """Change a page's review record as the app would (state, fixes...)."""
    from dxstudio.project import Project

    p = Project.open(root)
    labels = p.load_labels(pid)
    labels.review.update(change)
    p.save_labels(pid, labels)


def load_script(path):
    """A script that is not a package module (bench/*.py, resources/make_sample.py, a test
    helper), imported from its file for its functions."""
    import importlib.util

    path = Path(path)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
