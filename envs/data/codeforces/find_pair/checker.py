import sys


def main():
    inp = open(sys.argv[1]).read().split()
    out = open(sys.argv[2]).read().split()
    ans = open(sys.argv[3]).read().split()
    n, t = int(inp[0]), int(inp[1])
    a = [int(x) for x in inp[2 : 2 + n]]
    if ans[0] == "-1":
        return out == ["-1"]
    if len(out) != 2:
        return False
    i, j = int(out[0]), int(out[1])
    return 1 <= i < j <= n and a[i - 1] + a[j - 1] == t


try:
    ok = main()
except Exception:
    ok = False
sys.exit(0 if ok else 1)
