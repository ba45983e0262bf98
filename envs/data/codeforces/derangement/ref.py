n = int(input())
print(-1 if n == 1 else " ".join(map(str, list(range(2, n + 1)) + [1])))
