"""Batching decisions between rollout and learner, as pure functions.

- `tasks_for_step`: which task rows a step uses; a pure function of (step, seed), so a resumed
  run sees exactly the tasks an uninterrupted one would.
- `prepare_batch`: groups of trajectories → group advantages → the learner's padded batch. Only
  finished trajectories with a reward are trained on; errors and partial ones are counted, never
  turned into a reward of 0. With `per_turn` (GSPO-token) each model turn gets its own advantage
  from the trajectory's turn rewards (`gspo_agents.advantages.turn_advantages`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from gspo_agents.advantages import group_advantages, turn_advantages
from gspo_agents.trajectory import FlatBatch, Status, Trajectory, flatten


def tasks_for_step(tasks: list[dict], step: int, tasks_per_step: int, seed: int) -> list[dict]:
    """Epoch-wise shuffled, without replacement inside an epoch; deterministic in (step, seed)."""
    if not tasks:
        raise ValueError(
            "the training split has no tasks; check env.train_split / env.max_train_tasks"
        )
    out: list[dict] = []
    position = step * tasks_per_step
    while len(out) < tasks_per_step:
        epoch, offset = divmod(position, len(tasks))
        order = list(range(len(tasks)))
        random.Random(seed * 1_000_003 + epoch).shuffle(order)
        take = min(tasks_per_step - len(out), len(tasks) - offset)
        out.extend(tasks[i] for i in order[offset : offset + take])
        position += take
    return out


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
) -> PreparedBatch:
    """Advantages and the padded batch. A trajectory cut by a length budget (`is_overlong`) has
    `overlong_penalty` subtracted from its reward (and its last turn's reward); with
    `overlong_filter` it still counts in its group's baseline but is left out of the loss."""
    finished = [t for g in groups for t in g if t.trainable]
    statuses = [t.status for g in groups for t in g]
    metrics: dict[str, float] = {
        "num_trajectories": float(len(statuses)),
        "num_error": float(sum(s == Status.ERROR for s in statuses)),
        "num_truncated": float(sum(s == Status.TRUNCATED for s in statuses)),
    }
    if not finished:
        metrics["num_trained_seqs"] = metrics["num_signal_seqs"] = 0.0
        return PreparedBatch(None, [], metrics)
    overlong = [is_overlong(t) for t in finished]
    metrics["overlong_frac"] = sum(overlong) / len(finished)
    penalty = [overlong_penalty if o else 0.0 for o in overlong]
    rewards = [float(t.reward) - p for t, p in zip(finished, penalty)]  # type: ignore[arg-type]
    group_ids = [t.group_id for t in finished]
    # the env's reward, before any overlong penalty
    env_rewards = [float(t.reward) for t in finished]  # type: ignore[arg-type]
    metrics["reward_mean"] = sum(env_rewards) / len(env_rewards)
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
    keep = [
        i
        for i in range(len(finished))
        if not (filter_zero_spread and bool(zero_spread_B[i]))
        and not (overlong_filter and overlong[i])
    ]
    metrics["num_trained_seqs"] = float(len(keep))
    # sequences whose advantage is not zero: the ones that move the policy at all
    metrics["num_signal_seqs"] = float(sum(not bool(zero_spread_B[i]) for i in keep))
    if not keep:
        return PreparedBatch(None, [], metrics)
    trajectories = [finished[i] for i in keep]
    batch = flatten(trajectories, [advantages[i] for i in keep], pad_id)  # type: ignore[arg-type]  # one kind per call
    return PreparedBatch(batch, trajectories, metrics)


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
) -> bool:
    """Whether a group's trainable trajectories carry any advantage (dynamic sampling keeps it)."""
    done = [t for t in group if t.trainable]
    if not done:
        return False
    ids = ["g"] * len(done)
    penalty = [overlong_penalty if is_overlong(t) else 0.0 for t in done]
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
