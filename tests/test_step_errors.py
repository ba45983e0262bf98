"""Why a step trained nothing, in words, and the stop after `trainer.max_failed_steps` such steps
(the train CLI's side: tests/hardening/test_run_lifecycle.py)."""

from __future__ import annotations

import pytest

from gspo_agents.batching import prepare_batch
from gspo_agents.step_errors import FailedSteps, RunStalled, converged, untrained_reason
from gspo_agents.trajectory import Status, Trajectory


def traj(group: str, reward: float | None, status=Status.COMPLETE, **info) -> Trajectory:
    t = Trajectory(prompt_ids=[1, 2], group_id=group, status=status, reward=reward, info=info)
    t.append_model([3, 4], [-0.1, -0.2], version=0)
    return t


def reason(groups, **kw) -> str | None:
    return untrained_reason(groups, prepare_batch(groups, pad_id=0, **kw).metrics)


def test_a_step_with_reward_spread_trained():
    assert reason([[traj("a", 1.0), traj("a", 0.0)], [traj("b", 0.0), traj("b", 0.0)]]) is None


@pytest.mark.parametrize("filter_zero_spread", [True, False])
def test_zero_spread_is_named_with_the_rewards_whether_filtered_or_not(filter_zero_spread):
    groups = [[traj("a", 2.0), traj("a", 2.0)], [traj("b", -0.5), traj("b", -0.5)]]
    why = reason(groups, filter_zero_spread=filter_zero_spread)
    assert why is not None and why.startswith("zero reward spread")
    assert "(rewards: -0.5, 2)" in why


def test_a_tool_step_that_scored_zero_says_what_the_episodes_did():
    """Issue 35: "zero reward spread" alone hid that no episode ever called a tool."""
    silent = {"tool_call_attempts": 0.0, "parse_failures": 0.0, "tool_calls": 0.0}
    swe = {**silent, "submitted": 0.0, "resolved": 0.0, "tests_pass_frac": 0.0}
    last = [{"end": "turn_limit", "grade_reason": "not graded"}]
    groups = [[traj(g, 0.0, env_metrics=swe, turn_infos=last) for _ in range(2)] for g in "ab"]
    why = reason(groups)
    assert why is not None and why.startswith("zero reward spread")
    assert "tool calls: 0 attempted in 0/4 episodes, 0 parsed, 0 ran" in why
    assert "0/4 submitted, tests run in 0/4, 0/4 resolved" in why
    assert "no episode called a tool" in why

    tried = {"tool_call_attempts": 3.0, "parse_failures": 1.0, "tool_calls": 2.0}
    graded = [{"end": "ended_by_tool", "grade_reason": "FAIL_TO_PASS test_x failed"}]
    groups = [[traj("a", 0.0, env_metrics={**tried, "submitted": 1.0, "resolved": 0.0},
                    turn_infos=graded) for _ in range(2)]]  # fmt: skip
    why = reason(groups)
    assert "tool calls: 6 attempted in 2/2 episodes, 4 parsed, 4 ran" in why
    assert "2/2 submitted, tests run in 2/2, 0/2 resolved" in why
    assert "no episode called a tool" not in why


def test_a_step_of_an_env_without_tools_names_no_tool_calls():
    why = reason([[traj("a", 0.0), traj("a", 0.0)]])
    assert why is not None and "tool calls" not in why


def test_prompts_that_fill_the_context_are_named_with_the_key_to_raise():
    cut = [traj("a", None, Status.TRUNCATED, truncated_by="prompt") for _ in range(3)]
    why = reason([cut])
    assert why == (
        "no trajectory finished with a reward: 3/3 were truncated before generating a token: "
        "the prompt fills rollout.max_context_tokens (raise it)"
    )


def test_errors_and_truncation_are_counted_together():
    failed = traj("a", None, Status.ERROR, error_kind="env_exception", exception_type="KeyError")
    cut = traj("a", None, Status.TRUNCATED, truncated_by="prompt")
    why = reason([[failed, cut]])
    assert why is not None and "1/2 failed (env_exception:KeyError ×1)" in why
    assert "1/2 were truncated before generating" in why


def test_the_overlong_filter_leaving_nothing_is_named():
    groups = [[traj("a", 1.0, last_finish="length"), traj("a", 0.0, last_finish="length")]]
    why = reason(groups, overlong_filter=True)
    assert why is not None and "algorithm.overlong_filter=true" in why


def test_the_run_stops_after_the_limit_of_consecutive_untrained_steps_only():
    steps = FailedSteps(limit=2)
    steps.record(1, "zero reward spread")
    steps.record(2, None)  # a step that trained resets the count
    steps.record(3, "zero reward spread")
    with pytest.raises(RunStalled, match="stopping at step 4: 2 consecutive steps trained nothing"):
        steps.record(4, "zero reward spread")
    never = FailedSteps(limit=0)
    for step in range(10):
        never.record(step, "x")


def test_a_converged_policy_is_shown_but_not_counted_once_the_run_has_trained():
    # each task answered one way, right on one task and wrong on the other: nothing to learn
    # from, but the policy learned; the default run ends like this after its 300 steps
    solved = [[traj("a", 1.0), traj("a", 1.0)], [traj("b", 0.0), traj("b", 0.0)]]
    assert converged(solved)
    steps = FailedSteps(limit=2)
    steps.record(1, None)
    for step in range(2, 10):
        steps.record(step, "zero reward spread", converged=converged(solved))
    assert steps.consecutive == 0


def test_converged_before_the_run_trained_and_collapse_after_it_still_stop_the_run():
    by_task = [[traj("a", 1.0), traj("a", 1.0)], [traj("b", 0.0), traj("b", 0.0)]]
    never_trained = FailedSteps(limit=2)
    never_trained.record(1, "zero reward spread", converged=converged(by_task))
    with pytest.raises(RunStalled):  # a reward that depends on the task, not on the answer
        never_trained.record(2, "zero reward spread", converged=converged(by_task))
    collapsed = [[traj("a", 0.0), traj("a", 0.0)], [traj("b", 0.0), traj("b", 0.0)]]
    assert not converged(collapsed)  # one value over the whole batch is not convergence
    resumed = FailedSteps(limit=2, trained_before=True)
    resumed.record(1, "zero reward spread", converged=converged(collapsed))
    with pytest.raises(RunStalled):
        resumed.record(2, "zero reward spread", converged=converged(collapsed))


def test_the_console_line_says_a_converged_step_is_not_counted():
    import io

    from gspo_agents.step_errors import ErrorReport, RunErrors

    solved = [[traj("a", 1.0), traj("a", 1.0)], [traj("b", 0.0), traj("b", 0.0)]]
    errors = RunErrors(2, log_only=lambda _: None, trained_before=True)
    out = io.StringIO()
    for step in (1, 2, 3):
        errors.after_step(step, ErrorReport.of_step(solved), reason(solved), out, groups=solved)
    assert out.getvalue().count("converged: not counted as a failed step") == 3
