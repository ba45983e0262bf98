"""The default comparison against the Kattis default output validator, case by case.

Each row states the verdict the problem package format's "Default output validator
specification" (and its float grammar under "General requirements") gives, worked out from the
spec text, not from our code: ASCII whitespace only (space, \\t, \\n, \\v, \\f, \\r), ASCII-only case
folding unless case_sensitive, numbers only under a float tolerance and only as the grammar
    sign? ( digit* "." digit+ | digit+ "." | digit+ ) ( [Ee] sign? digit+ )?
writes them (ASCII digits), a number beyond the double range is not a float (problemtools'
default_validator.cc: isinf -> string), space_change_sensitive compares every whitespace run.
"""

from __future__ import annotations

import pytest

from sandbox.judging.judge import compare
from sandbox.judging.kattis import default_validator_spec

AC, WA = True, False
NBSP, IDEO, LSEP, NEL = "\u00a0", "\u3000", "\u2028", "\u0085"

# (output, answer, flags, verdict)
CASES: list[tuple[str, str, str, bool]] = [
    # --- tokens and whitespace (default flags) -------------------------------------------
    ("1 2\n", "1 2\n", "", AC),
    ("1  2", "1 2\n", "", AC),
    ("1\n2", "1 2", "", AC),
    ("1\t2\r\n", "1 2", "", AC),
    ("1\v2\f", "1 2", "", AC),
    ("  1 2  \n\n", "1 2", "", AC),
    ("", "", "", AC),
    ("\n", "", "", AC),
    ("", "\n \n", "", AC),
    ("", "1", "", WA),
    ("1", "", "", WA),
    ("1 2 3", "1 2", "", WA),
    ("1 2", "1 2 3", "", WA),
    ("12", "1 2", "", WA),
    (f"1{NBSP}2", "1 2", "", WA),  # U+00A0 is not whitespace: one token
    (f"1{IDEO}2", "1 2", "", WA),  # U+3000 neither
    (f"1{LSEP}2", "1 2", "", WA),  # U+2028 neither
    (f"1{NEL}2", "1 2", "", WA),  # U+0085 neither
    ("1\x1c2", "1 2", "", WA),  # Python's str.split() splits here; Kattis does not
    ("1\x1f2", "1 2", "", WA),
    (f"a{NBSP}b", f"a{NBSP}b", "", AC),  # the same token on both sides
    (f"1 2{NBSP}", "1 2", "", WA),  # a trailing NBSP is a token character
    ("1\x002", "1\x002", "", AC),
    # --- case ----------------------------------------------------------------------------
    ("yes", "YES", "", AC),
    ("Possible", "POSSIBLE", "", AC),
    ("yes", "YES", "case_sensitive", WA),
    ("YES", "YES", "case_sensitive", AC),
    ("straße", "STRASSE", "", WA),  # no Unicode case folding
    ("été", "ÉTÉ", "", WA),
    ("Été", "été", "", WA),  # É vs é: non-ASCII letters keep their case
    ("été", "été", "", AC),
    ("ǅ", "ǆ", "", WA),
    ("ΣΑΣ", "σας", "", WA),
    ("ﬁ", "FI", "", WA),
    ("K", "k", "", AC),  # ASCII K
    ("\u212a", "k", "", WA),  # KELVIN SIGN is not ASCII K
    ("1E5", "1e5", "", AC),  # no tolerance: strings, case-insensitive
    ("1E5", "1e5", "case_sensitive", WA),
    # --- numbers without a tolerance: strings ---------------------------------------------
    ("1.0", "1", "", WA),
    ("01", "1", "", WA),
    ("+1", "1", "", WA),
    ("1e0", "1", "", WA),
    ("0.50", "0.5", "", WA),
    ("1.5", "1.5", "", AC),
    # --- float tolerance: the grammar -----------------------------------------------------
    ("1", "1.0", "float_tolerance 1e-6", AC),
    ("1.0000001", "1", "float_tolerance 1e-6", AC),
    ("1.1", "1", "float_tolerance 1e-6", WA),
    (".5", "0.5", "float_tolerance 1e-9", AC),
    ("5.", "5", "float_tolerance 1e-9", AC),
    ("+5", "5", "float_tolerance 1e-9", AC),
    ("-0", "0", "float_tolerance 1e-9", AC),
    ("1e1", "10", "float_tolerance 1e-9", AC),
    ("1E+1", "10", "float_tolerance 1e-9", AC),
    ("100e-1", "10", "float_tolerance 1e-9", AC),
    ("3.14000000e-2", "0.0314", "float_tolerance 1e-9", AC),  # the spec's own example
    ("1e", "1", "float_tolerance 1e-6", WA),  # not a number, and the answer is one
    ("1e", "1e", "float_tolerance 1e-6", AC),  # neither is a number: equal strings
    ("1E", "1e", "float_tolerance 1e-6", AC),  # ... compared case-insensitively
    ("1e", "1E", "float_tolerance 1e-6 case_sensitive", WA),
    ("1e+", "1", "float_tolerance 1e-6", WA),
    (".", ".", "float_tolerance 1e-6", AC),
    (".", "0", "float_tolerance 1e-6", WA),
    ("0x10", "16", "float_tolerance 1e-6", WA),  # hexadecimal is not in the grammar
    ("inf", "1e999", "float_tolerance 1e-6", WA),
    ("nan", "0.5", "float_tolerance 1e-6", WA),
    ("nan", "nan", "float_tolerance 1e-6", AC),  # strings on both sides
    ("NaN", "nan", "float_tolerance 1e-6", AC),
    ("infinity", "Infinity", "float_tolerance 1e-6", AC),
    ("1_0", "10", "float_tolerance 1e-6", WA),
    ("1,5", "1.5", "float_tolerance 1e-6", WA),
    (" 1", "1", "float_tolerance 1e-6", AC),
    ("١٢", "12", "float_tolerance 1e-6", WA),  # Arabic-Indic digits are not digits here
    ("١٢", "١٢", "float_tolerance 1e-6", AC),  # ... but equal strings
    ("１２", "12", "float_tolerance 1e-6", WA),  # fullwidth digits neither
    # --- beyond the double range ----------------------------------------------------------
    ("1e999", "1e999", "float_tolerance 1e-6", AC),  # not a float: the same string
    ("2e999", "1e999", "float_tolerance 1e-6", WA),  # both overflow, still different
    ("1E999", "1e999", "float_tolerance 1e-6", AC),  # strings, case-insensitive
    ("1e999", "1e308", "float_tolerance 1e-6", WA),  # the answer is a float, this is not
    ("1" * 400, "1" * 400, "float_tolerance 1e-6", AC),
    ("1" * 399 + "2", "1" * 400, "float_tolerance 1e-6", WA),
    ("1e-400", "0", "float_absolute_tolerance 1e-9", AC),  # underflow is a finite float
    # --- tolerance semantics ---------------------------------------------------------------
    ("1000.05", "1000", "float_absolute_tolerance 0.1", AC),
    ("1000.5", "1000", "float_absolute_tolerance 0.1", WA),
    ("1000.5", "1000", "float_relative_tolerance 1e-3", AC),
    ("0.0015", "0.001", "float_relative_tolerance 1e-3", WA),
    ("0.0015", "0.001", "float_absolute_tolerance 1e-3", AC),
    ("0", "0", "float_relative_tolerance 1e-3", AC),
    ("1e-12", "0", "float_relative_tolerance 1e-3", WA),  # relative to 0 is exact
    ("1.0015", "1", "float_tolerance 1e-3", WA),
    ("1.0009", "1", "float_tolerance 1e-3", AC),
    ("2", "1", "float_relative_tolerance 1", AC),  # |s - a| <= 1 * |a|
    ("YES 0.5", "yes 0.50000001", "float_tolerance 1e-6", AC),
    ("yes 0.5", "YES 0.5", "float_tolerance 1e-6 case_sensitive", WA),
    ("abc", "1", "float_tolerance 1e-6", WA),
    ("1", "abc", "float_tolerance 1e-6", WA),
    # --- space_change_sensitive --------------------------------------------------------------
    ("1 2\n", "1 2\n", "space_change_sensitive", AC),
    ("1  2\n", "1 2\n", "space_change_sensitive", WA),
    ("1 2", "1 2\n", "space_change_sensitive", WA),  # trailing whitespace counts too
    (" 1 2\n", "1 2\n", "space_change_sensitive", WA),  # and leading
    ("1\t2\n", "1 2\n", "space_change_sensitive", WA),  # the type of whitespace counts
    ("1\r\n", "1\n", "space_change_sensitive", WA),
    (f"1{NBSP}2\n", f"1{NBSP}2\n", "space_change_sensitive", AC),
    ("YES\n", "yes\n", "space_change_sensitive", AC),
    ("1.0 2\n", "1 2\n", "space_change_sensitive float_tolerance 1e-6", AC),
    ("1.0  2\n", "1 2\n", "space_change_sensitive float_tolerance 1e-6", WA),
]


def test_the_table_is_big_enough():
    assert len(CASES) >= 84


@pytest.mark.parametrize(("output", "answer", "flags", "verdict"), CASES)
def test_default_comparison_matches_the_kattis_default_validator(
    output: str, answer: str, flags: str, verdict: bool
) -> None:
    spec = default_validator_spec(flags.split())
    accepted, message = compare(output, answer, spec)
    assert accepted is verdict, (output, answer, flags, message)
    assert bool(message) is not accepted  # a rejection always says where


@pytest.mark.parametrize(
    "flags",
    [
        "float_tolerance 1e-6 float_tolerance 1e-6",
        "float_tolerance 1e-6 float_absolute_tolerance 1e-6",
        "float_relative_tolerance 1e-6 float_tolerance 1e-6",
    ],
)
def test_tolerance_given_twice_is_a_package_error(flags: str) -> None:
    from sandbox.judging.kattis import PackageError

    with pytest.raises(PackageError, match="each tolerance may be given once"):
        default_validator_spec(flags.split())
