n = int(input())
print("YES" if n > 1 and all(n % d for d in range(2, int(n**0.5) + 1)) else "NO")
