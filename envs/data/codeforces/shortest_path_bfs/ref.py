import sys
from collections import deque

d = sys.stdin.read().split()
n, m = int(d[0]), int(d[1])
g = [[] for _ in range(n + 1)]
for i in range(m):
    u, v = int(d[2 + 2 * i]), int(d[3 + 2 * i])
    g[u].append(v)
    g[v].append(u)
dist = [-1] * (n + 1)
dist[1] = 0
q = deque([1])
while q:
    u = q.popleft()
    for v in g[u]:
        if dist[v] < 0:
            dist[v] = dist[u] + 1
            q.append(v)
print(dist[n])
