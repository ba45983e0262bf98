"""SWE-v0: resolve an issue in a real repository with SWE-agent-style tools; graded like SWE-bench.

Each episode opens a sandbox session with the instance's start state (its repository at
base_commit, plus the bug for SWE-smith-style rows) and pytest importable (`python3 -m pytest`).
Where it is (images.py): an instance whose image (image_name / docker_image / SWE-bench's
harness name) is on the docker engine or can be pulled runs in that image with the repository at
/testbed and the image's python first on the PATH (SWE-bench's testbed env); otherwise its
repo_path is uploaded to /workspace/repo, on an image built once per repository from the sandbox
base with the repository's declared dependencies (docker), with pytest bundled at
/workspace/.deps. Tools: `bash`, `view` (a
file with line numbers, an optional [start, end] range, or a directory listing), `create`,
`str_replace` (old_str must occur exactly once), `insert` (after line N), `undo_edit` (the last
edit of a file), `submit`. Output longer than `max_tool_output_chars` is cut with a marker; each
command has `exec_timeout_s`, the session a CPU budget (`session_cpu_s`) and the episode
`max_turns` turns.

Reward (grading.py): 1 when every FAIL_TO_PASS and PASS_TO_PASS test passes after the episode
(SWE-bench's "resolved"), else 0; `partial_credit=True` gives the passing fraction instead. The
grader kills the agent's processes, rebuilds the repository from the instance file, takes only
the agent's versions of the repository's own non-test source files, and runs the tests in a
fresh session (on the same image) whose only trusted output is a nonce-tagged line. `info["grade_reason"]` says why
an episode did not resolve. A sandbox failure raises InfraError (the trajectory is an error,
never a 0); a spent session budget ends the episode, which is graded as it stands.

kwargs: source ("swe:PATH", a JSONL of instances; default the shipped set), backend,
session_options, exec_timeout_s, session_cpu_s, test_timeout_s, partial_credit, max_turns, tools,
images ("auto": the instance's image when local or pullable; "local": never pull; "off": always
repo_path on the sandbox base). An instance with only an image runs on backend docker (or auto
with docker working); elsewhere it is refused with a message naming the fix.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import tempfile
from pathlib import Path
from typing import Any

from envs.base import Message
from envs.errors import InfraError
from envs.swe.editing import gold_edits, numbered, view_range_text
from envs.swe.grading import Verdict, graded_tree, judge, run_tests
from envs.swe.images import Placement, placement, repo_dir, repo_options
from envs.swe.instances import Instance, load_instances
from envs.swe.reference import reference_turns
from envs.swe.repo import PatchError, materialize, pytest_bundle
from envs.swe.runners import DEPS, runner_for
from envs.swe.testbed import ImageTree, agent_edits, manifest, patch_in_session, patch_paths
from envs.tools import ToolEnv, ToolError, tool
from envs.tools.session import EpisodeSession

REPO = "/workspace/repo"
DEFAULT_SOURCE = "swe:" + str(Path(__file__).with_name("data") / "instances.jsonl")
SYSTEM_PROMPT = (
    "You are a software engineer. The repository is at {repo}. Reproduce the issue, "
    "fix the source code (not the tests), run the tests with `python3 -m pytest`, then call "
    "submit."
)


def system_prompt(inst: Instance, repo: str) -> str:
    text = SYSTEM_PROMPT.format(repo=repo)
    spec = runner_for(inst)
    if spec.name == "django":  # its own runner: say how it is run
        text = text.replace("`python3 -m pytest`", "`python3 tests/runtests.py LABEL` (Django's)")
    return text


class SWEEnv(ToolEnv):
    """gspo/SWE-v0; see the module docstring."""

    max_tool_calls_per_turn = 4
    max_tool_output_chars = 4000

    def __init__(
        self,
        *,
        source: str | None = None,  # None: DEFAULT_SOURCE, the shipped set
        max_turns: int = 20,
        backend: str = "auto",
        session_options: dict[str, Any] | None = None,
        exec_timeout_s: float = 60.0,
        session_cpu_s: float = 600.0,
        test_timeout_s: float = 300.0,
        partial_credit: bool = False,
        max_tool_calls_per_turn: int | None = None,
        max_tool_output_chars: int | None = None,
        tools: list[str] | None = None,
        images: str = "auto",
        sandbox: Any | None = None,  # the trainer's shared judging sandbox: grading uses sessions
    ) -> None:
        super().__init__(
            max_turns,
            max_tool_calls_per_turn=max_tool_calls_per_turn,
            max_tool_output_chars=max_tool_output_chars,
            tools=tools,
        )
        source = source or DEFAULT_SOURCE
        kind, _, path = source.partition(":")
        if kind != "swe" or not path:
            raise ValueError(f"SWE-v0 source must be 'swe:PATH' (a JSONL file), got {source!r}")
        self.source_path = path
        self._backend = backend
        self._session_options = dict(session_options or {})
        self.session = EpisodeSession(backend, **self._session_options)
        self.exec_timeout_s, self.session_cpu_s = exec_timeout_s, session_cpu_s
        self.test_timeout_s = test_timeout_s
        self.partial_credit = bool(partial_credit)
        self.images = images
        self._placements: dict[str, Placement] = {}
        self._repo_dirs: dict[str, str] = {}
        self._place = Placement(REPO)
        self._options: dict[str, Any] = dict(self._session_options)
        self._manifest: dict[str, str] = {}
        self._history: dict[str, list[str]] = {}
        self._last: dict[str, Any] = {}
        self._submitted = False

    # -- data -----------------------------------------------------------------------------------
    def load_tasks(self, split: str) -> list[dict[str, Any]]:
        if split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test', got {split!r}")
        return [task_row(i) for i in load_instances(self.source_path) if i.split == split]

    def initial_messages(self, task: dict[str, Any]) -> list[Message]:
        return [
            {"role": "system", "content": system_prompt(instance_of(task), self._repo_dir(task))},
            {"role": "user", "content": task["problem_statement"]},
        ]

    def reference_response(self, task: dict[str, Any]) -> list[str] | None:
        """The cold start's turns: look around, reproduce, edit (the gold patch), test, submit;
        only with the tools this env offers, within max_turns (see reference.py)."""
        return reference_turns(
            instance_of(task),
            self._tools,
            max_turns=self.max_turns,
            max_calls=self.max_tool_calls_per_turn,
        )

    # -- session --------------------------------------------------------------------------------
    def _repo_dir(self, task: dict[str, Any]) -> str:
        inst = instance_of(task)
        if inst.instance_id not in self._repo_dirs:  # at most one `docker image inspect`
            where = repo_dir(inst, backend=self._backend, images=self.images)
            self._repo_dirs[inst.instance_id] = where
        return self._repo_dirs[inst.instance_id]

    def _placed(self, task: dict[str, Any]) -> Placement:
        inst = instance_of(task)
        if inst.instance_id not in self._placements:
            self._placements[inst.instance_id] = placement(
                inst, backend=self._backend, images=self.images
            )
        return self._placements[inst.instance_id]

    async def on_start(self) -> None:
        from sandbox import SandboxError
        from sandbox.sessions.api import SessionLimits

        task = self._require_task()
        inst = instance_of(task)
        try:  # a pull, an image's preparation or a dependency build can take minutes: a thread
            self._place = await asyncio.to_thread(self._placed, task)
        except SandboxError as exc:  # the engine, a pull, a broken image: never a reward of 0
            raise InfraError(f"SWE-v0 cannot start {inst.instance_id!r}: {exc}") from exc
        announced = self._repo_dir(task)
        if self._place.repo_dir != announced:  # its image came or went since the prompt
            self._repo_dirs.pop(inst.instance_id, None)
            raise InfraError(
                f"SWE-v0: the prompt of {inst.instance_id!r} said {announced}, but its image "
                f"changed since; it runs at {self._place.repo_dir} from the next episode"
            )
        self._history, self._last, self._submitted = {}, {}, False
        limits = SessionLimits(exec_timeout_s=self.exec_timeout_s, cpu_s=self.session_cpu_s)
        with tempfile.TemporaryDirectory(prefix="swe-start-") as tmp:
            tree = None
            if not self._place.in_image:
                tree = materialize(inst, Path(tmp) / "repo")
                try:
                    extra = await asyncio.to_thread(
                        repo_options, tree, backend=self._backend, images=self.images
                    )
                except (SandboxError, RuntimeError) as exc:  # a dependency build failed
                    raise InfraError(f"SWE-v0 cannot start {inst.instance_id!r}: {exc}") from exc
                self._options = {**self._session_options, **extra}
            else:
                self._options = {**self._session_options, **self._place.options}
            ws = await self.session.open(limits, **self._options)
            try:
                await self._set_up(ws, inst, tree)
            except SandboxError as exc:
                await self.session.close()
                raise InfraError(f"SWE-v0 could not set up its workspace: {exc}") from exc

    async def _set_up(self, ws: Any, inst: Instance, tree: Path | None) -> None:
        bundle = True
        if tree is not None:
            await ws.upload(tree, "repo")
        else:  # the image's /testbed: the bug, then the trusted list of its source files
            await patch_in_session(ws, inst.bug_patch, what=f"{inst.instance_id}: bug patch")
            self._manifest = await manifest(ws)
            bundle = not self._place.prepared.test_has_pytest
        exports = "PYTHONDONTWRITEBYTECODE=1"
        paths = []
        if bundle:
            await ws.upload(pytest_bundle(), ".deps")
            paths.append("/workspace/.deps")
        spec = runner_for(inst)
        if spec.guarded:  # django / sympy: their pure-Python dependencies, imported in place
            await ws.upload(DEPS, ".wheels")
            paths += [f"/workspace/.wheels/{w.name}" for w in spec.wheels()]
        if paths:
            exports += " PYTHONPATH=" + ":".join(paths)
        await ws.exec(f"cd {self._place.repo_dir} && export {exports}")

    async def on_close(self) -> None:
        await self.session.close()

    async def _exec(self, command: str) -> str:
        return await self.session.call(
            "exec",
            command,
            timeout_s=self.exec_timeout_s,
            on_budget_spent=self.end_episode,
            budget_message="the session's compute budget is spent ({exc}); the episode ends",
        )

    # -- tools ----------------------------------------------------------------------------------
    @tool
    async def bash(self, command: str) -> str:
        """Run a bash command (the shell's directory and exports persist between calls).

        Args:
            command: the command.
        """
        return await self._exec(command)

    @tool
    async def view(self, path: str, view_range: list[int] | None = None) -> str:
        """Show a file with line numbers, or list a directory.

        Args:
            path: a file or directory (relative to the repository root, or absolute).
            view_range: optional [start, end] line numbers (1-based, end -1 for the last line).
        """
        full = self._in_repo(path)
        try:
            text = await self._read(full)
        except ToolError as exc:
            if "IsADirectoryError" not in str(exc):
                raise
            return await self._exec(f"find {json.dumps(full)} -maxdepth 2 -not -path '*/.*'")
        if view_range is None:
            return numbered(text, 1)
        return view_range_text(text, view_range)

    @tool
    async def create(self, path: str, file_text: str) -> str:
        """Create a new file (or overwrite one).

        Args:
            path: the file.
            file_text: its whole content.
        """
        full = self._in_repo(path)
        try:
            self._history.setdefault(full, []).append(await self._read(full))
        except ToolError:
            self._history.setdefault(full, []).append("")
        await self._write(full, file_text)
        return f"File created: {path}"

    @tool
    async def str_replace(self, path: str, old_str: str, new_str: str = "") -> str:
        """Replace text that occurs exactly once in a file.

        Args:
            path: the file.
            old_str: the exact text to replace (with enough context to be unique).
            new_str: the replacement.
        """
        full = self._in_repo(path)
        text = await self._read(full)
        count = text.count(old_str) if old_str else 0
        if count != 1:
            where = "old_str is empty" if not old_str else f"old_str occurs {count} times"
            raise ToolError(f"{where} in {path}; it must occur exactly once (quote it exactly)")
        new_text = text.replace(old_str, new_str)
        await self._save(full, text, new_text)
        line = text[: text.index(old_str)].count("\n") + 1
        return f"Edited {path}; around the edit:\n" + view_range_text(
            new_text, [max(1, line - 3), line + new_str.count("\n") + 3]
        )

    @tool
    async def insert(self, path: str, insert_line: int, new_str: str) -> str:
        """Insert text after a line (0: at the top).

        Args:
            path: the file.
            insert_line: the line number after which the text goes.
            new_str: the text to insert.
        """
        full = self._in_repo(path)
        text = await self._read(full)
        lines = text.splitlines(keepends=True)
        if not 0 <= insert_line <= len(lines):
            raise ToolError(f"insert_line {insert_line} is outside 0..{len(lines)} for {path}")
        block = new_str if new_str.endswith("\n") else new_str + "\n"
        if lines and not lines[-1].endswith("\n") and insert_line == len(lines):
            block = "\n" + block
        new_text = "".join(lines[:insert_line]) + block + "".join(lines[insert_line:])
        await self._save(full, text, new_text)
        return f"Inserted {block.count(chr(10))} line(s) after line {insert_line} of {path}"

    @tool
    async def undo_edit(self, path: str) -> str:
        """Undo the last edit of a file made with these tools.

        Args:
            path: the file.
        """
        full = self._in_repo(path)
        history = self._history.get(full)
        if not history:
            raise ToolError(f"no edit of {path} to undo")
        await self._write(full, history.pop())
        return f"Last edit of {path} undone"

    @tool
    async def submit(self) -> str:
        """Submit the fix (ends the episode)."""
        self._submitted = True
        self.end_episode()
        return "submitted"

    def _in_repo(self, path: str) -> str:
        return path if path.startswith("/") else f"{self._place.repo_dir}/{path}"

    async def _save(self, full: str, old: str, new: str) -> None:
        await self._write(full, new)
        self._history.setdefault(full, []).append(old)

    async def _graded(
        self, inst: Instance, dest: Path
    ) -> tuple[Path | ImageTree, list[str], tuple[str, ...]]:
        ws = self.session.require()
        if not self._place.in_image:
            return await graded_tree(ws, inst, dest)
        await ws.kill_processes()
        edits, notes = await agent_edits(ws, self._manifest)
        reset = set(patch_paths(inst.test_patch))  # as SWE-bench: test_patch's files from base
        edits = {rel: data for rel, data in edits.items() if rel not in reset}
        before = ((f"{inst.instance_id}: bug patch", inst.bug_patch),)
        after = ((f"{inst.instance_id}: test_patch", inst.test_patch),)
        return ImageTree(inst.image, before, edits, after), notes, tuple(edits)

    async def _read(self, path: str) -> str:
        return await self.session.read_text(path)

    async def _write(self, path: str, content: str) -> None:
        await self.session.write_text(path, content)

    # -- reward ---------------------------------------------------------------------------------
    async def final_reward(self, text: str | None) -> float:
        verdict = await self.grade()
        self._last = {
            "resolved": verdict.resolved,
            "tests_pass_frac": verdict.fraction,
            "grade_reason": verdict.reason,
            "tampered": verdict.tampered,
        }
        return verdict.fraction if self.partial_credit else float(verdict.resolved)

    async def grade(self) -> Verdict:
        """The episode's verdict (see grading.py); sandbox failures raise InfraError."""
        from sandbox import SandboxError
        from sandbox.sessions.api import SessionLimits

        inst = instance_of(self._require_task())
        limits = SessionLimits(exec_timeout_s=self.test_timeout_s, cpu_s=4 * self.test_timeout_s)
        try:
            with tempfile.TemporaryDirectory(prefix="swe-grade-") as tmp:
                tree, notes, changed = await self._graded(inst, Path(tmp) / "r")
                # the episode is over: free its slot before the grading session takes one, so
                # a pool whose every slot holds an episode being graded cannot deadlock
                await self.session.close()
                run = await run_tests(
                    tree,
                    inst,
                    limits,
                    backend=self._backend,
                    timeout_s=self.test_timeout_s,
                    session_options=self._options,
                    changed=changed,
                )
        except SandboxError as exc:
            raise InfraError(f"sandbox failed grading {inst.instance_id!r}: {exc}") from exc
        except PatchError as exc:  # the instance's test_patch does not apply to its start state
            raise InfraError(f"SWE-v0 cannot grade {inst.instance_id!r}: {exc}") from exc
        if run.notes:  # a patch of the instance that did not apply in the image: broken data
            raise InfraError(f"SWE-v0 cannot grade {inst.instance_id!r}: {'; '.join(run.notes)}")
        verdict = judge(run, inst)
        if notes and not verdict.resolved:
            verdict = dataclasses.replace(verdict, reason=f"{verdict.reason} ({'; '.join(notes)})")
        return verdict

    def final_info(self) -> dict[str, Any]:
        return {
            "submitted": self._submitted,
            "resolved": self._last.get("resolved", False),
            "tests_pass_frac": self._last.get("tests_pass_frac", 0.0),
            "grade_reason": self._last.get("grade_reason", "not graded"),
            "tampered": self._last.get("tampered", False),
            "budget_exhausted": self.session.budget_exhausted,
        }

    def _info(self, reward: float, end: str | None) -> dict[str, Any]:
        info = super()._info(reward, end)
        if end is not None:  # per-step means in metrics.jsonl (rollout/env/resolved, ...)
            for key in ("resolved", "tests_pass_frac", "tampered"):
                info["env_metrics"][key] = float(self._last.get(key, 0.0))
            info["env_metrics"]["submitted"] = float(self._submitted)
        return info


def task_row(inst: Instance) -> dict[str, Any]:
    """A task row for the trainer: the instance's fields (JSON-able) plus `id`."""
    return {"id": inst.instance_id, **dataclasses.asdict(inst)}


def instance_of(task: dict[str, Any]) -> Instance:
    fields = {f.name for f in dataclasses.fields(Instance)}
    values = {k: v for k, v in task.items() if k in fields}
    for key in ("fail_to_pass", "pass_to_pass", "test_files"):
        values[key] = tuple(values.get(key, ()))
    return Instance(**values)


def reference_calls(inst: Instance) -> str:
    """The gold patch as str_replace calls, then submit, in one turn (the oracle of the tests)."""
    calls = [
        {"name": "str_replace", "arguments": {"path": path, "old_str": old, "new_str": new}}
        for path, old, new in gold_edits(inst.gold_patch)
    ]
    calls.append({"name": "submit", "arguments": {}})
    return "\n".join(f"<tool_call>\n{json.dumps(c)}\n</tool_call>" for c in calls)
