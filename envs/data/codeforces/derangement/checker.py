import sys


def main():
    n = int(open(sys.argv[1]).read().split()[0])
    out = open(sys.argv[2]).read().split()
    ans = open(sys.argv[3]).read().split()
    if ans[0] == "-1":
        return out == ["-1"]
    p = [int(x) for x in out]
    return sorted(p) == list(range(1, n + 1)) and all(p[i] != i + 1 for i in range(n))


try:
    ok = main()
except Exception:
    ok = False
sys.exit(0 if ok else 1)
