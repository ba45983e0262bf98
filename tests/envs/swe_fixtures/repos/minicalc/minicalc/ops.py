def clamp(x, lo, hi):
    if x < lo:
        return lo
    if x > hi:
        return hi
    return x


def mean(xs):
    if not xs:
        raise ValueError("mean of an empty sequence")
    return sum(xs) / len(xs)


def running_total(xs):
    out, total = [], 0
    for x in xs:
        total += x
        out.append(total)
    return out
