n, t = map(int, input().split())
seen = set()
ok = False
for x in map(int, input().split()):
    if t - x in seen:
        ok = True
    seen.add(x)
print("YES" if ok else "NO")
