"""SWE-style instances: read the JSONL the public datasets publish into one `Instance` record.

Accepted row layouts (field names as their dataset cards and harnesses publish them):

- SWE-bench / SWE-bench Verified / Lite: instance_id, repo, base_commit, patch (the gold fix),
  test_patch, problem_statement, hints_text, created_at, version, environment_setup_commit,
  FAIL_TO_PASS and PASS_TO_PASS as JSON strings.
- SWE-Gym: the same fields, FAIL_TO_PASS / PASS_TO_PASS as lists.
- SWE-smith: instance_id ("owner__name.commit8.<strategy>__<hash>"), repo
  ("swesmith/owner__name.commit8"), image_name ("jyangballin/swesmith.x86_64.owner_1776_name.
  commit8"), patch, FAIL_TO_PASS, PASS_TO_PASS (lists), problem_statement, and base_commit (its
  gather.py writes the mirror's commit into every row). Its `patch` INTRODUCES the bug (the
  dataset's maintainers flip it to get the fix); there is no test_patch: the tests are already in
  the repository. Recognised by those fields (the swesmith image, repo or id), so a row with
  base_commit is still read as SWE-smith; a row with neither test_patch nor base_commit (the
  layout make_set.py writes) is read the same way.
- R2E-Gym: repo_name, docker_image, commit_hash, problem_statement, expected_output_json (test
  name -> status after the fix), parsed_commit_content, ...; the required tests are those whose
  expected status is PASSED (F2P and P2P are not told apart there: validation asks that all pass
  after the fix and at least one fails before). Without a `patch` field the fix is the diff of
  commit_hash against its parent, read from a local git repo_path.

Any layout may add `repo_path`: a local git repository (checked out at base_commit when one is
given), a plain directory holding the repository, or a source archive (a PyPI sdist: .tar.gz,
.tgz, .tar.bz2, .tar.xz, .tar) unpacked on first use into a cache dir (envs/swe/archives.py; the
optional `repo_files` globs keep only those of its files), for machines without registry access;
a relative path is resolved against the JSONL file's directory. Without it the instance runs in its
image (image_name / docker_image; for SWE-bench rows, which publish none, the harness's own name
swebench/sweb.eval.x86_64.<id with __ as _1776_>:latest). Optional `test_files` lists the test
files to run (default: the files of the FAIL_TO_PASS / PASS_TO_PASS ids); `split` (train|test)
overrides the hash split.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from envs.errors import MissingData, TaskError
from envs.swe.archives import ARCHIVE_SUFFIXES, is_archive, unpack

__all__ = ["Instance", "load_instances", "parse_instance", "split_of"]

Schema = Literal["swe-bench", "swe-smith", "r2e-gym"]
TEST_FRACTION = 0.2


@dataclass(frozen=True, slots=True)
class Instance:
    """One task. `bug_patch` turns the repository's files into the start state ("" when the
    repository already is the buggy state, as in SWE-bench); `gold_patch` fixes it."""

    instance_id: str
    repo: str
    problem_statement: str
    gold_patch: str
    bug_patch: str
    test_patch: str
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]
    base_commit: str
    version: str
    image: str  # a docker image with the repository at /testbed ("" when none)
    repo_path: str  # a local repository ("" when none)
    schema: Schema
    split: str
    test_files: tuple[str, ...]

    @property
    def tests(self) -> tuple[str, ...]:
        return self.fail_to_pass + self.pass_to_pass


def split_of(instance_id: str) -> str:
    bucket = int(hashlib.sha256(instance_id.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
    return "test" if bucket < TEST_FRACTION else "train"


def load_instances(path: str | Path) -> list[Instance]:
    """Every row of a JSONL file (or a JSON list, or one JSON object, pretty-printed or not) as
    an Instance; errors name the row and field."""
    path = Path(path)
    if not path.is_file():
        raise MissingData(
            f"SWE instance file {path} does not exist; fix the path (env.kwargs.source=swe:PATH)"
        )
    text = path.read_text()
    rows: list[Any]
    head = text.lstrip()[:1]
    whole: Any = None
    if head in ("[", "{"):
        try:
            whole = json.loads(text)
        except json.JSONDecodeError as exc:
            if head == "[":
                raise ValueError(f"{path}: not a JSON list: {exc}") from exc
    if isinstance(whole, list):
        rows = whole
    elif isinstance(whole, dict):  # one instance, e.g. a dataset card's pretty-printed sample
        rows = [whole]
    else:
        rows = []
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise TaskError(
                        f"{path}:{number}: not a JSON object ({exc}); one instance per line (docs/swe.md)"
                    ) from exc
    out = [
        parse_instance(row, base_dir=path.parent, where=f"{path}:{i + 1}")
        for i, row in enumerate(rows)
    ]
    seen: set[str] = set()
    for inst in out:
        if inst.instance_id in seen:
            raise TaskError(f"{path}: instance_id {inst.instance_id!r} appears twice")
        seen.add(inst.instance_id)
    if not out:
        raise TaskError(f"{path} holds no instances")
    return out


def parse_instance(row: Any, *, base_dir: Path | None = None, where: str = "row") -> Instance:
    if not isinstance(row, dict):
        raise TaskError(f"{where}: an instance must be a JSON object, got {type(row).__name__}")
    schema = _schema(row)
    if schema == "r2e-gym":
        return _r2e(row, base_dir, where)
    iid = _text(row, "instance_id", where, required=True)
    patch = _text(row, "patch", where, required=True)
    smith = schema == "swe-smith"
    f2p = _ids(row, "FAIL_TO_PASS", where)
    if not f2p:
        raise TaskError(
            f"{where}: FAIL_TO_PASS of {iid!r} is empty; an instance needs a test "
            "that fails before the fix"
        )
    return Instance(
        instance_id=iid,
        repo=_text(row, "repo", where),
        problem_statement=_text(row, "problem_statement", where, required=True),
        gold_patch=reverse_patch(patch) if smith else patch,
        bug_patch=patch if smith else "",
        test_patch=_text(row, "test_patch", where),
        fail_to_pass=f2p,
        pass_to_pass=_ids(row, "PASS_TO_PASS", where),
        base_commit=_text(row, "base_commit", where),
        version=str(row.get("version") or ""),
        image=_image(row, iid, schema, where),
        repo_path=_repo_path(row, base_dir, where),
        schema=schema,
        split=_split(row, iid, where),
        test_files=_test_files(row, f2p + _ids(row, "PASS_TO_PASS", where), where),
    )


_SMITH_ID = re.compile(r"^[\w.-]+__[\w.-]+\.[0-9a-f]{8}\.[\w.-]+$")


def _schema(row: dict[str, Any]) -> Schema:
    if "repo_name" in row and "expected_output_json" in row:
        return "r2e-gym"
    if row.get("test_patch"):  # SWE-bench, Verified, Lite, SWE-Gym: the fix and its tests
        return "swe-bench"
    image = str(row.get("image_name") or "").rsplit("/", 1)[-1]
    if (
        image.startswith("swesmith.")
        or str(row.get("repo") or "").startswith("swesmith/")
        or _SMITH_ID.match(str(row.get("instance_id") or ""))
    ):
        return "swe-smith"  # its patch introduces the bug, whether or not it has base_commit
    # make_set.py's rows (and older SWE-smith exports): no test_patch, no base_commit
    if "test_patch" not in row and "base_commit" not in row:
        return "swe-smith"
    return "swe-bench"


def _r2e(row: dict[str, Any], base_dir: Path | None, where: str) -> Instance:
    repo = _text(row, "repo_name", where, required=True)
    commit = _text(row, "commit_hash", where, required=True)
    expected = row["expected_output_json"]
    try:
        statuses = json.loads(expected) if isinstance(expected, str) else expected
    except json.JSONDecodeError as exc:
        raise TaskError(f"{where}: expected_output_json is not JSON: {exc}") from exc
    if not isinstance(statuses, dict):
        raise TaskError(f"{where}: expected_output_json must map test names to statuses")
    required = tuple(sorted(k for k, v in statuses.items() if str(v).upper() == "PASSED"))
    if not required:
        raise TaskError(f"{where}: expected_output_json of {repo}@{commit} names no PASSED test")
    iid = str(row.get("instance_id") or f"{repo}-{commit}")
    repo_path = _repo_path(row, base_dir, where)
    gold = _text(row, "patch", where) or _commit_diff(repo_path, commit, where)
    return Instance(
        instance_id=iid,
        repo=repo,
        problem_statement=_text(row, "problem_statement", where, required=True),
        gold_patch=gold,
        bug_patch="",
        test_patch="",
        fail_to_pass=required,
        pass_to_pass=(),
        base_commit=f"{commit}^",  # commit_hash is the fixing commit: its parent is the task
        version="",
        image=_text(row, "docker_image", where),
        repo_path=repo_path,
        schema="r2e-gym",
        split=_split(row, iid, where),
        test_files=(),
    )


def _commit_diff(repo_path: str, commit: str, where: str) -> str:
    """R2E-Gym-Subset publishes no patch: the fix is its commit's diff (local git repos only)."""
    if not repo_path or not (Path(repo_path) / ".git").exists():
        return ""
    import subprocess

    run = subprocess.run(
        ["git", "-C", repo_path, "diff", f"{commit}^", commit],
        capture_output=True,
        text=True,
        check=False,
    )
    if run.returncode != 0:
        raise TaskError(f"{where}: commit_hash {commit} is not in repo_path: {run.stderr[:200]}")
    return run.stdout


