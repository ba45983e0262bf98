"""Hand-applied bugs (issue 27) and the test that must kill each: applies one mutation at a time,
runs its killing test, restores the file. Not collected by pytest (no test_ prefix).

    python tests/mutants.py            # every mutant
    python tests/mutants.py NAME ...   # some

Prints KILLED or SURVIVED per mutant; exits 1 if any survived.
"""

import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
L = "gspo_agents/learner/learner.py"
PP = "gspo_agents/learner/prepass.py"
P = "gspo_agents/learner/probe.py"
B = "gspo_agents/batching.py"
T = "gspo_agents/train.py"
WI = "gspo_agents/wiring.py"  # train.py builds the learner through it
RF = "gspo_agents/refill.py"
M = "gspo_agents/learner/moe.py"
OFF = "gspo_agents/offpolicy.py"
R = "tests/test_learner_roles.py"
BR = "tests/test_batch_rules.py"
NO = "tests/test_new_options.py"
W = "tests/test_learner_wiring.py"
OBJ = "gspo_agents/objectives.py"
H = "gspo_agents/learner/head.py"
GRAD = W + "::test_every_step_of_an_update_has_the_hand_written_gradient"
MUTANTS = {
    "decoupled_anchor_engine": (
        PP,
        'if off.old_logprobs != "engine":',
        'if off.old_logprobs == "recompute":',
        R + "::test_decoupled_anchor_is_the_trainer_and_weight_is_trainer_over_engine",
    ),
    "decoupled_weight_inverted": (
        OFF,
        "log_w_B = sequence_log_ratio(trainer_lp_BT, engine_lp_BT, mask)",
        "log_w_B = sequence_log_ratio(engine_lp_BT, trainer_lp_BT, mask)",
        R + "::test_decoupled_anchor_is_the_trainer_and_weight_is_trainer_over_engine",
    ),
    "replay_first_row": (
        L,
        "per_row = [pre.routes[r] for r in micro_rows]",
        "per_row = [pre.routes[micro_rows[0]] for r in micro_rows]",
        R + "::test_routing_replay_feeds_each_row_its_own_old_routes_at_every_step",
    ),
    "replay_row0": (
        L,
        "per_row = [pre.routes[r] for r in micro_rows]",
        "per_row = [pre.routes[0] for r in micro_rows]",
        R + "::test_routing_replay_feeds_each_row_its_own_old_routes_at_every_step",
    ),
    "replay_rerecorded_each_step": (
        L,
        "            skipped += 0 if stepped else 1\n",
        "            skipped += 0 if stepped else 1\n            if self.cfg.routing_replay:\n                pre.routes = pre_update(self, batch, lengths).routes\n",
        R + "::test_routing_replay_feeds_each_row_its_own_old_routes_at_every_step",
    ),
    "volatility_all_tokens": (
        P,
        "experts = changed_experts(before, after[0], mb.loss_mask_BT.reshape(-1))",
        "experts = changed_experts(before, after[0], mb.attention_mask_BT.reshape(-1))",
        R + "::test_expert_volatility_is_the_model_token_set_change_after_one_optimizer_step",
    ),
    "volatility_by_position": (
        M,
        "still_LNK = (before_LNK[..., :, None] == after_LNK[..., None, :]).any(dim=-1)",
        "still_LNK = before_LNK == after_LNK",
        R + "::test_expert_volatility_is_the_model_token_set_change_after_one_optimizer_step",
    ),
    "volatility_older_measure": (
        P,
        '"expert_volatility": c[2] / c[3] if c[3] > 0 else 0.0',
        '"expert_volatility": c[0] / c[1] if c[1] > 0 else 0.0',
        R + "::test_expert_volatility_is_the_model_token_set_change_after_one_optimizer_step",
    ),
    "volatility_after_whole_update": (
        L,
        "if i == 0 and self._routers.enabled:",
        "if i == self.cfg.num_minibatches - 1 and self._routers.enabled:",
        R + "::test_expert_volatility_is_the_model_token_set_change_after_one_optimizer_step",
    ),
    "normalize_std_seq_path": (
        B,
        "adv = group_advantages(rewards, group_ids, normalize_std=normalize_std)",
        "adv = group_advantages(rewards, group_ids)",
        BR + "::test_normalize_std_false_reaches_both_advantage_paths_of_the_batch",
    ),
    "normalize_std_turn_path": (
        B,
        "            gamma=turn_discount,\n            normalize_std=normalize_std,\n",
        "            gamma=turn_discount,\n",
        BR + "::test_normalize_std_false_reaches_both_advantage_paths_of_the_batch",
    ),
    "normalize_std_train_py": (
        T,
        "        normalize_std=a.normalize_std,\n",
        "",
        BR + "::test_train_step_passes_every_batch_option_to_the_batch_code",
    ),
    "overlong_filter_in_baseline": (
        B,
        "    finished = [t for t in trainable if not (overlong_filter and is_overlong(t))]\n",
        "    finished = list(trainable)\n",
        BR + "::test_overlong_filter_leaves_the_cut_trajectory_out_of_the_group_baseline",
    ),
    "context_cut_not_overlong": (
        B,
        'return traj.info.get("last_finish") == "length" or traj.info.get("truncated_by") == "context"',
        'return traj.info.get("last_finish") == "length"',
        BR + "::test_a_trajectory_cut_by_either_budget_is_overlong_and_penalised",
    ),
    "turn_penalty_first_turn": (
        B,
        "return turn_rewards[:-1] + [turn_rewards[-1] - penalty] if penalty else turn_rewards",
        "return [turn_rewards[0] - penalty] + turn_rewards[1:] if penalty else turn_rewards",
        BR + "::test_per_turn_overlong_penalty_lands_on_the_last_turn",
    ),
    "refill_ignores_discount": (
        RF,
        "            turn_discount=a.turn_discount,\n            overlong_penalty=a.overlong_penalty,\n            overlong_filter",
        "            overlong_penalty=a.overlong_penalty,\n            overlong_filter",
        BR + "::test_refill_signal_check_uses_the_turn_discount",
    ),
    "refill_redraws_step_tasks": (
        RF,
        "draw = refill_task_indices(len(tasks), step, rounds + 1, t.tasks_per_step, t.seed, used)",
        "draw = task_indices_for_step(len(tasks), step, t.tasks_per_step, t.seed + 7919 * (rounds + 1))",
        BR + "::test_refill_never_redraws_a_task_and_truncates_to_the_step_size",
    ),
    "refill_forgets_used": (
        RF,
        "        used.update(draw)\n",
        "",
        BR + "::test_refill_never_redraws_a_task_and_truncates_to_the_step_size",
    ),
    "refill_no_truncation": (
        RF,
        "return kept[: t.tasks_per_step] if kept else groups",
        "return kept if kept else groups",
        BR + "::test_refill_never_redraws_a_task_and_truncates_to_the_step_size",
    ),
    # issue 27's new options
    "kl_k3_reversed": (
        "gspo_agents/objectives.py",
        "return (torch.expm1(log_r) - log_r).clamp(max=K3_MAX)",
        "return (torch.expm1(-log_r) + log_r).clamp(max=K3_MAX)",
        NO + "::test_kl_penalty_value_and_gradient_by_hand",
    ),
    "kl_not_passed_by_learner": (
        L,
        "kl_coef=c.kl_coef,",
        "kl_coef=0.0,",
        NO + "::test_kl_reference_is_the_starting_model_and_its_penalty_reaches_the_loss",
    ),
    "entropy_sign": (
        "gspo_agents/objectives.py",
        "loss = loss - entropy_coef * _aggregate_tokens(",
        "loss = loss + entropy_coef * _aggregate_tokens(",
        NO + "::test_entropy_bonus_and_token_entropy_by_hand",
    ),
    "dual_clip_on_positive_advantages": (
        "gspo_agents/objectives.py",
        "dual_BT = (adv_BT < 0) & (surrogate_BT < floor_BT) & inp.mask_BT",
        "dual_BT = (surrogate_BT < floor_BT) & inp.mask_BT",
        NO + "::test_dual_clip_bounds_negative_advantage_terms_at_c_times_a",
    ),
    "dr_grpo_without_constant": (
        "gspo_agents/objectives.py",
        "return inp.num_sequences * inp.norm_tokens",
        "return inp.num_sequences",
        NO + "::test_dr_grpo_normaliser_is_a_constant_token_count",
    ),
    "ppo_epochs_ignored": (
        L,
        "enumerate(minibatches * self.cfg.ppo_epochs)",
        "enumerate(minibatches)",
        NO + "::test_ppo_epochs_is_that_many_passes_against_the_same_anchor",
    ),
    "overlong_buffer_ramp": (
        B,
        "return (start - length) / buffer if length <= max_length else -1.0",
        "return (start - length) / max_length if length <= max_length else -1.0",
        NO + "::test_dapo_overlong_buffer_ramp_and_its_place_in_the_rewards",
    ),
    "version_lag_off_by_one": (
        "gspo_agents/rollout/staleness.py",
        "(versions_BT >= current_version - max_lag)",
        "(versions_BT > current_version - max_lag)",
        NO + "::test_max_version_lag_masks_only_the_stale_tokens_of_a_partial_rollout",
    ),
    "product_is_uses_the_mean": (
        OFF,
        "        log_w_B = log_w_B * mask.sum(dim=1)  # the sum of the token log-ratios\n",
        "",
        NO + "::test_sequence_product_weights_are_exp_of_the_summed_log_ratio",
    ),
    # issue 36: the options wired through the learner and train.py
    "entropy_detached_in_learner": (
        L,
        "entropy_BT = tokens.entropy_BT if self.cfg.entropy_coef else None",
        "entropy_BT = tokens.entropy_BT.detach() if self.cfg.entropy_coef else None",
        GRAD,
    ),
    "full_logits_entropy_without_grad": (
        L,
        "entropy_grad=cfg.entropy_coef > 0",
        "entropy_grad=False",
        GRAD,
    ),
    "full_logits_entropy_at_t1": (
        H,
        "return TokenStats(lp_BT, token_entropy(logits_BTV, self.temperature))",
        "return TokenStats(lp_BT, token_entropy(logits_BTV, 1.0))",
        GRAD,
    ),
    "kl_to_pi_old": (
        L,
        "ref_BT = pre.ref_logprobs_BT[micro_rows, :T] if micro_rows is not None else lp_BT",
        "ref_BT = mb.old_logprobs_BT if micro_rows is not None else lp_BT",
        GRAD,
    ),
    "reference_logprobs_at_t1": (
        L,
        "TokenHead(reference, cfg.temperature, cfg.logprob_chunk_tokens)",
        "TokenHead(reference, 1.0, cfg.logprob_chunk_tokens)",
        GRAD,
    ),
    "kl_entropy_importance_weighted": (
        OBJ,
        "plain = dataclasses.replace(inp, weights_BT=None)",
        "plain = inp",
        GRAD,
    ),
    "kl_entropy_ignore_loss_agg": (
        OBJ,
        "plain = dataclasses.replace(inp, weights_BT=None)",
        'plain = dataclasses.replace(inp, weights_BT=None, loss_agg="seq-mean-token-mean")',
        GRAD,
    ),
    "clip_ratio_c_dropped_by_learner": (
        L,
        "clip_ratio_c=c.clip_ratio_c,",
        "clip_ratio_c=None,",
        GRAD,
    ),
    "clip_ratio_c_dropped_by_train_py": (
        WI,
        "        clip_ratio_c=a.clip_ratio_c,\n",
        "",
        NO + "::test_train_builds_the_learner_with_every_option_of_the_config",
    ),
    "dual_clip_on_the_ratio": (
        OBJ,
        "dual_BT = (adv_BT < 0) & (surrogate_BT < floor_BT) & inp.mask_BT",
        "dual_BT = (ratio_BT.detach() > inp.clip_ratio_c) & inp.mask_BT",
        GRAD,
    ),
    "dr_grpo_per_minibatch_normaliser": (
        L,
        "norm_tokens=c.loss_norm_tokens,",
        "norm_tokens=max(1, num_tokens // num_sequences),",
        GRAD,
    ),
    "pi_old_recomputed_each_epoch": (
        L,
        "        for i, rows in enumerate(minibatches * self.cfg.ppo_epochs):\n",
        "        for i, rows in enumerate(minibatches * self.cfg.ppo_epochs):\n"
        "            if i and i % len(minibatches) == 0:\n"
        "                pre = pre_update(self, batch, lengths)\n"
        "                batch = pre.batch\n"
        "                self.model.train()\n",
        GRAD,
    ),
    "first_mb_clip_stats_from_the_last": (
        L,
        'metrics["clip_frac_tokens_first_mb"] = per_minibatch[0]["clip_frac_tokens"]',
        'metrics["clip_frac_tokens_first_mb"] = per_minibatch[-1]["clip_frac_tokens"]',
        W + "::test_first_minibatch_clip_stats_are_the_first_steps_before_any_weight_changed",
    ),
    "train_py_drops_overlong_buffer": (
        T,
        "        overlong_buffer=a.overlong_buffer,\n",
        "",
        BR + "::test_train_step_passes_the_overlong_buffer_and_the_current_weight_version",
    ),
    "refill_ignores_overlong_buffer": (
        RF,
        "            overlong_buffer=a.overlong_buffer,\n",
        "",
        BR + "::test_refill_signal_check_uses_the_overlong_buffer",
    ),
    "staleness_version_shifted": (
        T,
        "current_version=manager.weight_version,",
        "current_version=manager.weight_version + 1,",
        BR + "::test_train_step_passes_the_overlong_buffer_and_the_current_weight_version",
    ),
    "packing_allowed_for_moe": (
        L,
        "packing_unsupported(self.model, self.cfg.packing, moe=self._routers.enabled)",
        "packing_unsupported(self.model, self.cfg.packing, moe=False)",
        W + "::test_packing_is_never_used_for_a_moe_model_even_when_requested",
    ),
    "grpo_tis_uses_the_sequence_weight": (
        OFF,
        'elif level == "token" and cfg.seq_is_ratio == "geometric":',
        'elif level == "token" and cfg.seq_is_ratio == "geometric" and cfg.seq_is_cap is None:',
        GRAD,
    ),
}


def main(argv: list[str]) -> int:
    names = argv or list(MUTANTS)
    survived = []
    for name in names:
        path, old, new, test = MUTANTS[name]
        f = ROOT / path
        src = f.read_text()
        assert src.count(old) == 1, (name, src.count(old))
        f.write_text(src.replace(old, new))
        try:
            r = subprocess.run(
                [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", test],
                cwd=ROOT,
                capture_output=True,
                text=True,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
            )
            verdict = "KILLED" if r.returncode else "SURVIVED"
            print(f"{name:32s} {verdict}  by {test.split('::')[1]}", flush=True)
            if not r.returncode:
                survived.append(name)
        finally:
            f.write_text(src)
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
