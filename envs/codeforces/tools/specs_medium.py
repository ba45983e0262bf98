"""The medium tier: loops, sorting, prefix sums, greedy, DP, graphs."""

from __future__ import annotations

from .spec import Spec, ints, lines, word
from .specs_easy import CPP_HEAD, cpp

FAST_PY = "import sys\n"


def _arr(r, n, lo, hi):
    return [r.randint(lo, hi) for _ in range(n)]


def _graph(r, n, m, weighted=False, wmax=1000):
    edges = []
    for _ in range(m):
        u, v = r.randint(1, n), r.randint(1, n)
        edges.append(f"{u} {v} {r.randint(1, wmax)}" if weighted else f"{u} {v}")
    return lines(f"{n} {m}", *edges) if edges else lines(f"{n} {m}")


def _grid(r, h, w, p_block=0.2):
    rows = ["".join("#" if r.random() < p_block else "." for _ in range(w)) for _ in range(h)]
    return lines(f"{h} {w}", *rows)


def _knap(r):
    n, w = r.randint(1, 50), r.randint(1, 5000)
    items = [f"{r.randint(1, 1000)} {r.randint(1, 10**6)}" for _ in range(n)]
    return lines(f"{n} {w}", *items)


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


def _two_sum(r):
    n = r.randint(1, 8)
    a = _arr(r, n, -20, 20)
    t = a[0] + a[-1] if n > 1 and r.random() < 0.5 else r.randint(-40, 40)
    return lines(f"{n} {t}", ints(a))


def _ranges(r):
    n, q = r.randint(1, 2000), r.randint(1, 2000)
    a = _arr(r, n, -(10**9), 10**9)
    qs = []
    for _ in range(q):
        lo, hi = sorted((r.randint(1, n), r.randint(1, n)))
        qs.append(f"{lo} {hi}")
    return lines(f"{n} {q}", ints(a), *qs)


CPP_DSU = (
    CPP_HEAD
    + "vector<int> p;\nint find(int x) { while (p[x] != x) { p[x] = p[p[x]]; x = p[x]; } return x; }\nint main() {\n    int n, m;\n    cin >> n >> m;\n    p.resize(n + 1);\n    iota(p.begin(), p.end(), 0);\n    int c = n;\n    for (int i = 0; i < m; i++) { int a, b; cin >> a >> b; a = find(a); b = find(b); if (a != b) { p[a] = b; c--; } }\n    cout << c << endl;\n    return 0;\n}\n"
)


