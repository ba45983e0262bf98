input()
print(min(map(int, input().split())))
