"""The test suite's own safety nets: a test asleep in Qt's event loop ends the run with its name
(pytest-timeout's thread method, named by tests/conftest.py), and the README's test command is
CI's."""
from __future__ import annotations

import os
import subprocess
import sys
import time
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# The inner runs below check tests/conftest.py's hooks with the two plugins they concern
# (pytest-xdist, pytest-timeout) and no other: pytest's autoloaded plugins (pytest-qt, Faker's)
# cost 1.0-1.4 s of CPU in each pytest process, and these tests start about ten (controllers,
# workers, their replacements). The Qt hang's test keeps them all: it is the suite's own setup.
LEAN = ["-p", "xdist.plugin", "-p", "pytest_timeout"]
LEAN_ENV = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}

HUNG = '''
def test_sleeps_in_qt():
    from PySide6.QtCore import QCoreApplication, QEventLoop
    app = QCoreApplication.instance() or QCoreApplication([])
    QEventLoop().exec()  # nothing will ever wake it: a modal question nobody answers
'''


def test_timeout_uses_the_thread_method():
    ini = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert ini["timeout_method"] == "thread" and 0 < int(ini["timeout"]) <= 600


def test_a_test_hung_in_the_qt_event_loop_ends_with_its_name(tmp_path):
    (tmp_path / "test_hung.py").write_text(HUNG)
    env = dict(os.environ, PYTHONPATH=str(REPO), QT_QPA_PLATFORM="offscreen")
    start = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", str(REPO / "pyproject.toml"),
                        "--rootdir", str(tmp_path), "-p", "tests.conftest", "-o", "timeout=2", "test_hung.py"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    took = time.monotonic() - start
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    assert "TIMEOUT: test_hung.py::test_sleeps_in_qt ran over 2 s" in out, out
    assert "QEventLoop().exec()" in out  # the stacks show where it slept
    assert took < 100


def test_a_hung_test_under_xdist_ends_once_with_its_name_and_stacks(tmp_path):
    """The README's command runs two pytest-xdist workers, whose terminal is not shown: the
    controller reports the timed-out test's name and its stacks (tests/conftest.py), and the
    test is not run again on a new worker."""
    import pytest

    pytest.importorskip("xdist")
    (tmp_path / "test_hung.py").write_text(HUNG)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), *sys.path[1:]]), QT_QPA_PLATFORM="offscreen", **LEAN_ENV)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", str(REPO / "pyproject.toml"),
                        *LEAN, "--rootdir", str(tmp_path), "-p", "tests.conftest", "-o", "timeout=3", "-n", "1",
                        "--dist", "loadfile", "test_hung.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    assert "crashed while running 'test_hung.py::test_sleeps_in_qt'" in out, out
    assert "TIMEOUT: test_hung.py::test_sleeps_in_qt ran over 3 s; the stacks of every thread" in out, out
    assert "in test_sleeps_in_qt" in out  # the main thread's stack, where it slept
    # once: the crashed test is not sent to the new worker (tests/conftest.py's scheduler)
    assert "\n1 failed in " in out, out  # not "1 failed, 1 skipped" nor a failure per replacement


CRASHING = {
    "test_a_crash.py": "import os\ndef test_1(): pass\ndef test_2(): os._exit(3)\ndef test_3(): pass\n",
    "test_b.py": "def test_x(): pass\ndef test_y(): pass\n",
    "test_c.py": "def test_z(): pass\n",
}


def test_a_worker_that_dies_under_loadfile_ends_the_run_with_its_test_named_and_runs_the_rest(tmp_path):
    """pytest-xdist 3.8's loadfile scheduler, after a worker died (a segfault in Qt, seen in full
    runs), sent the finished tests back to a replacement that then waited for ever (the run hung
    with idle workers), or ran the deadly test again on each replacement (9 failed, one per
    restart). tests/conftest.py's scheduler: the dead worker's test fails once, the rest run."""
    import pytest

    pytest.importorskip("xdist")
    for name, text in CRASHING.items():
        (tmp_path / name).write_text(text)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), *sys.path[1:]]), **LEAN_ENV)
    for workers in ("1", "2"):
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", str(REPO / "pyproject.toml"),
                            *LEAN, "--rootdir", str(tmp_path), "-p", "tests.conftest", "-n", workers, "--dist", "loadfile",
                            *CRASHING], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        out = r.stdout + r.stderr
        assert r.returncode == 1, out
        assert "1 failed, 5 passed" in out, out
        assert "crashed while running 'test_a_crash.py::test_2'" in out, out


