import sys

d = sys.stdin.read().split()
n, m = int(d[0]), int(d[1])
p = list(range(n + 1))


def find(x):
    while p[x] != x:
        p[x] = p[p[x]]
        x = p[x]
    return x


c = n
for i in range(m):
    a, b = find(int(d[2 + 2 * i])), find(int(d[3 + 2 * i]))
    if a != b:
        p[a] = b
        c -= 1
print(c)
