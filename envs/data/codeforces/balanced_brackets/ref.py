s, st = input(), []
ok = True
for c in s:
    if c in "([{":
        st.append(c)
    elif not st or st.pop() + c not in ("()", "[]", "{}"):
        ok = False
        break
print("YES" if ok and not st else "NO")
