"""Batching decisions between rollout and learner, as pure functions.

- `tasks_for_step`: which task rows a step uses; a pure function of (step, seed), so a resumed
  run sees exactly the tasks an uninterrupted one would.
- `refill_task_indices`: the tasks a dynamic-sampling round draws: none the step already used.
- `prepare_batch`: groups of trajectories → group advantages → the learner's padded batch. Only
  finished trajectories with a reward are trained on; errors and partial ones are counted, never
  turned into a reward of 0. With `per_turn` (GSPO-token) each model turn gets its own advantage
  from the trajectory's turn rewards (`gspo_agents.advantages.turn_advantages`).
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field

from gspo_agents.advantages import group_advantages, turn_advantages
from gspo_agents.rollout.staleness import stale_token_mask
from gspo_agents.trajectory import FlatBatch, Status, Trajectory, flatten


def tasks_for_step(tasks: list[dict], step: int, tasks_per_step: int, seed: int) -> list[dict]:
    """Epoch-wise shuffled, without replacement inside an epoch; deterministic in (step, seed)."""
    return [tasks[i] for i in task_indices_for_step(len(tasks), step, tasks_per_step, seed)]


def task_indices_for_step(num_tasks: int, step: int, tasks_per_step: int, seed: int) -> list[int]:
    """The indices behind `tasks_for_step`."""
    if not num_tasks:
        raise ValueError(
            "the training split has no tasks; check env.train_split / env.max_train_tasks"
        )
    out: list[int] = []
    position = step * tasks_per_step
    while len(out) < tasks_per_step:
        epoch, offset = divmod(position, num_tasks)
        order = list(range(num_tasks))
        random.Random(seed * 1_000_003 + epoch).shuffle(order)
        take = min(tasks_per_step - len(out), num_tasks - offset)
        out.extend(order[offset : offset + take])
        position += take
    return out


def refill_task_indices(
    num_tasks: int, step: int, round_: int, count: int, seed: int, used: set[int]
) -> list[int]:
    """Up to `count` task indices for refill round `round_` of `step`, none of them in `used` (the
    step's own tasks and earlier rounds'): a refill that redrew a task with no spread would most
    likely get no spread again. Deterministic in (step, round, seed, used), so a resumed run draws
    the same. Fewer than `count` (or none) when the split runs out of unused tasks."""
    order = list(range(num_tasks))
    random.Random(f"refill:{seed}:{step}:{round_}").shuffle(order)
    return [i for i in order if i not in used][:count]


@dataclass(slots=True)
class PreparedBatch:
    batch: FlatBatch | None  # None when no group carries signal this step
    trajectories: list[Trajectory] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)


def prepare_batch(
    groups: list[list[Trajectory]],
    *,
    pad_id: int,
    filter_zero_spread: bool = True,
    per_turn: bool = False,
    turn_discount: float = 1.0,
    normalize_std: bool = True,
    overlong_filter: bool = False,
    overlong_penalty: float = 0.0,
    overlong_buffer: int = 0,
    max_new_tokens_per_turn: int = 0,
    current_version: int = 0,
    max_version_lag: int | None = None,
) -> PreparedBatch:
    """Advantages and the padded batch. A trajectory cut by a length budget (`is_overlong`) has
    `overlong_penalty` subtracted from its reward (and its last turn's reward); with
    `overlong_filter` it is left out of the loss AND of its group's baseline (DAPO's overlong
    filtering: a cut trajectory's reward says nothing about its answer, so it must not move the
    mean that the others are compared with). `overlong_buffer` adds DAPO's soft length penalty
    (`overlong_buffer_penalty`). `max_version_lag`: model tokens made by weights more than that
    many versions older than `current_version` leave the loss mask (stale parts of partial
    rollouts); the rest of their trajectory still trains."""
    trainable = [t for g in groups for t in g if t.trainable]
    statuses = [t.status for g in groups for t in g]
    metrics: dict[str, float] = {
        "num_trajectories": float(len(statuses)),
        "num_error": float(sum(s == Status.ERROR for s in statuses)),
        "num_truncated": float(sum(s == Status.TRUNCATED for s in statuses)),
    }
    if trainable:
        metrics["overlong_frac"] = sum(map(is_overlong, trainable)) / len(trainable)
        # the env's reward, before any overlong penalty or filter
        env_rewards = [float(t.reward) for t in trainable if t.reward is not None]
        metrics["reward_mean"] = sum(env_rewards) / len(env_rewards)
    finished = [t for t in trainable if not (overlong_filter and is_overlong(t))]
    if not finished:
        metrics["num_trained_seqs"] = metrics["num_signal_seqs"] = 0.0
        return PreparedBatch(None, [], metrics)
    penalty = _penalties(finished, overlong_penalty, overlong_buffer, max_new_tokens_per_turn)
    rewards = [float(t.reward) - p for t, p in zip(finished, penalty)]  # type: ignore[arg-type]
    group_ids = [t.group_id for t in finished]
    advantages: list[float] | list[list[float]]
    if per_turn:
        # GSPO-token: returns-to-go of the turn rewards, normalised within the group
        turns = turn_advantages(
            [_penalised(segment_turn_rewards(t), p) for t, p in zip(finished, penalty)],
            group_ids,
            gamma=turn_discount,
            normalize_std=normalize_std,
        )
        # a trajectory without model tokens has nothing to credit (its one entry is its reward)
        advantages = [a if _model_turns(t) else [] for a, t in zip(turns.advantages, finished)]
        zero_spread_B = turns.zero_spread_B
        metrics["zero_spread_frac"] = turns.zero_spread_frac
    else:
        adv = group_advantages(rewards, group_ids, normalize_std=normalize_std)
        advantages, zero_spread_B = adv.advantages_B.tolist(), adv.zero_spread_B
        metrics["zero_spread_frac"] = adv.zero_spread_frac
    keep = [i for i in range(len(finished)) if not (filter_zero_spread and bool(zero_spread_B[i]))]
    metrics["num_trained_seqs"] = float(len(keep))
    # sequences whose advantage is not zero: the ones that move the policy at all
    metrics["num_signal_seqs"] = float(sum(not bool(zero_spread_B[i]) for i in keep))
    if not keep:
        return PreparedBatch(None, [], metrics)
    trajectories = [finished[i] for i in keep]
    batch = flatten(trajectories, [advantages[i] for i in keep], pad_id)  # type: ignore[arg-type]  # one kind per call
    if max_version_lag is not None:
        keep_BT = stale_token_mask(
            batch.versions_BT, batch.loss_mask_BT, current_version, max_version_lag
        )
        stale = float(batch.loss_mask_BT.sum() - keep_BT.sum())
        metrics["stale_token_frac"] = stale / max(float(batch.loss_mask_BT.sum()), 1.0)
        batch = dataclasses.replace(batch, loss_mask_BT=keep_BT.to(batch.loss_mask_BT.dtype))
    return PreparedBatch(batch, trajectories, metrics)


def overlong_buffer_penalty(length: int, max_length: int, buffer: int) -> float:
    """DAPO's soft overlong punishment (Yu et al. 2025, eq. 13): 0 up to max_length - buffer
    tokens, then a linear ramp down to -1 at max_length, -1 beyond. A reward ADDED to the env's."""
    if buffer <= 0:
        return 0.0
    start = max_length - buffer
    if length <= start:
        return 0.0
    return (start - length) / buffer if length <= max_length else -1.0


