s = input()
print(s.count(input()))
