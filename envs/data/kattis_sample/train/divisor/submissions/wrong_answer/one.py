input()
print(1)
