"""The controller's bytecode warm-up (tests/warm_bytecode.py): what it writes is what pytest's import hook and Python's
import then use, so the xdist workers skip rewriting and compiling. If a pytest release moved the functions it borrows,
the warm-up would be skipped silently (slower, never wrong): this test says so instead."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from _pytest.assertion.rewrite import PYC_TAIL, _read_pyc, get_cache_dir

from . import warm_bytecode


def test_the_warm_up_writes_what_the_import_hook_reads(tmp_path: Path, pytestconfig: pytest.Config) -> None:
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_sample.py").write_text("def test_it():\n    x = 1\n    assert x == 2\n")
    (tests / "helper.py").write_text("VALUE = 1\n")
    (tests / "test_broken.py").write_text("def test_(:\n")  # left to the workers' collection to report
    package = tmp_path / "src" / "pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("NAME = 'pkg'\n")
    children = tmp_path / "children"

    # in this process (processes=0): an xdist worker has threads, which a fork would copy mid-work
    assert warm_bytecode.warm(pytestconfig, str(children), processes=0, tests=tests, package=package)

    sample = tests / "test_sample.py"
    code = _read_pyc(sample, get_cache_dir(sample) / ("test_sample" + PYC_TAIL))
    assert code is not None, "the import hook would rewrite the module again"
    namespace: dict[str, object] = {}
    exec(code, namespace)  # the rewritten assert: its message shows the values, as pytest's own rewrite does
    test_it = namespace["test_it"]
    assert callable(test_it)
    with pytest.raises(AssertionError, match="assert 1 == 2"):
        test_it()
    assert not (get_cache_dir(tests / "test_broken.py") / ("test_broken" + PYC_TAIL)).exists()

    assert Path(importlib.util.cache_from_source(str(tests / "helper.py"))).exists()
    init = str(package / "__init__.py")
    assert Path(importlib.util.cache_from_source(init)).exists()  # where the workers' imports look
    saved, sys.pycache_prefix = sys.pycache_prefix, str(children)
    try:
        assert Path(importlib.util.cache_from_source(init)).exists()  # where the children's imports look
    finally:
        sys.pycache_prefix = saved
