"""The medium tier, dynamic programming and graphs: grid paths, coins, LIS, knapsack, BFS, DSU,
Dijkstra."""

from __future__ import annotations

from .spec import Spec, ints, lines
from .specs_easy import CPP_HEAD, cpp
from .specs_medium_arrays import _arr


def _grid(r, h, w, p_block=0.2):
    rows = ["".join("#" if r.random() < p_block else "." for _ in range(w)) for _ in range(h)]
    return lines(f"{h} {w}", *rows)


def _knap(r):
    n, w = r.randint(1, 50), r.randint(1, 5000)
    items = [f"{r.randint(1, 1000)} {r.randint(1, 10**6)}" for _ in range(n)]
    return lines(f"{n} {w}", *items)


def _graph(r, n, m, weighted=False, wmax=1000):
    edges = []
    for _ in range(m):
        u, v = r.randint(1, n), r.randint(1, n)
        edges.append(f"{u} {v} {r.randint(1, wmax)}" if weighted else f"{u} {v}")
    return lines(f"{n} {m}", *edges) if edges else lines(f"{n} {m}")


CPP_DSU = (
    CPP_HEAD
    + "vector<int> p;\nint find(int x) { while (p[x] != x) { p[x] = p[p[x]]; x = p[x]; } return x; }\nint main() {\n    int n, m;\n    cin >> n >> m;\n    p.resize(n + 1);\n    iota(p.begin(), p.end(), 0);\n    int c = n;\n    for (int i = 0; i < m; i++) { int a, b; cin >> a >> b; a = find(a); b = find(b); if (a != b) { p[a] = b; c--; } }\n    cout << c << endl;\n    return 0;\n}\n"
)


DP_GRAPHS = [
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
