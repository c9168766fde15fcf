"""Compiled code for the test run, made once before the xdist workers start instead of once in every worker.

Each worker imports every test module at collection, and pytest rewrites each one's asserts before compiling it:
6 s of CPU per worker for the 184 files (measured), paid four times at once on a fresh clone, where nothing is cached
(or on every run, where the environment says PYTHONDONTWRITEBYTECODE, as CI's does). Here the controller rewrites
them once, split over two processes, into the folder pytest's import hook reads in every worker (``__pycache__``
beside the tests, ignored by git, where pytest itself writes them unless told not to; PYTHONPYCACHEPREFIX's folder
when one is set). pytest checks each cached file against its source's hash, so a stale one is rewritten as before,
never used. The package is compiled the same way, and into the folder the tests' ``python -m safepoint`` children
share (``child_prefix``, see conftest's ``_bytecode_cache``).

The workers are not given a PYTHONPYCACHEPREFIX of their own: with one set, Python reads compiled code only there,
so every installed library (the agent frameworks: 2.5 s of CPU for ``import agents`` compiled, 4.5 s from source)
would be compiled again in each worker. Measured before choosing.

pytest has no public call for "rewrite this file into its cache": this uses the two functions its import hook uses
(``_rewrite_test``, ``_write_pyc``). If a pytest release moves them, the warm-up is skipped and every worker rewrites
for itself, as before: slower, never wrong. Rejected: ``pytest --collect-only`` in the controller first (it imports
every framework too: 12 s more before any worker starts, for a saving of 6 s per worker).
"""

from __future__ import annotations

import compileall
import multiprocessing
import sys
import types
from pathlib import Path

TESTS = Path(__file__).resolve().parent
PACKAGE = TESTS.parent / "src"


def _rewrite(config: object, files: list[Path]) -> None:
    """In a forked child: rewrite the test modules among ``files`` into pytest's cache, compile the others."""
    from _pytest.assertion.rewrite import PYC_TAIL, _rewrite_test, _write_pyc, get_cache_dir

    state = types.SimpleNamespace(trace=lambda _message: None)  # all _write_pyc asks of pytest's AssertionState
    for fn in files:
        if not (fn.name.startswith("test_") or fn.name == "conftest.py"):
            compileall.compile_file(str(fn), quiet=2)
            continue
        try:  # the controller's config: the same ini and options as the workers', so the same rewritten code
            source_hash, code = _rewrite_test(fn, config)
        except (SyntaxError, OSError, ValueError):
            continue  # left to the workers, whose collection reports it where it belongs
        cache_dir = get_cache_dir(fn)
        cache_dir.mkdir(parents=True, exist_ok=True)
        _write_pyc(state, code, source_hash, cache_dir / (fn.name[:-3] + PYC_TAIL))


def _package(package: Path, child_prefix: str) -> None:
    compileall.compile_dir(str(package), quiet=2)  # for the workers, where they look
    saved, sys.pycache_prefix = sys.pycache_prefix, child_prefix
    try:
        compileall.compile_dir(str(package), quiet=2)  # for the children
    finally:
        sys.pycache_prefix = saved


def warm(
    config: object, child_prefix: str, *, processes: int = 2, tests: Path = TESTS, package: Path = PACKAGE
) -> bool:
    """Rewrite and compile the tests for the workers, the package for them and for the children (into
    ``child_prefix``); False if it could not be done (each worker then does it for itself). ``processes`` 0: all in
    this process (for a caller that has threads, which a fork would copy mid-work)."""
    try:
        from _pytest.assertion.rewrite import PYC_TAIL, _rewrite_test, _write_pyc, get_cache_dir  # noqa: F401
    except ImportError:
        return False
    files = sorted(tests.glob("*.py"), key=lambda path: path.stat().st_size, reverse=True)
    if processes == 0:
        _rewrite(config, files)
        _package(package, child_prefix)
        return True
    if "fork" not in multiprocessing.get_all_start_methods():
        return False
    shares = [files[index::processes] for index in range(processes)]  # each about as large
    context = multiprocessing.get_context("fork")  # the controller has started no thread yet; config is not pickled
    workers = [context.Process(target=_rewrite, args=(config, share)) for share in shares]
    workers.append(context.Process(target=_package, args=(package, child_prefix)))
    for worker in workers:
        worker.start()
    ok = True
    for worker in workers:
        worker.join()
        ok = ok and worker.exitcode == 0
    return ok
