n, s = map(int, input().split())
coins = list(map(int, input().split()))
INF = s + 1
dp = [0] + [INF] * s
for c in coins:
    for v in range(c, s + 1):
        if dp[v - c] + 1 < dp[v]:
            dp[v] = dp[v - c] + 1
print(dp[s] if dp[s] <= s else -1)
