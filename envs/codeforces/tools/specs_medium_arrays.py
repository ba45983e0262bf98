"""The medium tier, arrays: maxima, distinct values, sorting, subarrays, prefix sums, rotation."""

from __future__ import annotations

from .spec import Spec, ints, lines
from .specs_easy import cpp


def _arr(r, n, lo, hi):
    return [r.randint(lo, hi) for _ in range(n)]


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


ARRAYS = [
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
]
