"""The medium tier: loops, sorting, prefix sums, greedy, DP, graphs (one module a topic)."""

from __future__ import annotations

from .specs_medium_arrays import ARRAYS
from .specs_medium_dp_graphs import DP_GRAPHS
from .specs_medium_numbers import NUMBERS
from .specs_medium_strings import STRINGS

SPECS = NUMBERS + STRINGS + ARRAYS + DP_GRAPHS
