"""The examples in the package's docstrings run, and say what they print (every module, one test each).

Examples marked ``# doctest: +SKIP`` need what the suite does not have (a pretrained model pair);
each module's count of examples run is checked, so that a module whose examples all stopped being
collected would show.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil
import types

import pytest

import mentored

MODULES = sorted(
    info.name for info in pkgutil.walk_packages(mentored.__path__, "mentored.") if not info.name.startswith("mentored._core")
)
FLAGS = doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS
# Modules with examples, and how many run at least: a module whose examples vanish fails here.
EXAMPLES = {
    "mentored.solver._solve": 3, "mentored.solver.certificate": 4, "mentored.divergences": 4, "mentored.verify.speculative": 2,
    "mentored.verify.serving": 3, "mentored.analysis.rules": 4, "mentored.analysis.quality": 6, "mentored.check.testing": 3,
    "mentored.integrations.trees": 1,
}


def _run(module: types.ModuleType) -> doctest.TestResults:
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    for test in doctest.DocTestFinder(exclude_empty=True).find(module, module.__name__):
        if test.filename and "mentored" not in test.filename.replace("\\", "/"):
            continue  # a docstring imported from another package
        runner.run(test)
    return runner.summarize(verbose=False)


@pytest.mark.parametrize("name", MODULES)
def test_the_examples_run(name):
    result = _run(importlib.import_module(name))
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} examples fail (their output is printed above)"
    assert result.attempted >= EXAMPLES.get(name, 0), f"{name}: {result.attempted} examples ran, {EXAMPLES[name]} expected"


def test_a_wrong_example_fails():
    """The harness itself: an example whose output is wrong is counted as failed."""
    module = types.ModuleType("mentored_doctest_probe")
    module.__doc__ = ">>> import mentored\n>>> round(mentored.solve([0.5, 0.5], [0.9, 0.1], divergence='tv', budget=0.1).acceptance, 6)\n0.6\n"
    module.__file__ = "mentored_doctest_probe.py"
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    for test in doctest.DocTestFinder().find(module, module.__name__):
        runner.run(test, out=lambda _: None)
    assert runner.summarize(verbose=False) == doctest.TestResults(failed=1, attempted=2)  # 1 − TV + ε is 0.7, not 0.6
