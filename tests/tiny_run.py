"""Overrides that make `python -m gspo_agents.train` a few-second run on the tiny model (about 1 s
a step), shared by the tests that start real trainings."""

TINY_RUN = [
    "+env.kwargs.difficulty=1",
    "trainer.tasks_per_step=2",
    "rollout.num_samples_per_task=4",
    "trainer.sft.steps=4",
    "trainer.sft.batch_size=8",
    "algorithm.filter_zero_spread_groups=false",  # every step updates, signal or not
    # a 4-step cold start scores 0 on every sample: these runs test the run's lifecycle, not
    # learning, so zero-spread steps must not stop them (a later override of the key wins)
    "trainer.max_failed_steps=0",
]
