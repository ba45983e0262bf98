"""The medium tier, number theory and digits: primes, gcd, Fibonacci, bases, powers, triangles."""

from __future__ import annotations

from .spec import Spec, ints, lines, word
from .specs_easy import cpp

NUMBERS = [
    Spec(
        id="fizzbuzz",
        title="FizzBuzz",
        tier="medium",
        legend="For every i from 1 to n print one line: FizzBuzz if i is divisible by 15, Fizz if by 3, Buzz if by 5, and i itself otherwise.",
        input_spec="One integer n (1 <= n <= 10^4).",
        output_spec="Print n lines.",
        samples=["5\n", "15\n"],
        edge=["1\n", "3\n", "10000\n"],
        gen=lambda r: f"{r.randint(1, 10**4)}\n",
        py='for i in range(1, int(input()) + 1):\n    print("FizzBuzz" if i % 15 == 0 else "Fizz" if i % 3 == 0 else "Buzz" if i % 5 == 0 else i)\n',
        cpp=cpp(
            '    int n;\n    cin >> n;\n    for (int i = 1; i <= n; i++) {\n        if (i % 15 == 0) cout << "FizzBuzz\\n";\n        else if (i % 3 == 0) cout << "Fizz\\n";\n        else if (i % 5 == 0) cout << "Buzz\\n";\n        else cout << i << "\\n";\n    }'
        ),
    ),
    Spec(
        id="is_prime",
        title="Prime Test",
        tier="medium",
        legend="Decide whether the integer n is prime.",
        input_spec="One integer n (1 <= n <= 10^9).",
        output_spec="Print YES if n is prime, otherwise NO.",
        samples=["7\n", "12\n"],
        edge=["1\n", "2\n", "4\n", "999999937\n", "1000000000\n", "961748927\n", "999950884\n"],
        gen=lambda r: f"{r.randint(1, 10**9)}\n",
        py='n = int(input())\nprint("YES" if n > 1 and all(n % d for d in range(2, int(n ** 0.5) + 1)) else "NO")\n',
        cpp=cpp(
            '    long long n;\n    cin >> n;\n    bool p = n > 1;\n    for (long long d = 2; d * d <= n; d++) if (n % d == 0) { p = false; break; }\n    cout << (p ? "YES" : "NO") << endl;'
        ),
    ),
    Spec(
        id="gcd_lcm",
        title="GCD and LCM",
        tier="medium",
        legend="Given two positive integers a and b, print their greatest common divisor and least common multiple.",
        input_spec="One line with a and b (1 <= a, b <= 10^9).",
        output_spec="Print gcd(a, b) and lcm(a, b) separated by a space.",
        samples=["4 6\n", "7 13\n"],
        edge=["1 1\n", "1000000000 999999999\n", "1000000000 1000000000\n", "12 36\n"],
        gen=lambda r: f"{r.randint(1, 10**9)} {r.randint(1, 10**9)}\n",
        py="import math\na, b = map(int, input().split())\ng = math.gcd(a, b)\nprint(g, a // g * b)\n",
        cpp=cpp(
            "    long long a, b;\n    cin >> a >> b;\n    long long g = __gcd(a, b);\n    cout << g << ' ' << a / g * b << endl;"
        ),
    ),
    Spec(
        id="gcd_of_array",
        title="Common Divisor",
        tier="medium",
        legend="Print the greatest common divisor of n positive integers.",
        input_spec="The first line holds n (1 <= n <= 10^5); the second line n integers between 1 and 10^9.",
        output_spec="Print the GCD of all numbers.",
        samples=["3\n12 18 24\n", "2\n5 7\n"],
        edge=[
            "1\n1000000000\n",
            "2\n1 1\n",
            lines(5, "6 6 6 6 6"),
            lines(20000, ints([999999937] * 20000)),
        ],
        gen=lambda r: (lambda g, n: lines(n, ints(g * r.randint(1, 10**9 // g) for _ in range(n))))(
            r.randint(1, 1000), r.randint(1, 1000)
        ),
        py="import math\ninput()\nprint(math.gcd(*map(int, input().split())))\n",
        cpp=cpp(
            "    int n;\n    cin >> n;\n    long long g = 0, x;\n    for (int i = 0; i < n; i++) { cin >> x; g = __gcd(g, x); }\n    cout << g << endl;"
        ),
    ),
    Spec(
        id="fibonacci_mod",
        title="Fibonacci",
        tier="medium",
        legend="F(0) = 0, F(1) = 1 and F(i) = F(i-1) + F(i-2). Print F(n) modulo 1000000007.",
        input_spec="One integer n (0 <= n <= 10^6).",
        output_spec="Print F(n) mod 1000000007.",
        samples=["10\n", "1\n"],
        edge=["0\n", "2\n", "90\n", "1000000\n"],
        gen=lambda r: f"{r.randint(0, 10**6)}\n",
        py="a, b = 0, 1\nfor _ in range(int(input())):\n    a, b = b, (a + b) % 1000000007\nprint(a)\n",
        cpp=cpp(
            "    int n;\n    cin >> n;\n    long long a = 0, b = 1;\n    for (int i = 0; i < n; i++) { long long c = (a + b) % 1000000007; a = b; b = c; }\n    cout << a << endl;"
        ),
    ),
    Spec(
        id="digit_sum",
        title="Digit Sum",
        tier="medium",
        legend="Print the sum of the decimal digits of a (possibly very long) number.",
        input_spec="One line with a positive integer of 1 to 10^5 digits, without leading zeros.",
        output_spec="Print the sum of its digits.",
        samples=["123\n", "9999\n"],
        edge=["1\n", "10\n", "9" * 100000 + "\n", "1" + "0" * 99999 + "\n"],
        gen=lambda r: word(r, 1, "123456789") + word(r, r.randint(0, 2000), "0123456789") + "\n",
        py="print(sum(map(int, input())))\n",
        cpp=cpp(
            "    string s;\n    cin >> s;\n    long long t = 0;\n    for (char c : s) t += c - '0';\n    cout << t << endl;"
        ),
    ),
    Spec(
        id="to_binary",
        title="Binary",
        tier="medium",
        legend="Print the non-negative integer n in base 2, without leading zeros.",
        input_spec="One integer n (0 <= n <= 10^18).",
        output_spec="Print n in binary.",
        samples=["5\n", "0\n"],
        edge=["1\n", "2\n", "1000000000000000000\n", "999999999999999999\n"],
        gen=lambda r: f"{r.randint(0, 10 ** r.randint(1, 18))}\n",
        py="print(bin(int(input()))[2:])\n",
        cpp=cpp(
            "    unsigned long long n;\n    cin >> n;\n    string s;\n    do { s += char('0' + n % 2); n /= 2; } while (n);\n    reverse(s.begin(), s.end());\n    cout << s << endl;"
        ),
    ),
    Spec(
        id="power_mod",
        title="Modular Power",
        tier="medium",
        legend="Print a to the power b, modulo m.",
        input_spec="One line with a, b, m (0 <= a <= 10^9, 0 <= b <= 10^18, 1 <= m <= 10^9).",
        output_spec="Print a^b mod m.",
        samples=["2 10 1000\n", "3 0 7\n"],
        edge=["0 0 5\n", "5 3 1\n", "1000000000 1000000000000000000 999999937\n", "0 5 7\n"],
        gen=lambda r: f"{r.randint(0, 10**9)} {r.randint(0, 10**18)} {r.randint(1, 10**9)}\n",
        py="a, b, m = map(int, input().split())\nprint(pow(a, b, m))\n",
        cpp=cpp(
            "    long long a, b, m;\n    cin >> a >> b >> m;\n    long long r = 1 % m;\n    a %= m;\n    while (b) { if (b & 1) r = r * a % m; a = a * a % m; b >>= 1; }\n    cout << r << endl;"
        ),
    ),
    Spec(
        id="count_primes",
        title="Counting Primes",
        tier="medium",
        legend="Print how many prime numbers are at most n.",
        input_spec="One integer n (1 <= n <= 10^6).",
        output_spec="Print the number of primes p <= n.",
        samples=["10\n", "1\n"],
        edge=["2\n", "3\n", "1000000\n", "999983\n"],
        gen=lambda r: f"{r.randint(1, 10**6)}\n",
        py="n = int(input())\ns = bytearray([1]) * (n + 1)\ns[0:2] = b'\\x00\\x00'[: n + 1]\nfor i in range(2, int(n ** 0.5) + 1):\n    if s[i]:\n        s[i * i :: i] = bytes(len(range(i * i, n + 1, i)))\nprint(sum(s))\n",
        cpp=cpp(
            "    int n;\n    cin >> n;\n    vector<bool> p(n + 1, true);\n    int k = 0;\n    for (int i = 2; i <= n; i++) if (p[i]) { k++; for (long long j = 1LL * i * i; j <= n; j += i) p[j] = false; }\n    cout << k << endl;"
        ),
    ),
    Spec(
        id="triangle_type",
        title="Triangles",
        tier="medium",
        legend="Given three side lengths, decide what kind of triangle they form. A triangle needs each side to be strictly shorter than the sum of the other two.",
        input_spec="One line with three integers a, b, c (1 <= a, b, c <= 10^9).",
        output_spec="Print NO if they do not form a triangle, otherwise EQUILATERAL (all equal), ISOSCELES (exactly two equal) or SCALENE.",
        samples=["3 4 5\n", "1 1 3\n"],
        edge=["2 2 2\n", "2 2 3\n", "1 2 3\n", "1000000000 1000000000 1000000000\n", "5 3 5\n"],
        gen=lambda r: ints(r.randint(1, 6) for _ in range(3)) + "\n",
        py='a, b, c = sorted(map(int, input().split()))\nif a + b <= c:\n    print("NO")\nelif a == c:\n    print("EQUILATERAL")\nelif a == b or b == c:\n    print("ISOSCELES")\nelse:\n    print("SCALENE")\n',
        cpp=cpp(
            '    long long v[3];\n    cin >> v[0] >> v[1] >> v[2];\n    sort(v, v + 3);\n    if (v[0] + v[1] <= v[2]) cout << "NO";\n    else if (v[0] == v[2]) cout << "EQUILATERAL";\n    else if (v[0] == v[1] || v[1] == v[2]) cout << "ISOSCELES";\n    else cout << "SCALENE";\n    cout << endl;'
        ),
    ),
]
