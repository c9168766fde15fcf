"""Compiled code for the test run, made once before the xdist workers start instead of once in every worker.

Each worker imports every test module at collection, and pytest rewrites each one's asserts before compiling it:
6 s of CPU per worker for the 184 files (measured), paid four times at once on a fresh clone, where nothing is cached
(or always, where the environment says PYTHONDONTWRITEBYTECODE). Here the controller rewrites them once, split over
two processes, into a bytecode folder the workers (and the ``python -m safepoint`` children the tests start) then
read: pytest checks each cached file against its source's hash, so a stale one is rewritten as before, never used.
The same is done for the package's own modules and the tests' helpers (plain compiles, cheap but paid by every
process).

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
SOURCE = TESTS.parent / "src"


def _rewrite(config: object, prefix: str, files: list[Path]) -> None:
    """In a forked child: rewrite ``files`` into pytest's cache under ``prefix``; compile what is not a test plainly."""
    from _pytest.assertion.rewrite import PYC_TAIL, _rewrite_test, _write_pyc, get_cache_dir

    sys.pycache_prefix = prefix  # the workers' get_cache_dir reads the same prefix from their environment
    state = types.SimpleNamespace(trace=lambda _message: None)  # all _write_pyc asks of pytest's AssertionState
    for fn in files:
        if fn.name.startswith("test_") or fn.name == "conftest.py":
            source_hash, code = _rewrite_test(fn, config)  # the controller's: the same ini and options as the workers'
            cache_dir = get_cache_dir(fn)
            cache_dir.mkdir(parents=True, exist_ok=True)
            _write_pyc(state, code, source_hash, cache_dir / (fn.name[:-3] + PYC_TAIL))
        else:
            compileall.compile_file(str(fn), quiet=2)


def _package(prefix: str) -> None:
    sys.pycache_prefix = prefix
    compileall.compile_dir(str(SOURCE), quiet=2)


def warm(config: object, prefix: str, processes: int = 2) -> bool:
    """Fill ``prefix`` with the tests' rewritten and the package's compiled code; False if it could not be done."""
    try:
        from _pytest.assertion.rewrite import PYC_TAIL, _rewrite_test, _write_pyc, get_cache_dir  # noqa: F401
    except ImportError:
        return False
    if "fork" not in multiprocessing.get_all_start_methods():
        return False
    files = sorted(TESTS.glob("*.py"), key=lambda path: path.stat().st_size, reverse=True)
    shares: list[list[Path]] = [files[index::processes] for index in range(processes)]  # each about as large
    context = multiprocessing.get_context("fork")  # the controller has started no thread yet; config is not pickled
    workers = [context.Process(target=_rewrite, args=(config, prefix, share)) for share in shares]
    workers.append(context.Process(target=_package, args=(prefix,)))
    for worker in workers:
        worker.start()
    ok = True
    for worker in workers:
        worker.join()
        ok = ok and worker.exitcode == 0
    return ok