def _penalties(
    trajectories: list[Trajectory], overlong_penalty: float, buffer: int, max_new_tokens: int
) -> list[float]:
    """What is subtracted from each reward (and its last turn's): the flat penalty of a length-cut
    trajectory plus the soft one of DAPO's buffer. The buffer measures the trajectory's model
    tokens against the budget of its model turns (for one turn exactly DAPO's |y| and L_max)."""
    out = []
    for t in trajectories:
        p = overlong_penalty if is_overlong(t) else 0.0
        if buffer:
            n_model = sum(len(s.token_ids) for s in t.segments if s.kind == "model")
            p -= overlong_buffer_penalty(n_model, max_new_tokens * _model_turns(t), buffer)
        out.append(p)
    return out


def is_overlong(traj: Trajectory) -> bool:
    """Cut by a length budget: its last turn hit max_new_tokens_per_turn, or the context filled."""
    return traj.info.get("last_finish") == "length" or traj.info.get("truncated_by") == "context"


def _penalised(turn_rewards: list[float], penalty: float) -> list[float]:
    return turn_rewards[:-1] + [turn_rewards[-1] - penalty] if penalty else turn_rewards


def has_signal(
    group: list[Trajectory],
    *,
    per_turn: bool = False,
    turn_discount: float = 1.0,
    overlong_penalty: float = 0.0,
    overlong_filter: bool = False,
    overlong_buffer: int = 0,
    max_new_tokens_per_turn: int = 0,
) -> bool:
    """Whether a group's trainable trajectories carry any advantage (dynamic sampling keeps it),
    by the same rules as `prepare_batch`."""
    done = [t for t in group if t.trainable and not (overlong_filter and is_overlong(t))]
    if not done:
        return False
    ids = ["g"] * len(done)
    penalty = _penalties(done, overlong_penalty, overlong_buffer, max_new_tokens_per_turn)
    if per_turn:
        turns = turn_advantages(
            [_penalised(segment_turn_rewards(t), p) for t, p in zip(done, penalty)],
            ids,
            gamma=turn_discount,
        )
        return turns.num_zero_spread_groups == 0
    rewards = [float(t.reward) - p for t, p in zip(done, penalty)]  # type: ignore[arg-type]
    return group_advantages(rewards, ids).num_zero_spread_groups == 0


def segment_turn_rewards(traj: Trajectory) -> list[float]:
    """One reward per model segment, for returns-to-go over the trajectory's model turns.

    The rollout records one turn reward per finished model turn. A turn that produced no tokens
    (its context budget was spent) has no segment; it can only be the last, so its reward is
    folded into the last model turn. A trajectory built without turn rewards gets its episode
    reward on its last model turn (terminal reward only).
    """
    n = _model_turns(traj)
    if n == 0:
        return [float(traj.reward or 0.0)]
    recorded = [float(r) for r in traj.turn_rewards]
    if not recorded:
        return [0.0] * (n - 1) + [float(traj.reward or 0.0)]
    if len(recorded) < n:
        raise ValueError(
            f"trajectory {traj.uid} has {n} model turns but {len(recorded)} turn rewards; the "
            "rollout must record one turn reward per model turn (info['turn_reward'])"
        )
    return recorded[: n - 1] + [sum(recorded[n - 1 :])]


def _model_turns(traj: Trajectory) -> int:
    return sum(1 for s in traj.segments if s.kind == "model")
