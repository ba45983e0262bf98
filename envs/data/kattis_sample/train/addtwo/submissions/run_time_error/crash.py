a, b = map(int, input().split())
raise SystemExit(a + b != 3 or 1)
