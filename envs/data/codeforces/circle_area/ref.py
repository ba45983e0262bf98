import math

r = int(input())
print(math.pi * r * r)
