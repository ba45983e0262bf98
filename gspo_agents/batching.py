"""Batching decisions between rollout and learner, as pure functions.

- `tasks_for_step`: which task rows a step uses; a pure function of (step, seed), so a resumed
  run sees exactly the tasks an uninterrupted one would.
- `prepare_batch`: groups of trajectories → group advantages → the learner's padded batch. Only
  finished trajectories with a reward are trained on; errors and partial ones are counted, never
  turned into a reward of 0.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from gspo_agents.objectives import group_advantages
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
) -> PreparedBatch:
    finished = [t for g in groups for t in g if t.trainable]
    statuses = [t.status for g in groups for t in g]
    metrics: dict[str, float] = {
        "num_trajectories": float(len(statuses)),
        "num_error": float(sum(s == Status.ERROR for s in statuses)),
        "num_truncated": float(sum(s == Status.TRUNCATED for s in statuses)),
    }
    if not finished:
        metrics["num_trained_seqs"] = 0.0
        return PreparedBatch(None, [], metrics)
    rewards = [float(t.reward) for t in finished]  # type: ignore[arg-type]
    adv = group_advantages(rewards, [t.group_id for t in finished])
    metrics["reward_mean"] = sum(rewards) / len(rewards)
    metrics["zero_spread_frac"] = adv.zero_spread_frac
    keep = [
        i for i in range(len(finished)) if not (filter_zero_spread and bool(adv.zero_spread_B[i]))
    ]
    metrics["num_trained_seqs"] = float(len(keep))
    if not keep:
        return PreparedBatch(None, [], metrics)
    trajectories = [finished[i] for i in keep]
    seq_advantages = [float(adv.advantages_B[i]) for i in keep]
    advantages: list[float] | list[list[float]] = seq_advantages
    if per_turn:
        # Per-turn advantages for GSPO-token: the sequence advantage on every model turn; an env
        # that exposes per-turn rewards can refine this without touching the objective.
        advantages = [[a] * _model_turns(t) for a, t in zip(seq_advantages, trajectories)]
    batch = flatten(trajectories, advantages, pad_id)
    return PreparedBatch(batch, trajectories, metrics)


def _model_turns(traj: Trajectory) -> int:
    return sum(1 for s in traj.segments if s.kind == "model")