def test_the_summary_names_every_skip_reason_with_counts(tmp_path):
    (tmp_path / "test_skips.py").write_text(
        "import pytest\n"
        "def test_a():\n    pytest.importorskip('no_such_module_dx')\n"
        "def test_b():\n    pytest.importorskip('no_such_module_dx')\n"
        "@pytest.mark.skip(reason='not on this platform')\ndef test_c():\n    pass\n"
        "def test_d():\n    pass\n")
    env = dict(os.environ, PYTHONPATH=str(REPO), **LEAN_ENV)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", str(REPO / "pyproject.toml"),
                        *LEAN, "--rootdir", str(tmp_path), "-p", "tests.conftest", "test_skips.py"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    out = r.stdout
    assert r.returncode == 0, out + r.stderr
    assert "skipped 2: could not import 'no_such_module_dx'" in out, out
    assert "skipped 1: not on this platform" in out, out


def test_readme_test_command_is_ci_s():
    """The README's test command, word for word, is the one .ci/run runs (extras and all)."""
    import re

    ci = (REPO / ".ci" / "run").read_text()
    command = re.search(r"python3 -m venv \.venv && .*pytest -q[^\n]*", ci)
    assert command, "no test command in .ci/run"
    assert '".[test,cluster,ocr]"' in command.group(0)
    assert command.group(0) + "\n" in (REPO / "README.md").read_text()
    # the test extra brings pytest-xdist (-n 2: tests/conftest.py supports it)
    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["test"]
    assert any(r.startswith("pytest-xdist") for r in extra)


def test_a_cpu_build_of_the_same_sources_and_tools_is_read_not_compiled_again(tmp_path, monkeypatch):
    """tests/conftest.py build_result_file: the result of a build for another CPU is reused only
    for exactly the same engine sources, check script, tools, target and steering environment."""
    import json

    from tests import conftest

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("DXSTUDIO_TEST_BUILD_CACHE", raising=False)  # a run that always builds (=0) reads none
    env = {"NUMBA_CPU_NAME": "generic", "NUMBA_CACHE_DIR": "/a", "DXSTUDIO_NUMBA_CACHE": "0", "HOME": "/x"}
    path = conftest.build_result_file("generic", env)
    assert path == conftest.build_result_file("generic", dict(env, NUMBA_CACHE_DIR="/b", HOME="/y"))
    assert path.is_relative_to(tmp_path / "xdg")
    assert path != conftest.build_result_file("generic", dict(env, NUMBA_OPT="1"))
    assert path != conftest.build_result_file("haswell", env)
    monkeypatch.setattr(conftest, "REPO", tmp_path / "repo")  # another engine source: another build
    for name in ("dxstudio/engine/model.py", "tests/cpu_subprocess_check.py", "tests/synthetic.py"):
        (tmp_path / "repo" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "repo" / name).write_text("x = 1\n")
    assert conftest.build_result_file("generic", env) != path
    monkeypatch.undo()

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("DXSTUDIO_TEST_BUILD_CACHE", raising=False)
    result = {"digests": {"mm": "ab"}, "cpu_name": "generic", "cpu_seconds": 108.0}
    build = conftest.CpuBuild("generic", tmp_path)  # nothing stored yet: it compiles (stopped here)
    assert build.proc is not None
    build.stop()
    path = build.reused
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"code": 0, "out": json.dumps(result), "err": ""}))
    again = conftest.CpuBuild("generic", tmp_path)
    assert again.proc is None and again.result() == result
    monkeypatch.setenv("DXSTUDIO_TEST_BUILD_CACHE", "0")
    fresh = conftest.CpuBuild("generic", tmp_path)
    assert fresh.reused is None and fresh.proc is not None
    fresh.stop()


