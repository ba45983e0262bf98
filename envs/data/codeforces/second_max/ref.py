v = sorted(set(map(int, open(0).read().split()[1:])))
print(v[-2] if len(v) > 1 else -1)
