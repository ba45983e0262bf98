import math

input()
print(math.gcd(*map(int, input().split())))
