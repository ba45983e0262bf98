"""The learner side: GSPO updates under FSDP2, checkpoints, HF export. Never imports rollout.

`Learner(model_path, LearnerConfig(...))` trains an HF causal LM on `FlatBatch`es; weights leave
as an HF directory (`export_hf`) for the engine to reload.
"""

from gspo_agents.learner.config import LearnerConfig
from gspo_agents.learner.errors import BatchError, CheckpointError, LearnerError
from gspo_agents.learner.learner import Learner

__all__ = ["Learner", "LearnerConfig", "LearnerError", "CheckpointError", "BatchError"]
