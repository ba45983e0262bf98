print(f"{int(input()) / 2:.9f}")
