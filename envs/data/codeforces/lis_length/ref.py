import bisect

input()
t = []
for x in map(int, input().split()):
    i = bisect.bisect_left(t, x)
    t[i : i + 1] = [x]
print(len(t))
