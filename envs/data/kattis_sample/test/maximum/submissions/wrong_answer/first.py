input()
print(input().split()[0])
