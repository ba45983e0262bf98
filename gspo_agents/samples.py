"""What the policy wrote: some trajectories of a step saved as JSONL, and a reader for people.

TRL and verl users read their completions; this is ours. Every `logger.samples_every_steps`
steps, at the last step and at every step that trained nothing, `logger.samples_per_step`
trajectories of the step, one per group first,
go to `RUN_DIR/samples/step<N>.jsonl`: the rendered prompt, each model turn and env observation
as text (tool calls and tool results included, special tokens kept), the reward, the turn
rewards, the status and the env's per-turn info. `python -m gspo_agents.eval eval.save_samples=true`
writes every eval trajectory the same way, beside its report.

    python -m gspo_agents.samples RUN_DIR             # the latest saved step
    python -m gspo_agents.samples RUN_DIR --step 20   # one step; --prompt shows whole prompts
    python -m gspo_agents.samples runs/eval/x.samples.jsonl

This module reads trajectories and a tokenizer; it knows nothing of engines or the learner.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gspo_agents.trajectory import Trajectory

SAMPLES_DIR = "samples"


def pick(groups: list[list[Trajectory]], n: int) -> list[Trajectory]:
    """Up to `n` trajectories: the first of each group, then the second of each, ..."""
    out: list[Trajectory] = []
    for rank in range(max((len(g) for g in groups), default=0)):
        out.extend(g[rank] for g in groups if rank < len(g))
    return out[:n]


def record(traj: Trajectory, tokenizer, step: int | None = None) -> dict[str, Any]:
    """One trajectory as text, as the engine saw it (special tokens kept)."""

    def text(ids: list[int]) -> str:
        return tokenizer.decode(ids, skip_special_tokens=False)

    return {
        "step": step,
        "task_id": traj.task_id,
        "group_id": traj.group_id,
        "status": traj.status.value,
        "reward": traj.reward,
        "turn_rewards": list(traj.turn_rewards),
        "error": traj.error,
        "prompt": text(traj.prompt_ids),
        "turns": [{"role": s.kind, "text": text(s.token_ids)} for s in traj.segments],
        "info": {k: v for k, v in traj.info.items() if k != "traceback"},
    }


def write(path: Path, records: Iterable[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for rec in records:
            f.write(json.dumps(rec, default=str) + "\n")
    return path


def save_step(run_dir: Path, step: int, groups, tokenizer, n: int) -> Path | None:
    """`n` trajectories of `step` (one per group first) in RUN_DIR/samples/step<step>.jsonl."""
    if not n:
        return None
    picked = pick(groups, n)
    path = run_dir / SAMPLES_DIR / f"step{step}.jsonl"
    return write(path, (record(t, tokenizer, step) for t in picked))


# -- reading ----------------------------------------------------------------------------------
def samples_file(path: Path, step: int | None) -> Path:
    """The JSONL to show: `path` itself, or a run dir's step (default: the latest saved)."""
    if path.is_file():
        return path
    saved = sorted(
        (path / SAMPLES_DIR).glob("step*.jsonl"), key=lambda p: int(re.sub(r"\D", "", p.stem))
    )
    if not saved:
        raise SystemExit(
            f"error: no samples in {path / SAMPLES_DIR} (they are saved every "
            "logger.samples_every_steps steps; 0 turns them off)"
        )
    if step is None:
        return saved[-1]
    chosen = path / SAMPLES_DIR / f"step{step}.jsonl"
    if not chosen.is_file():
        steps = ", ".join(p.stem.removeprefix("step") for p in saved)
        raise SystemExit(f"error: no samples of step {step} in {path}; saved steps: {steps}")
    return chosen


def show(rec: dict[str, Any], whole_prompt: bool = False) -> str:
    head = (
        f"── step {rec.get('step')} · task {rec['task_id']} · {rec['status']} · reward "
        f"{rec['reward']} · turn rewards {rec['turn_rewards']}"
    )
    prompt = rec["prompt"] if whole_prompt else _last_turn(rec["prompt"])
    lines = [head, f"[prompt{'' if whole_prompt else ', last message'}]", prompt.rstrip()]
    for turn in rec["turns"]:
        lines += [f"[{turn['role']}]", turn["text"].rstrip()]
    if rec.get("error"):
        lines += [f"[error] {rec['error']}"]
    info = {k: v for k, v in rec.get("info", {}).items() if k != "turn_infos"}
    lines += [f"[info] {json.dumps(info, default=str)}"]
    for i, turn_info in enumerate(rec.get("info", {}).get("turn_infos", []), 1):
        lines += [f"[turn {i} info] {json.dumps(turn_info, default=str)}"]
    return "\n".join(lines) + "\n"


def _last_turn(prompt: str) -> str:
    """The rendered prompt from its last `<|im_start|>` on (the tool schemas and system turn of a
    long prompt are seldom what one reads samples for)."""
    at = prompt.rfind("<|im_start|>", 0, max(prompt.rfind("<|im_start|>"), 0))
    return prompt[at:] if at > 0 else prompt


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m gspo_agents.samples", description=__doc__)
    parser.add_argument("path", type=Path, help="a run dir, or a samples .jsonl file")
    parser.add_argument("--step", type=int, default=None, help="default: the latest saved step")
    parser.add_argument("--prompt", action="store_true", help="show whole rendered prompts")
    args = parser.parse_args(argv)
    path = samples_file(args.path, args.step)
    try:
        print(f"{path}\n")
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                print(show(json.loads(line), args.prompt))
        sys.stdout.flush()
    except BrokenPipeError:  # `| head`: the reader stopped reading, which is fine
        sys.stderr.close()


if __name__ == "__main__":
    main()


def save_if_due(cfg, run_dir, step: int, groups, tokenizer, force: bool) -> None:
    """Some of a training step's trajectories as text when `logger.samples_every_steps` says so,
    at the last step, and on every step that trained nothing (`force`: to see why)."""
    log = cfg.logger
    due = log.samples_every_steps and step % log.samples_every_steps == 0
    if force or step == cfg.trainer.steps or due:
        save_step(run_dir, step, groups, tokenizer, log.samples_per_step)
