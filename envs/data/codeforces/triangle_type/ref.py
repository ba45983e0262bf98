a, b, c = sorted(map(int, input().split()))
if a + b <= c:
    print("NO")
elif a == c:
    print("EQUILATERAL")
elif a == b or b == c:
    print("ISOSCELES")
else:
    print("SCALENE")
