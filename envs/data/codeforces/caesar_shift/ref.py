s = input()
k = int(input())
print("".join(chr((ord(c) - 97 + k) % 26 + 97) for c in s))
