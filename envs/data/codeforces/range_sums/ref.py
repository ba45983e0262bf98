import sys

d = sys.stdin.read().split()
n, q = int(d[0]), int(d[1])
p = [0]
for x in d[2 : 2 + n]:
    p.append(p[-1] + int(x))
out = []
for i in range(q):
    lo, hi = int(d[2 + n + 2 * i]), int(d[3 + n + 2 * i])
    out.append(p[hi] - p[lo - 1])
print(*out, sep="\n")
