"""Learner errors.

LearnerError
├── CheckpointError   a checkpoint is missing, incomplete or does not match the model
└── BatchError        a batch the learner cannot train on (empty, wrong shapes); a ValueError too
"""

from __future__ import annotations


class LearnerError(Exception):
    pass


class CheckpointError(LearnerError):
    pass


class BatchError(LearnerError, ValueError):
    pass
