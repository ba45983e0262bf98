"""F7.2: malformed model output reaching the environments.

Empty, enormous, invalid UTF-8 (replacement characters and lone surrogates), NUL bytes, special
and chat-control tokens inside code, code in the wrong language, thousands of code blocks, an
unclosed or absurdly nested \\boxed{}, a program that prints gigabytes and one that never ends:
each goes through the real `astep` of every shipped env (arithmetic, math with math-verify,
mathtool and codeforces on the real Docker sandbox) and must come back as a verdict and a finite
reward in [0, 1], never an exception. Then a whole training step: the manager collects
Codeforces trajectories whose model turns are such outputs (a scripted engine emits them as
tokens, with the tiny model's own log-probs), and the real learner trains on the batch.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest
from hd_util import need

import envs
from envs.errors import InfraError
from gspo_agents.batching import prepare_batch
from gspo_agents.learner import Learner, LearnerConfig
from gspo_agents.logprobs import token_logprobs
from gspo_agents.models import ModelConfig, load_model, load_tokenizer, resolve_model
from gspo_agents.rollout.engine import Generation, SamplingParams
from gspo_agents.rollout.manager import RolloutConfig, RolloutManager
from gspo_agents.trajectory import Status
from sandbox import Sandbox, SandboxUnavailable

FLOOD = "```python\nimport sys\nb = 'x' * (1 << 20)\nwhile True:\n    sys.stdout.write(b)\n```"
BAD_OUTPUTS: dict[str, str] = {
    "empty": "",
    "whitespace": " \n\t\r\n ",
    "enormous_text": "blah " * (2 << 20),  # 10 MB
    "enormous_boxed": "\\boxed{" + "9" * (1 << 20) + "}",
    "unclosed_boxed": "the answer is \\boxed{12",
    "nested_boxed": "\\boxed{" * 2000 + "1" + "}" * 2000,
    "replacement_chars": "\ufffd\ufffd \\boxed{\ufffd}\n```python\nprint('\ufffd')\n```",
    "lone_surrogates": "\udcff\ud800 \\boxed{\udcff}\n```python\nprint('\udcff')\n```",
    "nul_bytes": "\x00\\boxed{1\x00}\x00\n```python\nprint(1)\x00\n```",
    "chat_control_tokens": (
        "```python\nprint('<|im_end|>\\n<|im_start|>user\\nhi')\n```<|im_end|><|endoftext|>"
    ),
    "wrong_language": '```rust\nfn main() { println!("1"); }\n```',
    "unterminated_block": "```python\nprint(1)\n",
    "many_blocks": "```python\nprint(1)\n```\n" * 5000,
    "prints_gigabytes": FLOOD,
    "never_ends": "```python\nwhile True:\n    pass\n```",
}
# With code (judged or run): the sandbox backs these envs.
SANDBOX_ENVS = ("mathtool", "codeforces")
VERDICT_KEYS = ("verdict", "tool_verdict", "format_ok", "reason")


def _docker() -> Sandbox:
    try:
        return Sandbox.create("docker", max_concurrency=2)
    except SandboxUnavailable as exc:
        need(False, f"docker sandbox unavailable: {exc}")
        raise


def _make(name: str, sandbox: Sandbox | None):
    if name == "arithmetic":
        return envs.make(name, difficulty=1)
    if name == "math":
        return envs.make(name)
    if name == "mathtool":
        return envs.make(name, sandbox=sandbox, code_time_s=1.0, max_turns=2)
    return envs.make(name, sandbox=sandbox)


def _check(name: str, label: str, out: Any) -> str | None:
    """None when `out` is a proper step result with a verdict and a reward; else why not."""
    if not (isinstance(out, tuple) and len(out) == 5):
        return f"{label}: not a 5-tuple: {type(out).__name__}"
    messages, reward, terminated, truncated, info = out
    if not (isinstance(reward, float) and math.isfinite(reward) and 0.0 <= reward <= 1.0):
        return f"{label}: reward {reward!r}"
    if not any(k in info for k in VERDICT_KEYS):
        return f"{label}: no verdict in info {sorted(info)}"
    if not (terminated or truncated or messages):
        return f"{label}: neither ended nor gave an observation"
    for m in messages:
        if not isinstance(m.get("content"), str) or len(m["content"]) > 20_000:
            return f"{label}: observation {str(m)[:200]!r} (unbounded or not text)"
    return None


@pytest.mark.parametrize("name", ["arithmetic", "math", *SANDBOX_ENVS])
async def test_every_env_gives_a_verdict_and_a_reward(name):
    sandbox = _docker() if name in SANDBOX_ENVS else None
    env = _make(name, sandbox)
    task = env.load_tasks("train")[0]
    problems = []
    try:
        for label, output in BAD_OUTPUTS.items():
            env.reset(options={"task": task})
            try:
                out = await asyncio.wait_for(env.astep(output), 120)
            except InfraError as exc:  # allowed only for real infrastructure trouble
                problems.append(f"{label}: InfraError {exc}")
                continue
            except Exception as exc:  # noqa: BLE001 - the point: list every crash
                problems.append(f"{label}: {type(exc).__name__}: {str(exc)[:300]}")
                continue
            if (why := _check(name, label, out)) is not None:
                problems.append(why)
        assert not problems, f"{name}:\n" + "\n".join(problems)
    finally:
        if hasattr(env, "aclose"):
            await env.aclose()
        env.close()
        if sandbox is not None:
            await sandbox.aclose()


# --------------------------------------------------------------------------------------------
# a training step through the manager
# --------------------------------------------------------------------------------------------
class ScriptedEngine:
    """Emits prepared model turns as tokens, with the real tiny model's log-probs of them.

    Stands in for sampling only (a random tiny model rarely writes these by chance); the
    manager, envs, sandbox and learner downstream are the real ones.
    """

    def __init__(self, model_dir: str, turns: list[list[int]]) -> None:
        self._model = load_model(model_dir)
        self._turns = turns
        self._next = 0
        self.weight_version = 0
        self.pause_mode = "abort"

    async def generate(
        self, input_ids, sampling: SamplingParams, request_id: str, *, route_key=None
    ) -> Generation:
        import torch

        tokens = self._turns[self._next % len(self._turns)][: sampling.max_new_tokens]
        self._next += 1
        ids = torch.tensor([list(input_ids) + tokens])
        with torch.no_grad():
            lp = token_logprobs(self._model(input_ids=ids).logits, ids, sampling.temperature)
        logprobs = lp[0, len(input_ids) :].tolist()
        return Generation(tokens, logprobs, "stop", self.weight_version)

    async def abort(self, request_id=None) -> None:
        return None

    async def pause(self, mode: str = "abort") -> None:
        return None

    async def resume(self) -> None:
        return None

    async def update_weights(self, path: str, version: int) -> None:
        self.weight_version = version

    async def health(self) -> bool:
        return True

    async def close(self) -> None:
        return None


def _turn_tokens(tok, env, task) -> list[list[int]]:
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    start = tok.convert_tokens_to_ids("<|im_start|>")
    enc = lambda s: tok.encode(s, add_special_tokens=False)  # noqa: E731
    lone_byte = tok.convert_tokens_to_ids("Ã")  # the first byte of a 2-byte UTF-8 character
    code = "```python\na, b = map(int, input().split())\n"
    return [
        enc(env.reference_response(task)) + [eos],  # right: reward 1, the group has a spread
        [eos],  # empty
        [lone_byte, lone_byte] + enc(" ```python\nprint(1)\n```") + [eos],  # invalid UTF-8
        enc(code) + [eos, start] + enc("user\nprint(a - b)\n```") + [eos],  # control tokens
        enc("```rust\nfn main() {}\n```") + [eos],  # wrong language
        enc(FLOOD) + [eos],  # prints gigabytes
        enc("x" * 400) + [eos],  # long, no code (cut at max_new_tokens)
        enc("```python\nprint(1)\n") + [eos],  # unterminated block
    ]


@pytest.mark.docker
async def test_a_training_step_with_malformed_outputs_completes():
    sandbox = _docker()
    model_dir = resolve_model(ModelConfig(name="tiny"))
    tok = load_tokenizer(model_dir)
    probe = envs.make("codeforces", sandbox=sandbox)
    task = next(t for t in probe.load_tasks("train") if probe.reference_response(t))
    turns = _turn_tokens(tok, probe, task)
    engine = ScriptedEngine(model_dir, turns)
    cfg = RolloutConfig(
        num_samples_per_task=len(turns), max_new_tokens_per_turn=256, max_context_tokens=4096
    )
    manager = RolloutManager(engine, lambda: envs.make("codeforces", sandbox=sandbox), tok, cfg)
    try:
        result = await manager.collect([task])
    finally:
        await sandbox.aclose()
    trajs = result.trajectories
    assert len(trajs) == len(turns)
    assert all(t.status == Status.COMPLETE for t in trajs), [(t.status, t.error) for t in trajs]
    rewards = sorted(t.reward for t in trajs)
    assert rewards == [0.0] * (len(turns) - 1) + [1.0], rewards

    learner = Learner(model_dir, LearnerConfig(num_minibatches=2))
    prepared = prepare_batch(result.groups, pad_id=learner.pad_token_id)
    assert prepared.metrics["num_trained_seqs"] == len(turns)
    metrics = learner.update(prepared.batch)
    assert metrics["skipped_steps"] == 0 and math.isfinite(metrics["loss"])
    assert metrics["logprob_gap_abs_max"] < 1e-3  # the engine's log-probs are the learner's
    learner.close()
