"""The rollout manager: multi-turn, partial and asynchronous trajectory collection.

What it does
- `collect(tasks)`: G trajectories per task, each a multi-turn loop
  generate -> env.astep(text) -> append observation ids -> generate ..., with a turn budget and a
  context budget that shrinks `max_new_tokens` as the context fills. At most
  `max_live_trajectories` run at once; each has a whole-trajectory deadline.
- `update_weights(path, version)`: closes the manager's gate, pauses the engine in its
  `pause_mode` (`engine.pause_mode`, SGLang's /pause_generation modes), loads the weights,
  resumes. "abort": in-flight generations come back with finish_reason 'abort' and the tokens
  made so far, and continue from prompt + tokens so far under the new weights (a new request).
  "in_place" / "retract": the engine keeps them, paused, through the load; they finish as one
  request whose answer lists per-token versions. Either way every token carries the version
  that produced it (before the update k, after it k+1).
- Staleness: a trajectory whose oldest token is more than `max_staleness_steps` versions old is
  dropped and counted (`rollout/dropped_stale`). If it is still running it restarts from its prompt
  under the current weights (at most `_MAX_STALE_RESTARTS` times), so its group stays whole:
  checked before every generation and after one that crossed an update.
- Async mode: `start_prefetch(tasks)` collects the next batch in the background while the learner
  trains; `next_batch()` returns it, filtered for staleness at the moment it is consumed. The
  learner must train off the event loop (`asyncio.to_thread`) for the two to overlap:

      manager.start_prefetch(tasks_of(0))
      for step in range(steps):
          result = await manager.next_batch()
          manager.start_prefetch(tasks_of(step + 1))        # generation of step k+1 ...
          await asyncio.to_thread(learner.update, batch_of(result))   # ... overlaps training of k
          await manager.update_weights(export(), version=step + 1)   # k+1 resumes on new weights

Failures are a trajectory status, not an exception: an environment error (InfraError or any
exception from astep), an engine failure that outlasts the retries, or the deadline mark the
trajectory `error` with a message and count it in the metrics; it is never given a reward of 0.
Bugs (bad configuration, chat-template problems) propagate.

It knows nothing of HTTP or of the learner: it talks to an `Engine` and to `TextEnv`s. Its
config and result records live in records.py, the pieces of an episode outside the loop (how a
trajectory ends, request ids, task helpers) in episode.py.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

from envs.base import TextEnv
from envs.errors import InfraError
from gspo_agents.rollout.chat import ChatFormat
from gspo_agents.rollout.engine import (
    Engine,
    EngineError,
    EngineRequestError,
    Generation,
    SamplingParams,
    TokenHistory,
)
from gspo_agents.rollout.episode import (
    Stale,
    TrajectoryFailed,
    abort_quietly,
    check_messages,
    checked_step,
    close_env,
    mark_error,
    note_cause,
    oldest_version,
    request_id,
    reset_env,
    run_all,
    tool_schemas,
    truncate,
)
from gspo_agents.rollout.metrics import RolloutStats, stats_metrics, trajectory_metrics
from gspo_agents.rollout.records import RolloutConfig, RolloutResult
from gspo_agents.rollout.shared_engine import note_update_begin, note_update_end
from gspo_agents.rollout.staleness import drop_stale, is_stale, max_prefetch_depth
from gspo_agents.trajectory import Status, Trajectory

__all__ = ["RolloutConfig", "RolloutManager", "RolloutResult"]

log = logging.getLogger(__name__)

_MAX_STALE_RESTARTS = 2  # a trajectory overtaken by this many extra updates is dropped for good
_ENGINE_ATTEMPTS = 4  # one call plus retries of a retryable EngineError (another worker may serve)
_ENGINE_BACKOFF_S = (0.2, 0.5, 1.0)
_MAX_UNEXPLAINED_ABORTS = 3  # aborts with no weight update behind them before we give up


class RolloutManager:
    def __init__(
        self,
        engine: Engine,
        env_factory: Callable[[], TextEnv],
        tokenizer: Any,
        cfg: RolloutConfig,
    ) -> None:
        self.engine = engine
        self.env_factory = env_factory
        self.cfg = cfg
        self.chat = ChatFormat(tokenizer)
        self._version = int(engine.weight_version)
        self._updates = 0  # successful weight updates, to tell a pause's abort from a stray one
        self._update_dropped = 0  # workers the last weight update failed on (engines with several)
        self._gate = asyncio.Event()  # set = generations may start; cleared during a weight update
        self._gate.set()
        self._update_lock = asyncio.Lock()
        self._live = asyncio.Semaphore(cfg.max_live_trajectories)
        self._prefetch: collections.deque[asyncio.Task[RolloutResult]] = collections.deque()
        if cfg.past_reasoning != "keep":
            log.warning(
                "rollout.past_reasoning=%s has no effect on an env's episodes: their ids are "
                "appended, never re-rendered (it applies to the OpenAI endpoint's agents)",
                cfg.past_reasoning,
            )
        if not self._sampling(1).full_support:
            log.warning(
                "rollout top_p=%s top_k=%s: the engine's log-probs are of the full distribution "
                "but tokens come from a truncated one, so the importance ratio is biased",
                cfg.top_p,
                cfg.top_k,
            )

    @property
    def weight_version(self) -> int:
        return self._version

    # -- public API -----------------------------------------------------------------------------
    async def collect(self, tasks: list[dict]) -> RolloutResult:
        """G trajectories per task, grouped by task, filtered for staleness now."""
        return self._finish(await self._collect_raw(tasks))

    async def sync_start_weights(self, path: str, version: int) -> None:
        """Before the first step: the engine runs the learner's starting weights `path` at
        `version` (0, or the resumed step). An engine that can tell what its workers run
        (SGLangEngine.sync_start_weights) pushes them only where they differ; any other is
        given them when resuming, as it was built from the starting model."""
        sync = getattr(self.engine, "sync_start_weights", None)
        if sync is None:
            if version:
                await self.update_weights(path, version)
            return
        await sync(path, version)
        self._version = version

    async def update_weights(self, path: str, version: int) -> None:
        """Pause (engine.pause_mode) -> load -> resume. In-flight turns keep their tokens and
        continue afterwards."""
        async with self._update_lock:
            if version <= self._version:
                raise ValueError(
                    f"weight version must grow: got {version}, current {self._version}; "
                    "pass the learner's step count after the update"
                )
            self._gate.clear()
            try:
                # in_place / retract keep in-flight requests; the engine then asks for no cache
                # flush that SGLang 0.5.23 would refuse while they run (sglang_wire.flush_allowed).
                await self.engine.pause(self.engine.pause_mode)
                await self.engine.update_weights(path, version)
                self._version = version
                self._updates += 1
                # An engine with several workers goes on without the ones that failed (it logs
                # them); the count goes into the metrics of the batches collected after.
                self._update_dropped = len(getattr(self.engine, "last_update_dropped", None) or {})
            finally:
                try:
                    # Resume even after a failed pause or load: a paused engine would hang every
                    # later generation. Shielded so a cancel cannot leave the engine paused.
                    await asyncio.shield(self.engine.resume())
                finally:
                    self._gate.set()

    async def follow_weights(self, version: int) -> None:
        """Another process loaded `version` into the engine this manager shares (rank 0 of a run
        whose ranks all drive): later requests sample under it, and generations that its pause
        aborted count as explained. A version not newer than the current one is ignored."""
        async with self._update_lock:
            note_update_end(self.engine, version)
            if version > self._version:
                self._version = version
                self._updates += 1

    def follow_update_begin(self) -> None:
        """Another process is about to update the shared engine (see follow_weights)."""
        note_update_begin(self.engine)

    def start_prefetch(self, tasks: list[dict]) -> None:
        """Begin collecting a batch in the background; `next_batch()` returns it.

        At most `max_prefetch_depth(max_staleness_steps)` batches may be pending: deeper
        prefetching would only produce trajectories that are dropped as stale.
        """
        depth = max_prefetch_depth(self.cfg.max_staleness_steps)
        if len(self._prefetch) >= depth:
            raise RuntimeError(
                f"{len(self._prefetch)} batch(es) already prefetched, the most that "
                f"max_staleness_steps={self.cfg.max_staleness_steps} allows; call next_batch() first"
            )
        self._prefetch.append(asyncio.create_task(self._collect_raw(list(tasks))))

    async def next_batch(self) -> RolloutResult:
        """The oldest prefetched batch, filtered for staleness against the current weights."""
        if not self._prefetch:
            raise RuntimeError("no batch is being prefetched; call start_prefetch(tasks) first")
        task = self._prefetch.popleft()
        return self._finish(await task)

    async def aclose(self) -> None:
        """Cancel pending prefetches and wait for them to wind down."""
        pending = list(self._prefetch)
        self._prefetch.clear()
        for task in pending:
            task.cancel()
        for task in pending:
            try:
                await task
            except asyncio.CancelledError:
                if not task.cancelled():  # we were cancelled ourselves, not just the prefetch
                    raise
            except Exception:  # noqa: BLE001 - a failed prefetch nobody will consume
                log.exception("a prefetched rollout batch failed")

    async def __aenter__(self) -> RolloutManager:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- batch ----------------------------------------------------------------------------------
    async def _collect_raw(self, tasks: list[dict]) -> RolloutResult:
        if not tasks:
            raise ValueError("collect() needs at least one task row")
        if not all(isinstance(t, dict) for t in tasks):
            bad = next(type(t).__name__ for t in tasks if not isinstance(t, dict))
            raise TypeError(f"task rows must be dicts (from env.load_tasks), got a {bad}")
        stats = RolloutStats()
        G = self.cfg.num_samples_per_task
        group_ids = [uuid.uuid4().hex for _ in tasks]
        results = await run_all(
            self._run_trajectory(task, gid, stats, sample)
            for task, gid in zip(tasks, group_ids, strict=True)
            for sample in range(G)
        )
        groups = [
            [t for t in results[i * G : (i + 1) * G] if t is not None] for i in range(len(tasks))
        ]
        return RolloutResult(groups, stats_metrics(stats))

    def _finish(self, raw: RolloutResult) -> RolloutResult:
        report = drop_stale(raw.groups, self._version, self.cfg.max_staleness_steps)
        metrics = dict(raw.metrics)
        metrics["rollout/dropped_stale"] = (
            metrics.get("rollout/dropped_stale", 0.0) + report.dropped
        )
        metrics["rollout/staleness_max"] = float(report.max_kept_staleness)
        metrics["rollout/staleness_mean"] = report.mean_kept_staleness
        metrics["rollout/weight_version"] = float(self._version)
        metrics["rollout/update_dropped_workers"] = float(self._update_dropped)
        metrics.update(trajectory_metrics(report.groups))
        return RolloutResult(report.groups, metrics)

    # -- one trajectory -------------------------------------------------------------------------
    async def _run_trajectory(
        self, task: dict, group_id: str, stats: RolloutStats, sample: int = 0
    ) -> Trajectory | None:
        """One sample of `task`; None when it was dropped as stale too often."""
        async with self._live:
            for _ in range(_MAX_STALE_RESTARTS + 1):
                traj = await self._attempt(task, group_id, stats, sample)
                if traj is not None:
                    return traj
                stats.dropped_stale += 1
            return None

    async def _attempt(
        self, task: dict, group_id: str, stats: RolloutStats, sample: int = 0
    ) -> Trajectory | None:
        env = self.env_factory()
        try:
            task_id = str(task.get("id", ""))
            try:
                messages, _ = await reset_env(env, task)
                check_messages(messages, f"{type(env).__name__}.reset (initial_messages)")
            except InfraError as exc:  # e.g. a sandbox the episode needs did not start
                traj = Trajectory([], task_id=task_id, group_id=group_id)
                mark_error(traj, "env_infra", f"InfraError in reset: {exc}", stats)
                return traj
            except (
                Exception
            ) as exc:  # the env's own bug: reported on the trajectory, with its trace
                traj = Trajectory([], task_id=task_id, group_id=group_id)
                mark_error(traj, "env_exception", f"{type(exc).__name__} in reset: {exc}", stats)
                note_cause(traj, exc)
                return traj
            prompt_ids = self.chat.prompt_ids(messages, tools=tool_schemas(env))
            traj = Trajectory(prompt_ids, task_id=task_id, group_id=group_id)
            traj.info["sample"] = sample
            try:
                await asyncio.wait_for(
                    self._episode(env, traj, stats), self.cfg.trajectory_timeout_s
                )
            except Stale:
                stats.restarted_stale += 1
                return None
            except TrajectoryFailed as exc:
                mark_error(traj, exc.kind, str(exc), stats)
                note_cause(traj, exc.__cause__)
            except asyncio.TimeoutError:
                msg = f"trajectory deadline of {self.cfg.trajectory_timeout_s} s exceeded"
                mark_error(traj, "timeout", msg, stats)
            return traj
        finally:
            await close_env(env)

    async def _episode(self, env: TextEnv, traj: Trajectory, stats: RolloutStats) -> None:
        """One episode: model turn -> env.astep -> observation ids -> model turn ...

        Produces the trajectory's segments, reward and status in place. Waits on the engine (a
        turn) and on the env (a step); ends when the env terminates or truncates, or when the
        turn or context budget is spent. Expected failures leave as TrajectoryFailed, a stale
        trajectory as Stale; the caller's deadline cancels it."""
        max_turns = self.cfg.max_turns or env.max_turns
        if len(traj.prompt_ids) >= self.cfg.max_context_tokens:
            # Nothing to generate and nothing to score: counted, never trained on (no reward).
            return truncate(traj, "prompt", stats)
        # The ids sent each turn, grown in step with the trajectory (never rebuilt: O(new ids)).
        history = TokenHistory(traj.prompt_ids)
        while True:
            turn_ids, finish = await self._model_turn(traj, history, stats)
            traj.close_turn()
            traj.num_turns += 1
            stats.turns += 1
            stats.length_turns += finish == "length"
            traj.info["last_finish"] = finish  # "length": cut by the turn's token budget
            obs, reward, terminated, truncated, info = await self._env_step(
                env, self.chat.action_text(turn_ids), stats
            )
            traj.reward = float(reward)
            # each turn's info, for the saved samples (gspo_agents/samples.py)
            traj.info.setdefault("turn_infos", []).append(
                {k: v for k, v in info.items() if k != "env_metrics"}
            )
            if isinstance(info.get("env_metrics"), dict):  # the env's per-episode counters
                traj.info["env_metrics"] = info["env_metrics"]
            traj.turn_rewards.append(float(info.get("turn_reward", reward)))
            if info.get("verify_error"):  # scored (0) and kept, but counted and shown
                stats.verify_errors += 1
                traj.info["verify_error"] = str(info["verify_error"])
            if terminated:
                traj.status = Status.COMPLETE
                return
            if truncated or traj.num_turns >= max_turns:
                return truncate(traj, "turns", stats)
            if not obs:
                raise TrajectoryFailed(
                    "env_exception", "env.step returned no messages but did not end the episode"
                )
            obs_ids = self.chat.observation_ids(obs, turn_ids)
            # Room for the observation and at least one more model token, or the episode ends.
            if traj.num_tokens + len(obs_ids) >= self.cfg.max_context_tokens:
                return truncate(traj, "context", stats)
            traj.append_env(obs_ids)
            history.extend(obs_ids)

    async def _model_turn(
        self, traj: Trajectory, history: TokenHistory, stats: RolloutStats
    ) -> tuple[list[int], str]:
        """Generate one model turn, returning its ids and finish reason.

        Waits on the gate (closed by update_weights, reopened when it finishes) and on
        engine.generate (unblocked by the answer, or by an abort from a pause). An aborted
        generation keeps its tokens and continues, after the update, from prompt + tokens so far
        with the rest of the turn's budget; one an in_place / retract pause kept answers once,
        with per-token versions."""
        first_segment = len(traj.segments)
        produced = 0
        unexplained_aborts = 0
        while True:
            budget = min(
                self.cfg.max_new_tokens_per_turn - produced,
                self.cfg.max_context_tokens - traj.num_tokens,
            )
            if budget < 1:
                finish = "length"
                break
            if not self._gate.is_set():
                await self._gate.wait()
            if is_stale(oldest_version(traj), self._version, self.cfg.max_staleness_steps):
                raise Stale
            updates_before, version_before = self._updates, self._version
            assert len(history) == traj.num_tokens  # the ids sent are the trajectory's
            gen = await self._generate(traj, history, self._sampling(budget, traj), stats)
            if gen.token_ids and gen.weight_version < version_before:
                # Every worker should have loaded `version_before` before this request started;
                # one that did not breaks the per-token version record. Count it, loudly.
                stats.behind_version_generations += 1
                traj.info["behind_version"] = True  # versions no longer grow along it
                log.warning(
                    "engine answered with weight version %d after version %d was loaded",
                    gen.weight_version,
                    version_before,
                )
            traj.append_model(gen.token_ids, gen.logprobs, gen.weight_version, gen.token_versions)
            history.extend(gen.token_ids)
            traj.append_routes(gen.routed_experts)
            produced += len(gen.token_ids)
            if gen.finish_reason != "abort":
                finish = gen.finish_reason
                if self._updates != updates_before and is_stale(
                    oldest_version(traj), self._version, self.cfg.max_staleness_steps
                ):
                    # An in_place / retract pause kept it through the update: restart it now,
                    # as an aborted one would be, rather than finish it only to drop it.
                    raise Stale
                break
            stats.aborted_generations += 1
            await self._gate.wait()
            unexplained_aborts = 0 if self._updates != updates_before else unexplained_aborts + 1
            if unexplained_aborts > _MAX_UNEXPLAINED_ABORTS:
                raise TrajectoryFailed(
                    "engine",
                    f"engine aborted the request {unexplained_aborts} times without a weight update",
                )
        turn_ids = traj.segments[-1].token_ids if len(traj.segments) > first_segment else []
        return turn_ids, finish

    def _sampling(self, max_new_tokens: int, traj: Trajectory | None = None) -> SamplingParams:
        c = self.cfg
        seed = None
        if c.seed is not None and traj is not None:
            # A function of what is being sampled, not of when it reaches the engine: the same
            # run samples the same tokens whatever the batching, the timing or the worker.
            key = f"{c.seed}|{self._version}|{traj.task_id}|{traj.info.get('sample', 0)}|{traj.num_tokens}"
            seed = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=7).digest(), "big")
        return SamplingParams(
            max_new_tokens, c.temperature, c.top_p, c.top_k, self.chat.stop_token_ids, seed
        )

    async def _generate(
        self,
        traj: Trajectory,
        input_ids: TokenHistory,
        sampling: SamplingParams,
        stats: RolloutStats,
    ) -> Generation:
        """One engine call with bounded retries of retryable engine errors."""
        last: EngineError | None = None
        for attempt in range(_ENGINE_ATTEMPTS):
            if attempt:
                stats.engine_retries += 1
                await asyncio.sleep(_ENGINE_BACKOFF_S[min(attempt, len(_ENGINE_BACKOFF_S)) - 1])
                if not self._gate.is_set():
                    await self._gate.wait()
            rid = request_id(traj)
            started = time.perf_counter()
            try:
                return await self.engine.generate(
                    input_ids, sampling, rid, route_key=traj.uid, **self._routes_asked(traj)
                )
            except EngineRequestError as exc:
                raise TrajectoryFailed("engine", f"engine rejected the request: {exc}") from exc
            except EngineError as exc:
                last = exc
            except asyncio.CancelledError:
                await abort_quietly(self.engine, rid)
                raise
            finally:
                stats.engine_calls += 1
                stats.engine_s += time.perf_counter() - started
        raise TrajectoryFailed(
            "engine", f"engine failed {_ENGINE_ATTEMPTS} times: {type(last).__name__}: {last}"
        ) from last

    def _routes_asked(self, traj: Trajectory) -> dict:
        """An engine that returns MoE routes is asked for the positions the trajectory lacks."""
        if not getattr(self.engine, "returns_routed_experts", False):
            return {}
        return {"routed_experts_start_len": traj.num_routed_positions}

    async def _env_step(self, env: TextEnv, action: str, stats: RolloutStats):
        started = time.perf_counter()
        try:
            result = checked_step(await env.astep(action))
            check_messages(result[0], f"{type(env).__name__}.step")
            return result
        except InfraError as exc:
            raise TrajectoryFailed("env_infra", f"InfraError: {exc}") from exc
        except Exception as exc:  # an env that raises is reported, never scored
            raise TrajectoryFailed("env_exception", f"{type(exc).__name__}: {exc}") from exc
        finally:
            stats.env_steps += 1
            stats.env_s += time.perf_counter() - started