def test_the_files_waiting_for_a_cpu_build_run_last_and_xdist_keeps_the_order():
    """A worker that met a test waiting for a build for another CPU early sat idle until the
    build was done (87 s; 207 s beside two busy loops): those files run last, after the others in
    pytest-xdist's largest-first order, which conftest makes itself (xdist's own reordering off)."""
    from types import SimpleNamespace

    import pytest

    from tests import conftest

    class Item:
        def __init__(self, nodeid, build=None):
            self.nodeid, self.build = nodeid, build

        def get_closest_marker(self, name):
            return pytest.mark.cpu_build(self.build).mark if name == "cpu_build" and self.build else None

        def iter_markers(self, name):
            return iter(())

    def ids(items):
        return [i.nodeid for i in items]

    built = ["tests/test_k.py::a", "tests/test_k.py::b"]
    free = "tests/test_settings.py::s"  # calls no compiled kernel (conftest.KERNEL_FREE_FILES)
    assert "tests/test_settings.py" in conftest.KERNEL_FREE_FILES
    names = ["tests/test_a.py::x", built[0], "tests/test_b.py::y", "tests/test_b.py::z", built[1], free,
             "tests/test_c.py::w"]
    make = lambda: [Item(n, "generic" if n == built[1] else None) for n in names]  # noqa: E731
    config = SimpleNamespace(_shared_data_skipped=[])
    items = make()
    conftest.pytest_collection_modifyitems(config, items)  # one process: the files as collected, those last
    assert ids(items) == ["tests/test_a.py::x", "tests/test_b.py::y", "tests/test_b.py::z", free,
                          "tests/test_c.py::w"] + built
    config.workerinput = {}
    items = make()
    conftest.pytest_collection_modifyitems(config, items)  # a worker: kernel-free first, then largest first
    assert ids(items) == [free, "tests/test_b.py::y", "tests/test_b.py::z", "tests/test_a.py::x",
                          "tests/test_c.py::w"] + built
    option = SimpleNamespace(loadscopereorder=True, dist="loadfile")
    conftest.pytest_configure(SimpleNamespace(option=option))
    assert option.loadscopereorder is False


def test_a_worker_finding_the_other_preparing_runs_on_and_waits_before_other_files_and_at_a_kernel(tmp_path):
    """tests/conftest.py PreparationWait: under pytest-xdist the worker that cannot take the
    preparation lock runs the kernel-free files, and waits for the lock before the first test of
    any other file, or inside a test at the first compile of a dxstudio kernel or the first
    process it starts; the test's timeout starts afresh after the wait."""
    import fcntl
    import threading
    from types import SimpleNamespace

    from numba import njit
    from numba.core.dispatcher import Dispatcher

    from tests import conftest

    compile_, popen = Dispatcher._compile_for_args, subprocess.Popen.__init__
    lockfile = tmp_path / "prepare.lock"

    def preparing(first_use):
        """first_use(waiting) run while another holder of the lock (the preparing worker) lets
        go after 1.5 s: (the monotonic time it let go, the time first_use returned, waiting)."""
        holder = open(lockfile, "w")
        fcntl.flock(holder, fcntl.LOCK_EX)
        released = []

        def release():
            released.append(time.monotonic())
            holder.close()

        restarted = []
        item = SimpleNamespace(nodeid="tests/test_x.py::t", _dx_timer=threading.Timer(600, lambda: None),
                               _dx_restart_timer=lambda: restarted.append(True))
        config = SimpleNamespace(summary_notes=[], _dx_current_item=item)
        waiting = conftest.PreparationWait(config, open(lockfile, "w"), None)
        ready = []
        waiting.on_ready = lambda: ready.append(True)
        try:
            plain = njit(lambda x: x + 1)
            assert plain(1) == 2 and not ready  # a function of another package compiles at once
            threading.Timer(1.5, release).start()
            first_use(waiting)
            returned = time.monotonic()
        finally:
            Dispatcher._compile_for_args, subprocess.Popen.__init__ = compile_, popen
            holder.close()
        assert waiting.done and ready == [True] and restarted == [True] and item._dx_timer.finished.is_set()
        assert "waited" in config.summary_notes[-1] and item.nodeid in config.summary_notes[-1]
        return released[0], returned, waiting

    def kernel(x):
        return x * 2

    kernel.__module__ = "dxstudio.engine.example"
    compiled = njit(kernel)
    released, returned, _ = preparing(lambda waiting: compiled(3))
    assert returned >= released  # the kernel's first compile waited for the preparation
    assert Dispatcher._compile_for_args is compile_ and subprocess.Popen.__init__ is popen  # put back

    released, returned, waiting = preparing(lambda waiting: subprocess.run([sys.executable, "-c", "pass"], check=True))
    assert returned >= released  # so did the first process started
    waiting.wait()  # once done, it never waits again

    class Test:  # a test as pytest_runtest_setup sees it
        def __init__(self, nodeid, config):
            self.nodeid, self.config = nodeid, config

        def get_closest_marker(self, name):
            return None

    def setups(waiting):
        conftest.pytest_runtest_setup(Test("tests/test_settings.py::t", waiting.config))  # kernel-free: at once
        assert not waiting.done
        conftest.pytest_runtest_setup(Test("tests/test_extract.py::t", waiting.config))  # waits before it starts

    released, returned, _ = preparing(setups)
    assert returned >= released


