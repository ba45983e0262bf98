"""Problems that exact token comparison cannot judge: several valid answers (checker) or reals."""

from __future__ import annotations

from .spec import Spec, ints, lines
from .specs_easy import cpp

FLOAT = {"mode": "float", "abs_tol": 1e-6, "rel_tol": 1e-6}
CHECKER = {"mode": "checker"}

# Checkers follow the testlib argv convention: input file, contestant output, jury answer.
# Exit 0 accepts; anything else (including a crash on garbage output) is a wrong answer.
CHECK_PAIR = """import sys
def main():
    inp = open(sys.argv[1]).read().split()
    out = open(sys.argv[2]).read().split()
    ans = open(sys.argv[3]).read().split()
    n, t = int(inp[0]), int(inp[1])
    a = [int(x) for x in inp[2:2 + n]]
    if ans[0] == "-1":
        return out == ["-1"]
    if len(out) != 2:
        return False
    i, j = int(out[0]), int(out[1])
    return 1 <= i < j <= n and a[i - 1] + a[j - 1] == t
try:
    ok = main()
except Exception:
    ok = False
sys.exit(0 if ok else 1)
"""

CHECK_DERANGEMENT = """import sys
def main():
    n = int(open(sys.argv[1]).read().split()[0])
    out = open(sys.argv[2]).read().split()
    ans = open(sys.argv[3]).read().split()
    if ans[0] == "-1":
        return out == ["-1"]
    p = [int(x) for x in out]
    return sorted(p) == list(range(1, n + 1)) and all(p[i] != i + 1 for i in range(n))
try:
    ok = main()
except Exception:
    ok = False
sys.exit(0 if ok else 1)
"""

CHECK_DIVISOR = """import sys
def main():
    n = int(open(sys.argv[1]).read().split()[0])
    out = open(sys.argv[2]).read().split()
    ans = open(sys.argv[3]).read().split()
    if ans[0] == "-1":
        return out == ["-1"]
    if len(out) != 1:
        return False
    d = int(out[0])
    return 1 < d < n and n % d == 0
try:
    ok = main()
except Exception:
    ok = False
sys.exit(0 if ok else 1)
"""


def _pair_input(r):
    n = r.randint(2, 200)
    a = [r.randint(-50, 50) for _ in range(n)]
    t = a[0] + a[-1] if r.random() < 0.6 else r.randint(-200, 200)
    return lines(f"{n} {t}", ints(a))


