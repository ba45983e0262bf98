print(len(set(open(0).read().split()[1:])))