def test_the_host_builds_facts_are_stored_and_read_by_a_run_that_loaded_the_kernels(tmp_path, monkeypatch):
    """tests/conftest.py host_build_here: the facts of the host's kernels, computed where this
    process compiled them all, are stored; a process that loaded them from Numba's cache reads
    them (for the same sources, tools and CPU only), so a rerun skips the build they stand for."""
    import json

    from tests import conftest

    class Check:  # cpu_subprocess_check as host_build_here uses it
        compiled = True

        def digests(self):
            return {}

        def assembly_facts(self, sample, elsewhere=None):
            n = 1000 if Check.compiled else 0
            return {"assembly_chars": n, "kernels_without_assembly": 0 if Check.compiled else 30,
                    "fma_instructions": 0}

    monkeypatch.setattr(conftest, "load_script", lambda path: Check())
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("DXSTUDIO_TEST_BUILD_CACHE", raising=False)
    assert conftest.host_build_here() == {"assembly_chars": 1000, "kernels_without_assembly": 0, "fma_instructions": 0}
    stored = conftest.host_facts_file()
    assert stored.is_relative_to(tmp_path / "xdg") and json.loads(stored.read_text())["assembly_chars"] == 1000
    Check.compiled = False  # a rerun: the kernels come from Numba's cache
    again = conftest.host_build_here()
    assert again["assembly_chars"] == 1000 and again["stored"] == str(stored)
    monkeypatch.setattr(conftest, "REPO", tmp_path / "repo")  # other engine sources: no facts
    for name in ("dxstudio/engine/model.py", "tests/cpu_subprocess_check.py", "tests/synthetic.py"):
        (tmp_path / "repo" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "repo" / name).write_text("x = 1\n")
    assert conftest.host_build_here() is None
    monkeypatch.undo()
    monkeypatch.setattr(conftest, "load_script", lambda path: Check())
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("DXSTUDIO_TEST_BUILD_CACHE", "0")  # a run that always builds reads none
    assert conftest.host_build_here() is None
    stored.write_text("{damaged")
    monkeypatch.delenv("DXSTUDIO_TEST_BUILD_CACHE")
    assert conftest.host_build_here() is None  # a damaged file: as if none


