"""The mutant list stays applicable: each hand-applied bug in `tests/mutants.py` still names text
that occurs exactly once in its file and a killing test that exists. A refactor that moves the
mutated line otherwise turns the mutant into a crash of the runner, not a check (issue 36)."""

import ast
import importlib.util
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _mutants() -> dict:
    spec = importlib.util.spec_from_file_location("mutants", ROOT / "tests" / "mutants.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # runs nothing: the runner is behind __main__
    return module.MUTANTS


def _test_functions(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def test_every_mutant_applies_once_and_names_a_killing_test_that_exists():
    mutants = _mutants()
    assert len(mutants) >= 40
    problems = []
    for name, (path, old, new, test) in mutants.items():
        src = (ROOT / path).read_text()
        if src.count(old) != 1:
            problems.append(f"{name}: its text occurs {src.count(old)} times in {path}")
        if old == new:
            problems.append(f"{name}: the mutation changes nothing")
        test_file, _, function = test.partition("::")
        if not (ROOT / test_file).is_file():
            problems.append(f"{name}: no test file {test_file}")
        elif function not in _test_functions(ROOT / test_file):
            problems.append(f"{name}: {test_file} has no test {function}")
    assert not problems, "\n".join(problems)
