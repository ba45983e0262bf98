print(len(input()))