def test_the_host_facts_take_the_assembly_the_other_worker_compiled_beside(tmp_path, monkeypatch):
    """Where the second worker compiled the training step's kernels beside the first's
    preparation (conftest._prepare_training_beside), the first loaded them from the cache and
    holds no assembly of theirs: the second leaves its assembly (even after a failed compile, so
    the first never waits for ever), the first waits for it and counts a kernel missing only
    where neither has it."""
    import json
    import threading
    from types import SimpleNamespace

    from tests import conftest

    check = conftest.load_script(conftest.REPO / "tests" / "cpu_subprocess_check.py")

    def f(x):
        return x

    class Kernel:  # a dispatcher: one signature compiled here, one loaded from the cache
        py_func, signatures = f, ["(int64,)", "(float32,)"]

        def inspect_asm(self, sig):
            if sig == "(float32,)":
                raise RuntimeError("loaded from the cache")
            return "vaddps %ymm1"

    monkeypatch.setattr(check, "_kernels", lambda sample=False: [Kernel()])
    here, there = f"{f.__module__}.{f.__qualname__}(int64,)", f"{f.__module__}.{f.__qualname__}(float32,)"
    assert check.assembly_map() == {here: "vaddps %ymm1", there: None}
    assert check._compiled_assembly() == ("vaddps %ymm1", 1)
    assert check._compiled_assembly(elsewhere={there: "vfmadd231ps %ymm2"}) == ("vaddps %ymm1\nvfmadd231ps %ymm2", 0)
    facts = check.assembly_facts(sample=False, elsewhere={there: "vfmadd231ps %ymm2"})
    assert facts["kernels_without_assembly"] == 0 and facts["fma_instructions"] == 1

    # the hand-over: nothing started beside, nothing waited for
    assert conftest._training_assembly(tmp_path) is None
    from dxstudio.engine import readiness

    def failing():
        raise RuntimeError("no compiler")

    monkeypatch.setattr(readiness, "prepare_training", failing)
    monkeypatch.setattr(conftest, "load_script", lambda path: check)
    config = SimpleNamespace(summary_notes=[])
    late = threading.Timer(1.0, conftest._prepare_training_beside, (config, str(tmp_path), None))
    (tmp_path / conftest.TRAINING_ASSEMBLY).with_suffix(".started").touch()  # as it does first
    late.start()
    assert conftest._training_assembly(tmp_path) == {here: "vaddps %ymm1"}  # waited for the file
    late.join()
    assert "failed" in config.summary_notes[-1] and "no compiler" in config.summary_notes[-1]
    assert json.loads((tmp_path / conftest.TRAINING_ASSEMBLY).read_text()) == {here: "vaddps %ymm1"}


def test_the_help_beside_starts_once_the_other_worker_has_cached_the_products(tmp_path, monkeypatch):
    """The second worker's help (conftest._prepare_training_beside) compiles nothing until the
    first left PRODUCTS_READY in the run's shared folder (mm_nt's builds in the cache, which the
    help then loads instead of compiling them too); it says at once that it started, so the
    first waits for its assembly."""
    import threading
    import time
    from types import SimpleNamespace

    from dxstudio.engine import readiness
    from tests import conftest

    started = []
    monkeypatch.setattr(readiness, "prepare_training", lambda: started.append(True) or 0.0)
    monkeypatch.setattr(conftest, "load_script", lambda path: SimpleNamespace(assembly_map=lambda: {}))
    config = SimpleNamespace(summary_notes=[])
    facts, shared = tmp_path / "facts", tmp_path / "shared"
    facts.mkdir()
    shared.mkdir()
    helper = threading.Thread(target=conftest._prepare_training_beside, args=(config, str(facts), str(shared)))
    helper.start()
    try:
        time.sleep(1.0)
        assert helper.is_alive() and not started
        assert (facts / conftest.TRAINING_ASSEMBLY).with_suffix(".started").is_file()
        (shared / conftest.PRODUCTS_READY).touch()
    finally:
        helper.join(60)
    assert started == [True] and not helper.is_alive()
    assert "compiled the training step's beside" in config.summary_notes[-1]
    assert (facts / conftest.TRAINING_ASSEMBLY).is_file()


def test_the_assembly_of_a_callee_is_read_in_its_callers(monkeypatch):
    """cpu_subprocess_check.assembly_map: a kernel compiled here whose module Numba linked into
    another listed kernel's (its caller) gives "" (its code is in the caller's assembly, read
    once), counted neither as missing nor twice; a kernel alone gives its own assembly."""
    from numba import njit

    from tests import conftest

    check = conftest.load_script(conftest.REPO / "tests" / "cpu_subprocess_check.py")

    @njit
    def callee(x):
        return x * 3.0 + 1.0

    @njit
    def caller(x):
        return callee(x) - 2.0

    @njit
    def alone(x):
        return x / 7.0

    assert caller(1.0) == 2.0 and callee(1.0) == 4.0 and alone(7.0) == 1.0
    monkeypatch.setattr(check, "_kernels", lambda sample=False: [caller, callee, alone])
    found = check.assembly_map()
    name = {k: f"{k.py_func.__module__}.{k.py_func.__qualname__}{k.signatures[0]}" for k in (caller, callee, alone)}
    assert found[name[callee]] == ""  # carried by the caller
    assert found[name[caller]] and found[name[alone]]  # each its own assembly
    asm, missing = check._compiled_assembly()
    assert missing == 0 and asm == found[name[caller]] + "\n" + found[name[alone]]
