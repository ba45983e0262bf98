"""Per-token log-probs with the engine's semantics, shared by the engine and the learner.

The engine reports log_softmax(logits / temperature) of each sampled token (SGLang's semantics,
before top-k / top-p renormalisation). The learner must compute exactly the same quantity, or the
importance ratio measures the temperature instead of the policy change.

Shape legend: B batch, T sequence length, V vocabulary.
"""

from __future__ import annotations

import torch


def token_logprobs(
    logits_BTV: torch.Tensor, input_ids_BT: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """Log-prob of each token given the tokens before it, aligned to token positions.

    Returns [B, T] in fp32; position 0 (no context) is 0. `logits_BTV[:, t]` predicts token t+1.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    logits = logits_BTV[:, :-1].float()
    if temperature != 1.0:
        logits = logits / temperature
    targets = input_ids_BT[:, 1:].unsqueeze(-1)
    # log_softmax(x)[y] = x[y] - logsumexp(x): avoids materialising a second [B, T, V] tensor.
    picked = logits.gather(-1, targets).squeeze(-1) - torch.logsumexp(logits, dim=-1)
    return torch.nn.functional.pad(picked, (1, 0), value=0.0)
