"""SWE instance files in the public layouts (SWE-bench, SWE-Gym, SWE-smith, R2E-Gym), patches,
the editor helpers and SWE-bench's pytest log parser: pure host-side behaviour, no sandbox."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from envs.swe.editing import gold_edits, view_range_text
from envs.swe.instances import load_instances, reverse_patch
from envs.swe.repo import apply_patch, is_test_path, materialize
from envs.swe.validate import parse_pytest_log
from envs.tools import ToolError

FIXTURES = Path(__file__).parent / "swe_fixtures"
sys.path.insert(0, str(FIXTURES))
import fixture_repo  # noqa: E402

LAYOUTS = ("swe_bench", "swe_bench_verified", "swe_gym", "swe_smith", "r2e_gym")


@pytest.fixture(scope="module")
def git_repo(tmp_path_factory) -> Path:
    return _built(tmp_path_factory.mktemp("repo") / "minicalc")


def _built(dest: Path) -> Path:
    commits = fixture_repo.build(dest)
    bench = [json.loads(line) for line in (FIXTURES / "swe_bench.jsonl").read_text().splitlines()]
    assert {r["base_commit"] for r in bench} <= set(commits.values()), "fixture hashes changed"
    return dest


def with_repo(layout: str, repo: Path, tmp: Path, **changes) -> Path:
    rows = [json.loads(line) for line in (FIXTURES / f"{layout}.jsonl").read_text().splitlines()]
    for row in rows:
        row.update(repo_path=str(repo), **changes)
    out = tmp / f"{layout}.jsonl"
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out


@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_public_layout_loads_and_its_gold_patch_fixes_its_start_state(
    layout, git_repo, tmp_path
):
    for inst in load_instances(with_repo(layout, git_repo, tmp_path)):
        assert inst.fail_to_pass and inst.problem_statement and inst.image
        tree = materialize(inst, tmp_path / inst.instance_id, with_tests=True)
        ops = (tree / "minicalc/ops.py").read_text()
        apply_patch(tree, inst.gold_patch)
        fixed = (tree / "minicalc/ops.py").read_text()
        assert fixed != ops and fixed == (fixture_repo.SOURCE / "minicalc/ops.py").read_text()


def test_layout_specific_fields_are_read_as_published(git_repo, tmp_path):
    bench = load_instances(with_repo("swe_bench", git_repo, tmp_path))[1]
    gym = load_instances(with_repo("swe_gym", git_repo, tmp_path))[1]
    # SWE-bench writes the id lists as JSON strings, SWE-Gym as lists: the same ids either way
    assert bench.fail_to_pass == gym.fail_to_pass and len(bench.fail_to_pass) == 3
    assert bench.image == "swebench/sweb.eval.x86_64.fixture_1776_minicalc-101:latest"
    smith = load_instances(with_repo("swe_smith", git_repo, tmp_path))[0]
    assert smith.bug_patch and smith.gold_patch == reverse_patch(smith.bug_patch)
    assert smith.image.startswith("jyangballin/swesmith") and not smith.test_patch
    r2e = load_instances(with_repo("r2e_gym", git_repo, tmp_path))[0]
    assert r2e.schema == "r2e-gym" and r2e.base_commit.endswith("^") and len(r2e.tests) == 6


def test_swe_smith_rows_with_base_commit_in_one_pretty_printed_object_are_read_as_swe_smith(
    git_repo, tmp_path
):
    """SWE-smith's gather.py writes base_commit into every row: the loader must still take its
    patch as the bug (before, such a row was a SWE-bench row: null agent 1, oracle 0)."""
    row = json.loads((FIXTURES / "swe_smith_sample.json").read_text())
    assert row["base_commit"] and "test_patch" not in row
    row["repo_path"] = str(git_repo)
    path = tmp_path / "sample.json"
    path.write_text(json.dumps(row, indent=4))  # one object over many lines, as published
    (inst,) = load_instances(path)
    assert inst.schema == "swe-smith" and inst.bug_patch == row["patch"]
    tree = materialize(inst, tmp_path / "start", with_tests=True)
    assert (tree / "minicalc/ops.py").read_text() != (
        fixture_repo.SOURCE / "minicalc/ops.py"
    ).read_text()
    apply_patch(tree, inst.gold_patch)
    assert (tree / "minicalc/ops.py").read_text() == (
        fixture_repo.SOURCE / "minicalc/ops.py"
    ).read_text()
    verified = load_instances(with_repo("swe_bench_verified", git_repo, tmp_path))[0]
    assert verified.schema == "swe-bench" and verified.test_patch


def test_bad_instance_files_fail_naming_the_row_and_field(git_repo, tmp_path):
    good = json.loads((FIXTURES / "swe_gym.jsonl").read_text().splitlines()[0])
    cases = {
        "FAIL_TO_PASS": ({"FAIL_TO_PASS": "not json ["}, "not a JSON list"),
        "empty F2P": ({"FAIL_TO_PASS": []}, "FAIL_TO_PASS .* is empty"),
        "missing": ({"problem_statement": ""}, "'problem_statement' is missing"),
        "repo_path": ({"repo_path": "no/such/dir"}, "repo_path 'no/such/dir' is not a directory"),
    }
    for name, (change, message) in cases.items():
        path = tmp_path / f"{name}.jsonl"
        path.write_text(json.dumps(good | change) + "\n")
        with pytest.raises(ValueError, match=message):
            load_instances(path)
    path = tmp_path / "dup.jsonl"
    path.write_text((json.dumps(good) + "\n") * 2)
    with pytest.raises(ValueError, match="appears twice"):
        load_instances(path)


def test_reverse_patch_undoes_the_patch(git_repo, tmp_path):
    smith = load_instances(with_repo("swe_smith", git_repo, tmp_path))[2]
    tree = materialize(smith, tmp_path / "t")  # the bug is applied
    apply_patch(tree, reverse_patch(smith.bug_patch))
    assert (tree / "minicalc/ops.py").read_text() == (
        fixture_repo.SOURCE / "minicalc/ops.py"
    ).read_text()


def test_gold_edits_are_unique_str_replace_edits(git_repo, tmp_path):
    for inst in load_instances(with_repo("swe_bench", git_repo, tmp_path)):
        tree = materialize(inst, tmp_path / inst.instance_id)
        for path, old, new in gold_edits(inst.gold_patch):
            text = (tree / path).read_text()
            assert text.count(old) == 1
            (tree / path).write_text(text.replace(old, new))
        assert (tree / "minicalc/ops.py").read_text() == (
            fixture_repo.SOURCE / "minicalc/ops.py"
        ).read_text()


def test_view_range_numbers_lines_and_refuses_bad_ranges():
    text = "a\nb\nc\nd\n"
    assert view_range_text(text, [2, 3]) == "     2\tb\n     3\tc\n"
    assert view_range_text(text, [3, -1]).splitlines()[-1].endswith("d")
    with pytest.raises(ToolError, match="outside"):
        view_range_text(text, [9, 10])


def test_test_paths_are_what_swe_bench_calls_tests():
    for path in ("tests/test_x.py", "pkg/tests/helpers.py", "conftest.py", "a/b_test.py"):
        assert is_test_path(path), path
    for path in ("pkg/core.py", "pkg/contest.py", "testing_utils.py"):
        assert not is_test_path(path), path


def test_pytest_log_parser_reads_rA_summary_lines():
    log = (
        "tests/test_ops.py ..F\n=== short test summary info ===\n"
        "PASSED tests/test_ops.py::test_mean[xs0-2.0]\n"
        "PASSED tests/test_ops.py::test_id[a b - c]\n"
        "FAILED tests/test_ops.py::TestRunning::test_running_total - assert [1, 2] == [1, 3]\n"
        "FAILED tests/test_ops.py::test_p[x - y] - assert [1] == [2]\n"
        "ERROR tests/test_ops.py::test_boom - RuntimeError\n"
    )
    assert parse_pytest_log(log) == {
        "tests/test_ops.py::test_mean[xs0-2.0]": "PASSED",
        "tests/test_ops.py::test_id[a b - c]": "PASSED",
        "tests/test_ops.py::TestRunning::test_running_total": "FAILED",
        "tests/test_ops.py::test_p[x - y]": "FAILED",
        "tests/test_ops.py::test_boom": "ERROR",
    }


def test_fixture_repository_hashes_are_reproducible(tmp_path):
    out = subprocess.run(
        [sys.executable, str(FIXTURES / "fixture_repo.py")], capture_output=True, text=True
    )
    assert "main 108d4c96244f23d6bb6c6883b495b5f4e842d3f2" in out.stdout, out.stderr


def test_the_docs_own_data_command_composes_and_loads_that_file(git_repo, tmp_path):
    """docs/swe.md's `env=swe env.kwargs.source=swe:PATH` as written (issue 35: it failed with
    "Key 'source' is not in struct"), and the env it builds reads PATH, not the shipped set."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    import envs
    from gspo_agents.config import CONFIG_DIR, register_schemas

    path = with_repo("swe_gym", git_repo, tmp_path)
    register_schemas()
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        cfg = compose(config_name="config", overrides=["env=swe", f"env.kwargs.source=swe:{path}"])
    env = envs.make(cfg.env.name, **OmegaConf.to_container(cfg.env.kwargs, resolve=True))
    ids = {row["id"] for split in ("train", "test") for row in env.load_tasks(split)}
    assert ids == {inst.instance_id for inst in load_instances(path)}
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        default = compose(config_name="config", overrides=["env=swe"])
    shipped = envs.make("swe", **OmegaConf.to_container(default.env.kwargs, resolve=True))
    assert len(shipped.load_tasks("train")) > len(ids)  # null source: the shipped set