def _text(row: dict[str, Any], key: str, where: str, *, required: bool = False) -> str:
    value = row.get(key)
    if value is None or value == "":
        if required:
            raise TaskError(f"{where}: field {key!r} is missing or empty")
        return ""
    if not isinstance(value, str):
        raise TaskError(f"{where}: field {key!r} must be a string, got {type(value).__name__}")
    return value


def _ids(row: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    """A test-id list given as a list or as a JSON string of a list (SWE-bench writes both)."""
    value = row.get(key, [])
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else []
        except json.JSONDecodeError as exc:
            raise TaskError(f"{where}: {key} is a string but not a JSON list: {exc}") from exc
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise TaskError(f"{where}: {key} must be a list of test ids (or a JSON string of one)")
    return tuple(value)


def _repo_path(row: dict[str, Any], base_dir: Path | None, where: str) -> str:
    raw = _text(row, "repo_path", where)
    if not raw:
        return ""
    path = Path(raw)
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    keep = _globs(row, where)
    if is_archive(path):
        if not path.is_file():
            raise ValueError(f"{where}: repo_path {raw!r} is not a file (looked at {path})")
        try:
            return str(unpack(path, keep))
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from exc
    if keep:
        raise ValueError(f"{where}: repo_files selects files of an archive; {raw!r} is not one")
    if not path.is_dir():
        raise TaskError(
            f"{where}: repo_path {raw!r} is not a directory or a source archive "
            f"({', '.join(ARCHIVE_SUFFIXES)}) (looked at {path})"
        )
    return str(path.resolve())


def _globs(row: dict[str, Any], where: str) -> tuple[str, ...]:
    value = row.get("repo_files", [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ValueError(f"{where}: repo_files must be a list of globs")
    return tuple(value)


def _image(row: dict[str, Any], iid: str, schema: Schema, where: str) -> str:
    named = _text(row, "image_name", where) or _text(row, "docker_image", where)
    if named or schema != "swe-bench":
        return named
    # SWE-bench publishes no image field: its harness names the per-instance image this way
    return f"swebench/sweb.eval.x86_64.{iid.replace('__', '_1776_').lower()}:latest"


def _split(row: dict[str, Any], iid: str, where: str) -> str:
    split = row.get("split") or split_of(iid)
    if split not in ("train", "test"):
        raise TaskError(f"{where}: split must be 'train' or 'test', got {split!r}")
    return str(split)


def _test_files(row: dict[str, Any], ids: tuple[str, ...], where: str) -> tuple[str, ...]:
    given = row.get("test_files")
    if given is not None:
        if not isinstance(given, list) or not all(isinstance(f, str) for f in given):
            raise TaskError(f"{where}: test_files must be a list of paths")
        return tuple(given)
    return tuple(dict.fromkeys(t.split("::")[0] for t in ids if "::" in t))


def reverse_patch(patch: str) -> str:
    """A unified diff with its direction flipped (what SWE-smith's maintainers do to turn a
    bug-introducing patch into its fix): -/+ lines swap, hunk ranges swap, file headers swap."""
    out: list[str] = []
    lines = patch.splitlines(keepends=True)
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            out += ["--- " + lines[i + 1][4:], "+++ " + line[4:]]
            i += 2
            continue
        if line.startswith("@@"):
            out.append(_flip_hunk(line))
            i += 1
            while (
                i < len(lines)
                and lines[i][:1] in ("-", "+", " ", "\\")
                and not (
                    lines[i].startswith("--- ")
                    and i + 1 < len(lines)
                    and lines[i + 1].startswith("+++ ")
                )
            ):
                body = lines[i]
                if body[:1] == "-":
                    body = "+" + body[1:]
                elif body[:1] == "+":
                    body = "-" + body[1:]
                out.append(body)
                i += 1
            continue
        out.append(line)
        i += 1
    return "".join(out)


def _flip_hunk(header: str) -> str:
    parts = header.split(" ")
    # "@@ -a,b +c,d @@ tail"
    if len(parts) >= 4 and parts[1].startswith("-") and parts[2].startswith("+"):
        parts[1], parts[2] = "-" + parts[2][1:], "+" + parts[1][1:]
    return " ".join(parts)
