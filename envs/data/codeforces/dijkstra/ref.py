import heapq
import sys

d = sys.stdin.read().split()
n, m = int(d[0]), int(d[1])
g = [[] for _ in range(n + 1)]
for i in range(m):
    u, v, w = int(d[2 + 3 * i]), int(d[3 + 3 * i]), int(d[4 + 3 * i])
    g[u].append((v, w))
    g[v].append((u, w))
INF = float("inf")
dist = [INF] * (n + 1)
dist[1] = 0
h = [(0, 1)]
while h:
    du, u = heapq.heappop(h)
    if du > dist[u]:
        continue
    for v, w in g[u]:
        if du + w < dist[v]:
            dist[v] = du + w
            heapq.heappush(h, (dist[v], v))
print(dist[n] if dist[n] < INF else -1)
