n, t = map(int, input().split())
pos = {}
for j, x in enumerate(map(int, input().split()), 1):
    if t - x in pos:
        print(pos[t - x], j)
        break
    pos.setdefault(x, j)
else:
    print(-1)
