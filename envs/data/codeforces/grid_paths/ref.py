h, w = map(int, input().split())
g = [input() for _ in range(h)]
dp = [0] * w
dp[0] = 1
for i in range(h):
    for j in range(w):
        if g[i][j] == "#":
            dp[j] = 0
        elif j:
            dp[j] = (dp[j] + dp[j - 1]) % 1000000007
print(dp[-1])