def _sdist(path: Path, files: dict[str, str], *, evil: bool = False) -> Path:
    """A PyPI-style sdist: everything under NAME-VERSION/, here with a src/ layout."""
    import io
    import tarfile

    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{path.name.removesuffix('.tar.gz')}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        if evil:
            link = tarfile.TarInfo("calc-1.0/src/calc/link.py")
            link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
            tar.addfile(link)
            up = tarfile.TarInfo("calc-1.0/../../outside.py")
            up.size = 1
            tar.addfile(up, io.BytesIO(b"x"))
    return path


def test_a_source_archive_repo_path_is_unpacked_once_into_the_cache(tmp_path, monkeypatch):
    from concurrent.futures import ThreadPoolExecutor

    from envs.swe import archives

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setattr(archives, "_unpacked", {})
    files = {
        "src/calc/__init__.py": "def add(a, b):\n    return a + b\n",
        "tests/test_calc.py": "from calc import add\n\ndef test_add():\n    assert add(1, 2) == 3\n",
        "LICENSE": "MIT\n",
        "docs/conf.py": "project = 'calc'\n",
        "setup.py": "raise SystemExit('not run')\n",
    }
    (tmp_path / "data").mkdir()
    archive = _sdist(tmp_path / "data" / "calc-1.0.tar.gz", files, evil=True)
    keep = ["calc/*.py", "tests/*.py", "LICENSE"]
    row = json.loads((FIXTURES / "swe_smith.jsonl").read_text().splitlines()[0])
    bug = (
        "diff --git a/calc/__init__.py b/calc/__init__.py\n--- a/calc/__init__.py\n"
        "+++ b/calc/__init__.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a + b\n"
        "+    return a - b\n"
    )
    row |= {"repo_path": "calc-1.0.tar.gz", "repo_files": keep, "patch": bug}
    (tmp_path / "data" / "set.jsonl").write_text(json.dumps(row) + "\n")
    with ThreadPoolExecutor(4) as pool:  # concurrent loaders: one tree, never half of one
        trees = set(pool.map(lambda _: archives.unpack(archive, tuple(keep)), range(4)))
    inst = load_instances(tmp_path / "data" / "set.jsonl")[0]
    tree = Path(inst.repo_path)
    assert trees == {tree} and tree.name == "calc-1.0"
    assert tree.is_relative_to(tmp_path / "home/.cache/gspo-agents/swe-repos")
    kept = sorted(p.relative_to(tree).as_posix() for p in tree.rglob("*") if p.is_file())
    # src/ flattened, only the kept globs, no link, nothing outside the tree
    assert kept == ["LICENSE", "calc/__init__.py", "tests/test_calc.py"], kept
    assert not (tmp_path / "outside.py").exists() and not list(tmp_path.rglob("outside.py"))
    assert list((tmp_path / "home/.cache/gspo-agents/swe-repos").iterdir()) == [tree.parent]
    start = materialize(inst, tmp_path / "start")  # the bug applies to the unpacked tree
    assert "return a - b" in (start / "calc/__init__.py").read_text()
    # the whole archive without repo_files; a changed archive is a new tree
    whole = archives.unpack(archive)
    assert (whole / "src/calc/__init__.py").is_file() and (whole / "setup.py").is_file()
    _sdist(archive, files | {"LICENSE": "BSD\n"})
    assert (archives.unpack(archive, tuple(keep)) / "LICENSE").read_text() == "BSD\n"


def test_bad_source_archives_fail_naming_the_row(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    good = json.loads((FIXTURES / "swe_smith.jsonl").read_text().splitlines()[0])
    (tmp_path / "junk.tar.gz").write_bytes(b"not a tarball")
    _sdist(tmp_path / "calc-1.0.tar.gz", {"calc/__init__.py": ""})
    cases = {
        "missing": ({"repo_path": "none-1.0.tar.gz"}, "repo_path 'none-1.0.tar.gz' is not a file"),
        "junk": ({"repo_path": "junk.tar.gz"}, "junk.tar.gz cannot be read"),
        "globs": (
            {"repo_path": "calc-1.0.tar.gz", "repo_files": ["nothing/*.py"]},
            r"no file matches repo_files \['nothing/\*.py'\]",
        ),
        "dir": ({"repo_path": ".", "repo_files": ["a.py"]}, "'.' is not one"),
    }
    for name, (change, message) in cases.items():
        path = tmp_path / f"{name}.jsonl"
        path.write_text(json.dumps(good | change) + "\n")
        with pytest.raises(ValueError, match=f"{name}.jsonl:1: .*{message}"):
            load_instances(path)