SPECS = [
    Spec(
        id="find_pair",
        title="Find a Pair",
        tier="medium",
        legend="Find two positions i < j such that a_i + a_j = t. If several pairs exist, print any of them.",
        input_spec="The first line holds n and t (2 <= n <= 10^5, |t| <= 2*10^9); the second line n integers with |a_i| <= 10^9.",
        output_spec="Print i and j (1-based, i < j), or -1 if no such pair exists.",
        samples=["4 9\n2 7 11 15\n", "3 100\n1 2 3\n"],
        edge=["2 2\n1 1\n", "2 3\n1 1\n", "5 0\n0 0 0 0 0\n", lines("6 10", "5 5 5 5 5 5")],
        gen=_pair_input,
        py="n, t = map(int, input().split())\npos = {}\nfor j, x in enumerate(map(int, input().split()), 1):\n    if t - x in pos:\n        print(pos[t - x], j)\n        break\n    pos.setdefault(x, j)\nelse:\n    print(-1)\n",
        cpp=cpp(
            "    int n;\n    long long t;\n    cin >> n >> t;\n    vector<long long> a(n);\n    for (auto &x : a) cin >> x;\n    map<long long, int> last;\n    for (int i = n - 1; i >= 0; i--) {\n        if (last.count(t - a[i])) { cout << i + 1 << ' ' << last[t - a[i]] << endl; return 0; }\n        last[a[i]] = i + 1;\n    }\n    cout << -1 << endl;"
        ),
        judge=CHECKER,
        checker=CHECK_PAIR,
        tags=["checker"],
    ),
    Spec(
        id="derangement",
        title="Nobody at Home",
        tier="medium",
        legend="Print a permutation p of 1..n such that p_i != i for every i. If several exist, print any.",
        input_spec="One integer n (1 <= n <= 10^5).",
        output_spec="Print p_1 ... p_n on one line, or -1 if no such permutation exists.",
        samples=["3\n", "1\n"],
        edge=["2\n", "4\n", "5\n", "20000\n", "19999\n"],
        gen=lambda r: f"{r.randint(1, 2000)}\n",
        py="n = int(input())\nprint(-1 if n == 1 else ' '.join(map(str, list(range(2, n + 1)) + [1])))\n",
        cpp=cpp(
            "    int n;\n    cin >> n;\n    if (n == 1) { cout << -1 << endl; return 0; }\n    vector<int> p(n + 1);\n    iota(p.begin(), p.end(), 0);\n    for (int i = 1; i + 1 <= n; i += 2) swap(p[i], p[i + 1]);\n    if (n % 2) swap(p[n], p[n - 1]);\n    for (int i = 1; i <= n; i++) cout << p[i] << (i < n ? ' ' : '\\n');"
        ),
        judge=CHECKER,
        checker=CHECK_DERANGEMENT,
        tags=["checker"],
    ),
    Spec(
        id="any_divisor",
        title="Any Divisor",
        tier="medium",
        legend="Print any divisor d of n with 1 < d < n.",
        input_spec="One integer n (2 <= n <= 10^12).",
        output_spec="Print such a d, or -1 if there is none.",
        samples=["12\n", "13\n"],
        edge=["2\n", "4\n", "999999999989\n", "1000000000000\n", "999966000289\n"],
        gen=lambda r: f"{r.randint(2, 10 ** r.randint(2, 12))}\n",
        py="n = int(input())\nd = 2\nwhile d * d <= n and n % d:\n    d += 1\nprint(d if d * d <= n else -1)\n",
        cpp=cpp(
            "    long long n;\n    cin >> n;\n    for (long long d = 2; d * d <= n; d++) if (n % d == 0) { cout << n / d << endl; return 0; }\n    cout << -1 << endl;"
        ),
        judge=CHECKER,
        checker=CHECK_DIVISOR,
        tags=["checker"],
    ),
    Spec(
        id="circle_area",
        title="Round Garden",
        tier="easy",
        legend="Print the area of a circle of radius r. Use pi = 3.141592653589793.",
        input_spec="One integer r (1 <= r <= 10^4).",
        output_spec="Print the area. An absolute or relative error up to 1e-6 is accepted.",
        samples=["1\n", "2\n"],
        edge=["10000\n", "3\n", "7\n"],
        gen=lambda r: f"{r.randint(1, 10**4)}\n",
        py="import math\nr = int(input())\nprint(math.pi * r * r)\n",
        cpp=cpp('    double r;\n    cin >> r;\n    printf("%.9f\\n", M_PI * r * r);'),
        judge=FLOAT,
        tags=["float"],
    ),
    Spec(
        id="average",
        title="Average",
        tier="easy",
        legend="Print the arithmetic mean of n integers.",
        input_spec="The first line holds n (1 <= n <= 10^5); the second line n integers between -10^6 and 10^6.",
        output_spec="Print the mean. An absolute or relative error up to 1e-6 is accepted.",
        samples=["3\n1 2 4\n", "2\n-1 2\n"],
        edge=["1\n0\n", "1\n-1000000\n", lines(20000, ints([10**6] * 20000)), "3\n1 1 2\n"],
        gen=lambda r: (lambda n: lines(n, ints(r.randint(-(10**6), 10**6) for _ in range(n))))(
            r.randint(1, 1000)
        ),
        py="input()\na = list(map(int, input().split()))\nprint(sum(a) / len(a))\n",
        cpp=cpp(
            '    int n;\n    cin >> n;\n    long long s = 0, x;\n    for (int i = 0; i < n; i++) { cin >> x; s += x; }\n    printf("%.9f\\n", (double)s / n);'
        ),
        judge=FLOAT,
        tags=["float"],
    ),
    Spec(
        id="distance",
        title="As the Crow Flies",
        tier="medium",
        legend="Print the Euclidean distance between points (x1, y1) and (x2, y2).",
        input_spec="One line with four integers x1 y1 x2 y2 (each between -10^6 and 10^6).",
        output_spec="Print the distance. An absolute or relative error up to 1e-6 is accepted.",
        samples=["0 0 3 4\n", "1 1 1 1\n"],
        edge=["-1000000 -1000000 1000000 1000000\n", "0 0 0 1\n", "5 -3 -5 3\n"],
        gen=lambda r: ints(r.randint(-(10**6), 10**6) for _ in range(4)) + "\n",
        py="import math\nx1, y1, x2, y2 = map(int, input().split())\nprint(math.hypot(x2 - x1, y2 - y1))\n",
        cpp=cpp(
            '    double a, b, c, d;\n    cin >> a >> b >> c >> d;\n    printf("%.9f\\n", hypot(c - a, d - b));'
        ),
        judge=FLOAT,
        tags=["float"],
    ),
]
