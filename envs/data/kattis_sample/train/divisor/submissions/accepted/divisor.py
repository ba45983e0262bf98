n = int(input())
d = next((d for d in range(2, int(n**0.5) + 1) if n % d == 0), None)
print(n // d if d else "NONE")
