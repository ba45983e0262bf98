input()
best, cur = None, 0
for x in map(int, input().split()):
    cur = max(x, cur + x)
    best = cur if best is None else max(best, cur)
print(best)
