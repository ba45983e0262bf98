import sys


def main():
    n = int(open(sys.argv[1]).read().split()[0])
    out = open(sys.argv[2]).read().split()
    ans = open(sys.argv[3]).read().split()
    if ans[0] == "-1":
        return out == ["-1"]
    if len(out) != 1:
        return False
    d = int(out[0])
    return 1 < d < n and n % d == 0


try:
    ok = main()
except Exception:
    ok = False
sys.exit(0 if ok else 1)
