"""The medium tier, strings: palindromes, words, brackets, runs, ciphers, anagrams."""

from __future__ import annotations

from .spec import Spec, word
from .specs_easy import cpp


def _balanced(r, pairs):
    """A random balanced bracket string with `pairs` pairs."""
    out, stack = [], []
    opening = {"(": ")", "[": "]", "{": "}"}
    while len(out) < 2 * pairs:
        if stack and (len(out) + len(stack) >= 2 * pairs or r.random() < 0.5):
            out.append(stack.pop())
        else:
            o = r.choice("([{")
            out.append(o)
            stack.append(opening[o])
    return "".join(out)


def _brackets(r):
    s = _balanced(r, r.randint(1, 12))
    if r.random() < 0.5:  # break it: flip, drop or swap one character
        i = r.randrange(len(s))
        s = s[:i] + r.choice("()[]{}") + s[i + 1 :] if r.random() < 0.7 else s[:i] + s[i + 1 :]
    return (s or "(") + "\n"


STRINGS = [
    Spec(
        id="palindrome",
        title="Palindrome",
        tier="medium",
        legend="A string is a palindrome if it reads the same forwards and backwards. Decide whether s is a palindrome.",
        input_spec="One line with a string s of 1 to 10^5 lowercase letters.",
        output_spec="Print YES if s is a palindrome, otherwise NO.",
        samples=["level\n", "abca\n"],
        edge=["a\n", "ab\n", "aa\n", "a" * 100000 + "\n", "ab" * 50000 + "\n"],
        gen=lambda r: (
            (
                lambda h: (
                    h + h[::-1][r.randint(0, 1) :]
                    if r.random() < 0.5
                    else word(r, r.randint(1, 50), "ab")
                )
            )(word(r, r.randint(1, 40), "ab"))
            + "\n"
        ),
        py='s = input()\nprint("YES" if s == s[::-1] else "NO")\n',
        cpp=cpp(
            '    string s;\n    cin >> s;\n    string t(s.rbegin(), s.rend());\n    cout << (s == t ? "YES" : "NO") << endl;'
        ),
    ),
    Spec(
        id="word_count",
        title="Words",
        tier="medium",
        legend="Count the words in a line. Words are maximal runs of non-space characters.",
        input_spec="One line of 1 to 1000 characters: lowercase letters and spaces (it holds at least one letter).",
        output_spec="Print the number of words.",
        samples=["hello world\n", "  a  b   c \n"],
        edge=["x\n", " x\n", "a b c d e f g\n", "abc" * 300 + "\n"],
        gen=lambda r: (
            (lambda s: s if s.strip() else "q" + s)(word(r, r.randint(1, 1000), "ab  ")) + "\n"
        ),
        py="print(len(input().split()))\n",
        cpp=cpp("    string w;\n    int k = 0;\n    while (cin >> w) k++;\n    cout << k << endl;"),
    ),
    Spec(
        id="balanced_brackets",
        title="Brackets",
        tier="medium",
        legend="A string of the characters ()[]{} is balanced if every bracket is closed by a bracket of the same type in the right order. Decide whether s is balanced.",
        input_spec="One line with s (1 to 10^5 characters from ()[]{}).",
        output_spec="Print YES if s is balanced, otherwise NO.",
        samples=["([]{})\n", "([)]\n"],
        edge=[
            "(\n",
            ")\n",
            "()\n",
            "(" * 50000 + ")" * 50000 + "\n",
            "{" * 50000 + ")" * 50000 + "\n",
            "][\n",
        ],
        gen=_brackets,
        py='s, st = input(), []\nok = True\nfor c in s:\n    if c in "([{":\n        st.append(c)\n    elif not st or st.pop() + c not in ("()", "[]", "{}"):\n        ok = False\n        break\nprint("YES" if ok and not st else "NO")\n',
        cpp=cpp(
            "    string s, st;\n    cin >> s;\n    bool ok = true;\n    for (char c : s) {\n        if (c == '(' || c == '[' || c == '{') st += c;\n        else {\n            char o = c == ')' ? '(' : c == ']' ? '[' : '{';\n            if (st.empty() || st.back() != o) { ok = false; break; }\n            st.pop_back();\n        }\n    }\n    cout << (ok && st.empty() ? \"YES\" : \"NO\") << endl;"
        ),
    ),
    Spec(
        id="longest_run",
        title="Longest Run",
        tier="medium",
        legend="Print the length of the longest block of equal consecutive characters in s.",
        input_spec="One line with s (1 to 10^5 lowercase letters).",
        output_spec="Print the length of the longest run.",
        samples=["aabbbc\n", "abc\n"],
        edge=["a\n", "z" * 100000 + "\n", "ab" * 50000 + "\n", "abbb\n"],
        gen=lambda r: word(r, r.randint(1, 3000), r.choice(["ab", "abc", "a"])) + "\n",
        py="s = input()\nbest = cur = 1\nfor i in range(1, len(s)):\n    cur = cur + 1 if s[i] == s[i - 1] else 1\n    best = max(best, cur)\nprint(best)\n",
        cpp=cpp(
            "    string s;\n    cin >> s;\n    int best = 1, cur = 1;\n    for (size_t i = 1; i < s.size(); i++) { cur = s[i] == s[i - 1] ? cur + 1 : 1; best = max(best, cur); }\n    cout << best << endl;"
        ),
    ),
    Spec(
        id="caesar_shift",
        title="Caesar",
        tier="medium",
        legend="Shift every letter of s forward by k positions in the alphabet, wrapping from z to a.",
        input_spec="The first line holds s (1 to 1000 lowercase letters), the second line k (0 <= k <= 10^9).",
        output_spec="Print the shifted string.",
        samples=["abc\n1\n", "xyz\n3\n"],
        edge=["a\n0\n", "z\n1\n", "hello\n26\n", "hello\n1000000000\n"],
        gen=lambda r: word(r, r.randint(1, 1000)) + f"\n{r.randint(0, 10**9)}\n",
        py="s = input()\nk = int(input())\nprint(''.join(chr((ord(c) - 97 + k) % 26 + 97) for c in s))\n",
        cpp=cpp(
            "    string s;\n    long long k;\n    cin >> s >> k;\n    for (char &c : s) c = 'a' + (c - 'a' + k) % 26;\n    cout << s << endl;"
        ),
    ),
    Spec(
        id="anagram",
        title="Anagrams",
        tier="medium",
        legend="Decide whether string t can be obtained by reordering the letters of string s.",
        input_spec="Two lines: s and t (1 to 10^5 lowercase letters each).",
        output_spec="Print YES or NO.",
        samples=["listen\nsilent\n", "abc\nabd\n"],
        edge=["a\na\n", "a\naa\n", "ab\nba\n", "aab\nabb\n"],
        gen=lambda r: (
            lambda s: (
                s
                + "\n"
                + ("".join(r.sample(s, len(s))) if r.random() < 0.5 else word(r, len(s), "abc"))
                + "\n"
            )
        )(word(r, r.randint(1, 50), "abc")),
        py='print("YES" if sorted(input()) == sorted(input()) else "NO")\n',
        cpp=cpp(
            '    string s, t;\n    cin >> s >> t;\n    sort(s.begin(), s.end());\n    sort(t.begin(), t.end());\n    cout << (s == t ? "YES" : "NO") << endl;'
        ),
    ),
    Spec(
        id="run_length",
        title="Run-Length Encoding",
        tier="medium",
        legend="Encode s by replacing each block of equal consecutive letters with the letter followed by the block length. For example aaabcc becomes a3b1c2.",
        input_spec="One line with s (1 to 10^5 lowercase letters).",
        output_spec="Print the encoding.",
        samples=["aaabcc\n", "z\n"],
        edge=["ab\n", "a" * 100000 + "\n", "abab\n"],
        gen=lambda r: word(r, r.randint(1, 500), "abc"[: r.randint(1, 3)]) + "\n",
        py="s = input()\nout, i = [], 0\nwhile i < len(s):\n    j = i\n    while j < len(s) and s[j] == s[i]:\n        j += 1\n    out.append(s[i] + str(j - i))\n    i = j\nprint(''.join(out))\n",
        cpp=cpp(
            "    string s, out;\n    cin >> s;\n    for (size_t i = 0; i < s.size();) {\n        size_t j = i;\n        while (j < s.size() && s[j] == s[i]) j++;\n        out += s[i] + to_string(j - i);\n        i = j;\n    }\n    cout << out << endl;"
        ),
    ),
]
