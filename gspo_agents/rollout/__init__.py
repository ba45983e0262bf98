"""The rollout side: inference engines and the rollout manager. Never imports the learner."""