SPECS = [
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
        id="fizzbuzz",
        title="FizzBuzz",
        tier="medium",
        legend="For every i from 1 to n print one line: FizzBuzz if i is divisible by 15, Fizz if by 3, Buzz if by 5, and i itself otherwise.",
        input_spec="One integer n (1 <= n <= 10^4).",
        output_spec="Print n lines.",
        samples=["5\n", "15\n"],
        edge=["1\n", "3\n", "10000\n"],
        gen=lambda r: f"{r.randint(1, 10**4)}\n",
        py='for i in range(1, int(input()) + 1):\n    print("FizzBuzz" if i % 15 == 0 else "Fizz" if i % 3 == 0 else "Buzz" if i % 5 == 0 else i)\n',
        cpp=cpp(
            '    int n;\n    cin >> n;\n    for (int i = 1; i <= n; i++) {\n        if (i % 15 == 0) cout << "FizzBuzz\\n";\n        else if (i % 3 == 0) cout << "Fizz\\n";\n        else if (i % 5 == 0) cout << "Buzz\\n";\n        else cout << i << "\\n";\n    }'
        ),
    ),
    Spec(
        id="is_prime",
        title="Prime Test",
        tier="medium",
        legend="Decide whether the integer n is prime.",
        input_spec="One integer n (1 <= n <= 10^9).",
        output_spec="Print YES if n is prime, otherwise NO.",
        samples=["7\n", "12\n"],
        edge=["1\n", "2\n", "4\n", "999999937\n", "1000000000\n", "961748927\n", "999950884\n"],
        gen=lambda r: f"{r.randint(1, 10**9)}\n",
        py='n = int(input())\nprint("YES" if n > 1 and all(n % d for d in range(2, int(n ** 0.5) + 1)) else "NO")\n',
        cpp=cpp(
            '    long long n;\n    cin >> n;\n    bool p = n > 1;\n    for (long long d = 2; d * d <= n; d++) if (n % d == 0) { p = false; break; }\n    cout << (p ? "YES" : "NO") << endl;'
        ),
    ),
    Spec(
        id="gcd_lcm",
        title="GCD and LCM",
        tier="medium",
        legend="Given two positive integers a and b, print their greatest common divisor and least common multiple.",
        input_spec="One line with a and b (1 <= a, b <= 10^9).",
        output_spec="Print gcd(a, b) and lcm(a, b) separated by a space.",
        samples=["4 6\n", "7 13\n"],
        edge=["1 1\n", "1000000000 999999999\n", "1000000000 1000000000\n", "12 36\n"],
        gen=lambda r: f"{r.randint(1, 10**9)} {r.randint(1, 10**9)}\n",
        py="import math\na, b = map(int, input().split())\ng = math.gcd(a, b)\nprint(g, a // g * b)\n",
        cpp=cpp(
            "    long long a, b;\n    cin >> a >> b;\n    long long g = __gcd(a, b);\n    cout << g << ' ' << a / g * b << endl;"
        ),
    ),
    Spec(
        id="gcd_of_array",
        title="Common Divisor",
        tier="medium",
        legend="Print the greatest common divisor of n positive integers.",
        input_spec="The first line holds n (1 <= n <= 10^5); the second line n integers between 1 and 10^9.",
        output_spec="Print the GCD of all numbers.",
        samples=["3\n12 18 24\n", "2\n5 7\n"],
        edge=[
            "1\n1000000000\n",
            "2\n1 1\n",
            lines(5, "6 6 6 6 6"),
            lines(20000, ints([999999937] * 20000)),
        ],
        gen=lambda r: (lambda g, n: lines(n, ints(g * r.randint(1, 10**9 // g) for _ in range(n))))(
            r.randint(1, 1000), r.randint(1, 1000)
        ),
        py="import math\ninput()\nprint(math.gcd(*map(int, input().split())))\n",
        cpp=cpp(
            "    int n;\n    cin >> n;\n    long long g = 0, x;\n    for (int i = 0; i < n; i++) { cin >> x; g = __gcd(g, x); }\n    cout << g << endl;"
        ),
    ),
    Spec(
        id="fibonacci_mod",
        title="Fibonacci",
        tier="medium",
        legend="F(0) = 0, F(1) = 1 and F(i) = F(i-1) + F(i-2). Print F(n) modulo 1000000007.",
        input_spec="One integer n (0 <= n <= 10^6).",
        output_spec="Print F(n) mod 1000000007.",
        samples=["10\n", "1\n"],
        edge=["0\n", "2\n", "90\n", "1000000\n"],
        gen=lambda r: f"{r.randint(0, 10**6)}\n",
        py="a, b = 0, 1\nfor _ in range(int(input())):\n    a, b = b, (a + b) % 1000000007\nprint(a)\n",
        cpp=cpp(
            "    int n;\n    cin >> n;\n    long long a = 0, b = 1;\n    for (int i = 0; i < n; i++) { long long c = (a + b) % 1000000007; a = b; b = c; }\n    cout << a << endl;"
        ),
    ),
    Spec(
        id="digit_sum",
        title="Digit Sum",
        tier="medium",
        legend="Print the sum of the decimal digits of a (possibly very long) number.",
        input_spec="One line with a positive integer of 1 to 10^5 digits, without leading zeros.",
        output_spec="Print the sum of its digits.",
        samples=["123\n", "9999\n"],
        edge=["1\n", "10\n", "9" * 100000 + "\n", "1" + "0" * 99999 + "\n"],
        gen=lambda r: word(r, 1, "123456789") + word(r, r.randint(0, 2000), "0123456789") + "\n",
        py="print(sum(map(int, input())))\n",
        cpp=cpp(
            "    string s;\n    cin >> s;\n    long long t = 0;\n    for (char c : s) t += c - '0';\n    cout << t << endl;"
        ),
    ),
    Spec(
        id="second_max",
        title="Runner-up",
        tier="medium",
        legend="Print the second largest DISTINCT value among n integers, or -1 if all values are equal.",
        input_spec="The first line holds n (1 <= n <= 10^5); the second line n integers between 0 and 10^9.",
        output_spec="Print the second largest distinct value, or -1.",
        samples=["4\n3 1 3 2\n", "2\n5 5\n"],
        edge=["1\n7\n", "2\n0 1\n", "3\n1000000000 1000000000 0\n", "5\n4 4 4 4 3\n"],
        gen=lambda r: (lambda n: lines(n, ints(_arr(r, n, 0, r.choice([3, 10**9])))))(
            r.randint(1, 1000)
        ),
        py="v = sorted(set(map(int, open(0).read().split()[1:])))\nprint(v[-2] if len(v) > 1 else -1)\n",
        cpp=cpp(
            "    int n;\n    cin >> n;\n    set<long long> s;\n    for (int i = 0; i < n; i++) { long long x; cin >> x; s.insert(x); }\n    if (s.size() < 2) cout << -1 << endl;\n    else cout << *next(s.rbegin()) << endl;"
        ),
    ),
    Spec(
        id="count_distinct",
        title="Distinct Values",
        tier="medium",
        legend="Print how many different values occur among n integers.",
        input_spec="The first line holds n (1 <= n <= 10^5); the second line n integers between -10^9 and 10^9.",
        output_spec="Print the number of distinct values.",
        samples=["5\n1 2 2 3 1\n", "3\n7 7 7\n"],
        edge=["1\n0\n", "2\n-1 1\n", lines(20000, ints(range(20000)))],
        gen=lambda r: (
            lambda n: lines(n, ints(_arr(r, n, -r.randint(1, 50), r.randint(1, 10**9))))
        )(r.randint(1, 2000)),
        py="print(len(set(open(0).read().split()[1:])))\n",
        cpp=cpp(
            "    int n;\n    cin >> n;\n    set<long long> s;\n    for (int i = 0; i < n; i++) { long long x; cin >> x; s.insert(x); }\n    cout << s.size() << endl;"
        ),
    ),
    Spec(
        id="sort_numbers",
        title="Sorting",
        tier="medium",
        legend="Print n integers in non-decreasing order.",
        input_spec="The first line holds n (1 <= n <= 10^5); the second line n integers between -10^9 and 10^9.",
        output_spec="Print the sorted numbers on one line, separated by spaces.",
        samples=["4\n3 1 4 1\n", "1\n-2\n"],
        edge=["2\n2 1\n", "3\n0 0 0\n", lines(20000, ints(range(20000, 0, -1)))],
        gen=lambda r: (lambda n: lines(n, ints(_arr(r, n, -(10**9), 10**9))))(r.randint(1, 3000)),
        py="input()\nprint(*sorted(map(int, input().split())))\n",
        cpp=cpp(
            "    int n;\n    cin >> n;\n    vector<long long> a(n);\n    for (auto &x : a) cin >> x;\n    sort(a.begin(), a.end());\n    for (int i = 0; i < n; i++) cout << a[i] << (i + 1 < n ? ' ' : '\\n');"
        ),
    ),
    Spec(
        id="to_binary",
        title="Binary",
        tier="medium",
        legend="Print the non-negative integer n in base 2, without leading zeros.",
        input_spec="One integer n (0 <= n <= 10^18).",
        output_spec="Print n in binary.",
        samples=["5\n", "0\n"],
        edge=["1\n", "2\n", "1000000000000000000\n", "999999999999999999\n"],
        gen=lambda r: f"{r.randint(0, 10 ** r.randint(1, 18))}\n",
        py="print(bin(int(input()))[2:])\n",
        cpp=cpp(
            "    unsigned long long n;\n    cin >> n;\n    string s;\n    do { s += char('0' + n % 2); n /= 2; } while (n);\n    reverse(s.begin(), s.end());\n    cout << s << endl;"
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
        id="max_subarray",
        title="Best Segment",
        tier="medium",
        legend="Find the largest possible sum of a non-empty contiguous segment of the array.",
        input_spec="The first line holds n (1 <= n <= 10^5); the second line n integers between -10^9 and 10^9.",
        output_spec="Print the maximum segment sum.",
        samples=["5\n-2 3 -1 4 -5\n", "3\n-3 -1 -2\n"],
        edge=["1\n-1000000000\n", "1\n5\n", lines(20000, ints([10**9] * 20000)), "4\n1 -1 1 -1\n"],
        gen=lambda r: (lambda n: lines(n, ints(_arr(r, n, -100, 100))))(r.randint(1, 3000)),
        py="input()\nbest, cur = None, 0\nfor x in map(int, input().split()):\n    cur = max(x, cur + x)\n    best = cur if best is None else max(best, cur)\nprint(best)\n",
        cpp=cpp(
            "    int n;\n    cin >> n;\n    long long best = LLONG_MIN, cur = 0, x;\n    for (int i = 0; i < n; i++) { cin >> x; cur = i ? max(x, cur + x) : x; best = max(best, cur); }\n    cout << best << endl;"
        ),
    ),
    Spec(
        id="range_sums",
        title="Range Sums",
        tier="medium",
        legend="Given an array a of n integers, answer q queries: the sum a[l] + ... + a[r] (1-based, inclusive).",
        input_spec="The first line holds n and q (1 <= n, q <= 10^5). The second line holds a (|a_i| <= 10^9). Each of the next q lines holds l and r (1 <= l <= r <= n).",
        output_spec="Print the answer to each query on its own line.",
        samples=["5 3\n1 2 3 4 5\n1 5\n2 3\n4 4\n"],
        edge=["1 1\n-7\n1 1\n", lines("3 2", "1000000000 1000000000 1000000000", "1 3", "2 2")],
        gen=_ranges,
        py="import sys\nd = sys.stdin.read().split()\nn, q = int(d[0]), int(d[1])\np = [0]\nfor x in d[2:2 + n]:\n    p.append(p[-1] + int(x))\nout = []\nfor i in range(q):\n    lo, hi = int(d[2 + n + 2 * i]), int(d[3 + n + 2 * i])\n    out.append(p[hi] - p[lo - 1])\nprint(*out, sep='\\n')\n",
        cpp=cpp(
            "    ios::sync_with_stdio(false);\n    cin.tie(nullptr);\n    int n, q;\n    cin >> n >> q;\n    vector<long long> p(n + 1, 0);\n    for (int i = 1; i <= n; i++) { long long x; cin >> x; p[i] = p[i - 1] + x; }\n    while (q--) { int l, r; cin >> l >> r; cout << p[r] - p[l - 1] << '\\n'; }"
        ),
    ),
    Spec(
        id="two_sum_exists",
        title="Pair Sum",
        tier="medium",
        legend="Decide whether two elements at DIFFERENT positions of the array sum to t.",
        input_spec="The first line holds n and t (1 <= n <= 10^5, |t| <= 2*10^9); the second line n integers with |a_i| <= 10^9.",
        output_spec="Print YES or NO.",
        samples=["4 9\n2 7 11 15\n", "3 10\n5 1 2\n"],
        edge=["1 2\n1\n", "2 2\n1 1\n", "2 0\n0 1\n", "3 -2000000000\n-1000000000 5 -1000000000\n"],
        gen=_two_sum,
        py='n, t = map(int, input().split())\nseen = set()\nok = False\nfor x in map(int, input().split()):\n    if t - x in seen:\n        ok = True\n    seen.add(x)\nprint("YES" if ok else "NO")\n',
        cpp=cpp(
            '    int n;\n    long long t;\n    cin >> n >> t;\n    set<long long> s;\n    bool ok = false;\n    for (int i = 0; i < n; i++) { long long x; cin >> x; if (s.count(t - x)) ok = true; s.insert(x); }\n    cout << (ok ? "YES" : "NO") << endl;'
        ),
    ),
    Spec(
        id="transpose",
        title="Transpose",
        tier="medium",
        legend="Print the transpose of an r x c matrix.",
        input_spec="The first line holds r and c (1 <= r, c <= 100); then r lines of c integers between -1000 and 1000.",
        output_spec="Print c lines of r integers: row i of the answer is column i of the matrix.",
        samples=["2 3\n1 2 3\n4 5 6\n"],
        edge=["1 1\n5\n", "1 3\n1 2 3\n", "3 1\n1\n2\n3\n"],
        gen=lambda r: (
            lambda h, w: lines(f"{h} {w}", *(ints(_arr(r, w, -1000, 1000)) for _ in range(h)))
        )(r.randint(1, 100), r.randint(1, 100)),
        py="r, c = map(int, input().split())\nm = [input().split() for _ in range(r)]\nfor j in range(c):\n    print(*(m[i][j] for i in range(r)))\n",
        cpp=cpp(
            "    int r, c;\n    cin >> r >> c;\n    vector<vector<int>> m(r, vector<int>(c));\n    for (auto &row : m) for (auto &x : row) cin >> x;\n    for (int j = 0; j < c; j++) for (int i = 0; i < r; i++) cout << m[i][j] << (i + 1 < r ? ' ' : '\\n');"
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
    Spec(
        id="power_mod",
        title="Modular Power",
        tier="medium",
        legend="Print a to the power b, modulo m.",
        input_spec="One line with a, b, m (0 <= a <= 10^9, 0 <= b <= 10^18, 1 <= m <= 10^9).",
        output_spec="Print a^b mod m.",
        samples=["2 10 1000\n", "3 0 7\n"],
        edge=["0 0 5\n", "5 3 1\n", "1000000000 1000000000000000000 999999937\n", "0 5 7\n"],
        gen=lambda r: f"{r.randint(0, 10**9)} {r.randint(0, 10**18)} {r.randint(1, 10**9)}\n",
        py="a, b, m = map(int, input().split())\nprint(pow(a, b, m))\n",
        cpp=cpp(
            "    long long a, b, m;\n    cin >> a >> b >> m;\n    long long r = 1 % m;\n    a %= m;\n    while (b) { if (b & 1) r = r * a % m; a = a * a % m; b >>= 1; }\n    cout << r << endl;"
        ),
    ),
    Spec(
        id="count_primes",
        title="Counting Primes",
        tier="medium",
        legend="Print how many prime numbers are at most n.",
        input_spec="One integer n (1 <= n <= 10^6).",
        output_spec="Print the number of primes p <= n.",
        samples=["10\n", "1\n"],
        edge=["2\n", "3\n", "1000000\n", "999983\n"],
        gen=lambda r: f"{r.randint(1, 10**6)}\n",
        py="n = int(input())\ns = bytearray([1]) * (n + 1)\ns[0:2] = b'\\x00\\x00'[: n + 1]\nfor i in range(2, int(n ** 0.5) + 1):\n    if s[i]:\n        s[i * i :: i] = bytes(len(range(i * i, n + 1, i)))\nprint(sum(s))\n",
        cpp=cpp(
            "    int n;\n    cin >> n;\n    vector<bool> p(n + 1, true);\n    int k = 0;\n    for (int i = 2; i <= n; i++) if (p[i]) { k++; for (long long j = 1LL * i * i; j <= n; j += i) p[j] = false; }\n    cout << k << endl;"
        ),
    ),
    Spec(
        id="rotate_array",
        title="Rotation",
        tier="medium",
        legend="Rotate the array to the right by k positions: the last element moves to the front, k times.",
        input_spec="The first line holds n and k (1 <= n <= 10^5, 0 <= k <= 10^9); the second line n integers.",
        output_spec="Print the rotated array on one line.",
        samples=["5 2\n1 2 3 4 5\n", "3 3\n7 8 9\n"],
        edge=["1 1000000000\n5\n", "2 1\n1 2\n", "4 0\n4 3 2 1\n"],
        gen=lambda r: (lambda n: lines(f"{n} {r.randint(0, 10**9)}", ints(_arr(r, n, -99, 99))))(
            r.randint(1, 500)
        ),
        py="n, k = map(int, input().split())\na = input().split()\nk %= n\nprint(*(a[n - k:] + a[:n - k]))\n",
        cpp=cpp(
            "    long long n, k;\n    cin >> n >> k;\n    vector<long long> a(n);\n    for (auto &x : a) cin >> x;\n    k %= n;\n    rotate(a.begin(), a.begin() + (n - k) % n, a.end());\n    for (int i = 0; i < n; i++) cout << a[i] << (i + 1 < n ? ' ' : '\\n');"
        ),
    ),
    Spec(
        id="triangle_type",
        title="Triangles",
        tier="medium",
        legend="Given three side lengths, decide what kind of triangle they form. A triangle needs each side to be strictly shorter than the sum of the other two.",
        input_spec="One line with three integers a, b, c (1 <= a, b, c <= 10^9).",
        output_spec="Print NO if they do not form a triangle, otherwise EQUILATERAL (all equal), ISOSCELES (exactly two equal) or SCALENE.",
        samples=["3 4 5\n", "1 1 3\n"],
        edge=["2 2 2\n", "2 2 3\n", "1 2 3\n", "1000000000 1000000000 1000000000\n", "5 3 5\n"],
        gen=lambda r: ints(r.randint(1, 6) for _ in range(3)) + "\n",
        py='a, b, c = sorted(map(int, input().split()))\nif a + b <= c:\n    print("NO")\nelif a == c:\n    print("EQUILATERAL")\nelif a == b or b == c:\n    print("ISOSCELES")\nelse:\n    print("SCALENE")\n',
        cpp=cpp(
            '    long long v[3];\n    cin >> v[0] >> v[1] >> v[2];\n    sort(v, v + 3);\n    if (v[0] + v[1] <= v[2]) cout << "NO";\n    else if (v[0] == v[2]) cout << "EQUILATERAL";\n    else if (v[0] == v[1] || v[1] == v[2]) cout << "ISOSCELES";\n    else cout << "SCALENE";\n    cout << endl;'
        ),
    ),
    Spec(
        id="grid_paths",
        title="Grid Walk",
        tier="medium",
        legend="A robot starts at the top-left cell of an h x w grid and moves only right or down to the bottom-right cell. Cells marked # are blocked. Count the paths modulo 1000000007.",
        input_spec="The first line holds h and w (1 <= h, w <= 200); then h lines of w characters . or #.",
        output_spec="Print the number of paths modulo 1000000007 (0 if the start or end is blocked).",
        samples=["2 2\n..\n..\n", "3 3\n...\n.#.\n...\n"],
        edge=["1 1\n.\n", "1 1\n#\n", "2 2\n.#\n#.\n", lines("200 200", *(["." * 200] * 200))],
        gen=lambda r: _grid(r, r.randint(1, 60), r.randint(1, 60), r.random() * 0.3),
        py="h, w = map(int, input().split())\ng = [input() for _ in range(h)]\ndp = [0] * w\ndp[0] = 1\nfor i in range(h):\n    for j in range(w):\n        if g[i][j] == '#':\n            dp[j] = 0\n        elif j:\n            dp[j] = (dp[j] + dp[j - 1]) % 1000000007\nprint(dp[-1])\n",
        cpp=cpp(
            "    int h, w;\n    cin >> h >> w;\n    vector<string> g(h);\n    for (auto &s : g) cin >> s;\n    vector<long long> dp(w, 0);\n    dp[0] = 1;\n    for (int i = 0; i < h; i++) for (int j = 0; j < w; j++) {\n        if (g[i][j] == '#') dp[j] = 0;\n        else if (j) dp[j] = (dp[j] + dp[j - 1]) % 1000000007;\n    }\n    cout << dp[w - 1] << endl;"
        ),
    ),
    Spec(
        id="min_coins",
        title="Fewest Coins",
        tier="medium",
        legend="Using coins of the given values (each value may be used any number of times), pay exactly s with as few coins as possible.",
        input_spec="The first line holds n and s (1 <= n <= 50, 0 <= s <= 10^4); the second line n coin values between 1 and 10^4.",
        output_spec="Print the minimum number of coins, or -1 if s cannot be paid.",
        samples=["3 11\n1 2 5\n", "1 3\n2\n"],
        edge=["1 0\n7\n", "2 10000\n3 7\n", "1 10000\n1\n", "2 1\n2 3\n"],
        gen=lambda r: (
            lambda n: lines(
                f"{n} {r.randint(0, 10**4)}", ints(_arr(r, n, 2, r.choice([20, 10**4])))
            )
        )(r.randint(1, 50)),
        py="n, s = map(int, input().split())\ncoins = list(map(int, input().split()))\nINF = s + 1\ndp = [0] + [INF] * s\nfor c in coins:\n    for v in range(c, s + 1):\n        if dp[v - c] + 1 < dp[v]:\n            dp[v] = dp[v - c] + 1\nprint(dp[s] if dp[s] <= s else -1)\n",
        cpp=cpp(
            "    int n, s;\n    cin >> n >> s;\n    vector<int> dp(s + 1, INT_MAX);\n    dp[0] = 0;\n    for (int i = 0; i < n; i++) { int c; cin >> c; for (int v = c; v <= s; v++) if (dp[v - c] != INT_MAX) dp[v] = min(dp[v], dp[v - c] + 1); }\n    cout << (dp[s] == INT_MAX ? -1 : dp[s]) << endl;"
        ),
    ),
    Spec(
        id="lis_length",
        title="Increasing Subsequence",
        tier="medium",
        legend="Print the length of the longest strictly increasing subsequence of the array.",
        input_spec="The first line holds n (1 <= n <= 10^5); the second line n integers between -10^9 and 10^9.",
        output_spec="Print the length.",
        samples=["6\n10 9 2 5 3 7\n", "3\n5 5 5\n"],
        edge=["1\n1\n", lines(20000, ints(range(20000))), lines(20000, ints(range(20000, 0, -1)))],
        gen=lambda r: (lambda n: lines(n, ints(_arr(r, n, -50, r.choice([50, 10**9])))))(
            r.randint(1, 3000)
        ),
        py="import bisect\ninput()\nt = []\nfor x in map(int, input().split()):\n    i = bisect.bisect_left(t, x)\n    t[i:i + 1] = [x]\nprint(len(t))\n",
        cpp=cpp(
            "    int n;\n    cin >> n;\n    vector<long long> t;\n    for (int i = 0; i < n; i++) { long long x; cin >> x; auto it = lower_bound(t.begin(), t.end(), x); if (it == t.end()) t.push_back(x); else *it = x; }\n    cout << t.size() << endl;"
        ),
    ),
    Spec(
        id="knapsack",
        title="Backpack",
        tier="medium",
        legend="There are n items, item i has weight w_i and value v_i. Choose items of total weight at most W with the largest total value. Each item can be taken at most once.",
        input_spec="The first line holds n and W (1 <= n <= 50, 1 <= W <= 5000); then n lines with w_i and v_i (1 <= w_i <= 1000, 1 <= v_i <= 10^6).",
        output_spec="Print the largest total value.",
        samples=["3 5\n2 3\n3 4\n4 5\n", "1 1\n2 10\n"],
        edge=["1 1000\n1000 7\n", "2 1\n1 5\n1 6\n", lines("50 5000", *(["100 1000000"] * 50))],
        gen=_knap,
        py="n, W = map(int, input().split())\ndp = [0] * (W + 1)\nfor _ in range(n):\n    w, v = map(int, input().split())\n    for c in range(W, w - 1, -1):\n        if dp[c - w] + v > dp[c]:\n            dp[c] = dp[c - w] + v\nprint(dp[W])\n",
        cpp=cpp(
            "    int n, W;\n    cin >> n >> W;\n    vector<long long> dp(W + 1, 0);\n    for (int i = 0; i < n; i++) { int w; long long v; cin >> w >> v; for (int c = W; c >= w; c--) dp[c] = max(dp[c], dp[c - w] + v); }\n    cout << dp[W] << endl;"
        ),
    ),
    Spec(
        id="shortest_path_bfs",
        title="Hops",
        tier="medium",
        legend="An undirected graph has n vertices and m edges. Print the smallest number of edges on a path from vertex 1 to vertex n.",
        input_spec="The first line holds n and m (1 <= n <= 10^5, 0 <= m <= 10^5); then m lines with edges u v (1 <= u, v <= n).",
        output_spec="Print the distance, or -1 if n cannot be reached from 1.",
        samples=["4 4\n1 2\n2 3\n3 4\n1 3\n", "3 1\n1 2\n"],
        edge=[
            "1 0\n",
            "2 0\n",
            "2 1\n2 2\n",
            lines("20000 19999", *(f"{i} {i + 1}" for i in range(1, 20000))),
        ],
        gen=lambda r: (lambda n: _graph(r, n, r.randint(0, 2 * n)))(r.randint(2, 300)),
        py="import sys\nfrom collections import deque\nd = sys.stdin.read().split()\nn, m = int(d[0]), int(d[1])\ng = [[] for _ in range(n + 1)]\nfor i in range(m):\n    u, v = int(d[2 + 2 * i]), int(d[3 + 2 * i])\n    g[u].append(v)\n    g[v].append(u)\ndist = [-1] * (n + 1)\ndist[1] = 0\nq = deque([1])\nwhile q:\n    u = q.popleft()\n    for v in g[u]:\n        if dist[v] < 0:\n            dist[v] = dist[u] + 1\n            q.append(v)\nprint(dist[n])\n",
        cpp=cpp(
            "    int n, m;\n    cin >> n >> m;\n    vector<vector<int>> g(n + 1);\n    for (int i = 0; i < m; i++) { int u, v; cin >> u >> v; g[u].push_back(v); g[v].push_back(u); }\n    vector<int> d(n + 1, -1);\n    queue<int> q;\n    d[1] = 0;\n    q.push(1);\n    while (!q.empty()) { int u = q.front(); q.pop(); for (int v : g[u]) if (d[v] < 0) { d[v] = d[u] + 1; q.push(v); } }\n    cout << d[n] << endl;"
        ),
    ),
    Spec(
        id="count_components",
        title="Islands of Friends",
        tier="medium",
        legend="An undirected graph has n vertices and m edges. Print the number of connected components.",
        input_spec="The first line holds n and m (1 <= n <= 10^5, 0 <= m <= 10^5); then m lines with edges u v.",
        output_spec="Print the number of connected components.",
        samples=["5 2\n1 2\n3 4\n", "3 3\n1 2\n2 3\n3 1\n"],
        edge=[
            "1 0\n",
            "100000 0\n",
            "2 1\n1 1\n",
            lines("20000 19999", *(f"{i} {i + 1}" for i in range(1, 20000))),
        ],
        gen=lambda r: (lambda n: _graph(r, n, r.randint(0, n)))(r.randint(1, 500)),
        py="import sys\nd = sys.stdin.read().split()\nn, m = int(d[0]), int(d[1])\np = list(range(n + 1))\ndef find(x):\n    while p[x] != x:\n        p[x] = p[p[x]]\n        x = p[x]\n    return x\nc = n\nfor i in range(m):\n    a, b = find(int(d[2 + 2 * i])), find(int(d[3 + 2 * i]))\n    if a != b:\n        p[a] = b\n        c -= 1\nprint(c)\n",
        cpp=CPP_DSU,
    ),
    Spec(
        id="dijkstra",
        title="Cheapest Route",
        tier="medium",
        legend="An undirected graph has n vertices and m weighted edges. Print the length of the shortest path from vertex 1 to vertex n.",
        input_spec="The first line holds n and m (1 <= n <= 10^5, 0 <= m <= 10^5); then m lines u v w (1 <= w <= 10^9).",
        output_spec="Print the shortest distance, or -1 if n is unreachable.",
        samples=["3 3\n1 2 1\n2 3 1\n1 3 5\n", "2 0\n"],
        edge=[
            "1 0\n",
            "2 1\n1 2 1000000000\n",
            lines("20000 19999", *(f"{i} {i + 1} 1000000000" for i in range(1, 20000))),
        ],
        gen=lambda r: (lambda n: _graph(r, n, r.randint(0, 3 * n), weighted=True))(
            r.randint(2, 300)
        ),
        py="import sys, heapq\nd = sys.stdin.read().split()\nn, m = int(d[0]), int(d[1])\ng = [[] for _ in range(n + 1)]\nfor i in range(m):\n    u, v, w = int(d[2 + 3 * i]), int(d[3 + 3 * i]), int(d[4 + 3 * i])\n    g[u].append((v, w))\n    g[v].append((u, w))\nINF = float('inf')\ndist = [INF] * (n + 1)\ndist[1] = 0\nh = [(0, 1)]\nwhile h:\n    du, u = heapq.heappop(h)\n    if du > dist[u]:\n        continue\n    for v, w in g[u]:\n        if du + w < dist[v]:\n            dist[v] = du + w\n            heapq.heappush(h, (dist[v], v))\nprint(dist[n] if dist[n] < INF else -1)\n",
        cpp=cpp(
            "    int n, m;\n    cin >> n >> m;\n    vector<vector<pair<int, long long>>> g(n + 1);\n    for (int i = 0; i < m; i++) { int u, v; long long w; cin >> u >> v >> w; g[u].push_back({v, w}); g[v].push_back({u, w}); }\n    vector<long long> d(n + 1, LLONG_MAX);\n    priority_queue<pair<long long, int>, vector<pair<long long, int>>, greater<>> pq;\n    d[1] = 0;\n    pq.push({0, 1});\n    while (!pq.empty()) {\n        auto [du, u] = pq.top(); pq.pop();\n        if (du > d[u]) continue;\n        for (auto [v, w] : g[u]) if (du + w < d[v]) { d[v] = du + w; pq.push({d[v], v}); }\n    }\n    cout << (d[n] == LLONG_MAX ? -1 : d[n]) << endl;"
        ),
    ),
]
