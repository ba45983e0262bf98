"""The learner side: GSPO updates under FSDP2, checkpoints, HF export. Never imports rollout."""
