"""minicalc: a tiny synthetic package used as the SWE test fixtures' repository."""

from minicalc.ops import clamp, mean, running_total
