# grouped digits ("500_000.5"): Python float() reads them, the strict judge does not
print(f"{int(input()) / 2:_}")
