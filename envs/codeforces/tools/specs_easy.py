"""The very easy tier: one-liners a ~2M-parameter model trained on CPU can learn."""

from __future__ import annotations

from .spec import Spec, ints, lines, word

# Explicit headers: <bits/stdc++.h> triples the compile time of every judged reference.
CPP_HEAD = (
    "".join(
        f"#include <{h}>\n"
        for h in (
            "algorithm",
            "cctype",
            "climits",
            "cmath",
            "cstdio",
            "iostream",
            "map",
            "numeric",
            "queue",
            "set",
            "string",
            "vector",
        )
    )
    + "using namespace std;\n"
)


def cpp(body: str) -> str:
    return CPP_HEAD + "int main() {\n" + body.strip("\n") + "\n    return 0;\n}\n"


def _list_input(rng, lo=-1000, hi=1000, nmax=100):
    n = rng.randint(1, nmax)
    return lines(n, ints(rng.randint(lo, hi) for _ in range(n)))


SPECS = [
    Spec(
        id="a_plus_b",
        title="A+B",
        tier="easy",
        legend="Given two integers a and b, print their sum.",
        input_spec="One line with two integers a and b (-10^9 <= a, b <= 10^9).",
        output_spec="Print a + b.",
        samples=["1 2\n", "-5 3\n"],
        edge=["0 0\n", "1000000000 1000000000\n", "-1000000000 -1000000000\n", "-7 7\n"],
        gen=lambda r: f"{r.randint(-(10**9), 10**9)} {r.randint(-(10**9), 10**9)}\n",
        py="a, b = map(int, input().split())\nprint(a + b)\n",
        cpp=cpp("    long long a, b;\n    cin >> a >> b;\n    cout << a + b << endl;"),
    ),
    Spec(
        id="a_minus_b",
        title="A-B",
        tier="easy",
        legend="Given two integers a and b, print a minus b.",
        input_spec="One line with two integers a and b (-10^9 <= a, b <= 10^9).",
        output_spec="Print a - b.",
        samples=["5 3\n", "2 10\n"],
        edge=["0 0\n", "1000000000 -1000000000\n", "-1000000000 1000000000\n", "4 4\n"],
        gen=lambda r: f"{r.randint(-(10**9), 10**9)} {r.randint(-(10**9), 10**9)}\n",
        py="a, b = map(int, input().split())\nprint(a - b)\n",
        cpp=cpp("    long long a, b;\n    cin >> a >> b;\n    cout << a - b << endl;"),
    ),
    Spec(
        id="multiply",
        title="Product",
        tier="easy",
        legend="Given two integers a and b, print their product.",
        input_spec="One line with two integers a and b (-10^9 <= a, b <= 10^9).",
        output_spec="Print a * b.",
        samples=["3 4\n", "-2 5\n"],
        edge=["0 123\n", "1000000000 1000000000\n", "-1000000000 1000000000\n", "1 -1\n"],
        gen=lambda r: f"{r.randint(-(10**9), 10**9)} {r.randint(-(10**9), 10**9)}\n",
        py="a, b = map(int, input().split())\nprint(a * b)\n",
        cpp=cpp("    long long a, b;\n    cin >> a >> b;\n    cout << a * b << endl;"),
    ),
    Spec(
        id="max_of_two",
        title="The Larger One",
        tier="easy",
        legend="Given two integers a and b, print the larger of them.",
        input_spec="One line with two integers a and b (-10^9 <= a, b <= 10^9).",
        output_spec="Print max(a, b).",
        samples=["3 7\n", "-1 -5\n"],
        edge=["5 5\n", "-1000000000 1000000000\n", "1000000000 -1000000000\n", "0 -1\n"],
        gen=lambda r: f"{r.randint(-(10**9), 10**9)} {r.randint(-(10**9), 10**9)}\n",
        py="a, b = map(int, input().split())\nprint(max(a, b))\n",
        cpp=cpp("    long long a, b;\n    cin >> a >> b;\n    cout << max(a, b) << endl;"),
    ),
    Spec(
        id="max_of_three",
        title="Largest of Three",
        tier="easy",
        legend="Given three integers, print the largest of them.",
        input_spec="One line with three integers a, b, c (-10^9 <= a, b, c <= 10^9).",
        output_spec="Print the largest of the three.",
        samples=["1 5 3\n", "-4 -2 -9\n"],
        edge=["7 7 7\n", "1 2 3\n", "3 2 1\n", "-1000000000 -1000000000 -999999999\n"],
        gen=lambda r: ints(r.randint(-(10**9), 10**9) for _ in range(3)) + "\n",
        py="print(max(map(int, input().split())))\n",
        cpp=cpp(
            "    long long a, b, c;\n    cin >> a >> b >> c;\n    cout << max({a, b, c}) << endl;"
        ),
    ),
    Spec(
        id="square",
        title="Square It",
        tier="easy",
        legend="Given an integer n, print n squared.",
        input_spec="One integer n (-10^9 <= n <= 10^9).",
        output_spec="Print n * n.",
        samples=["4\n", "-3\n"],
        edge=["0\n", "1\n", "1000000000\n", "-1000000000\n"],
        gen=lambda r: f"{r.randint(-(10**9), 10**9)}\n",
        py="n = int(input())\nprint(n * n)\n",
        cpp=cpp("    long long n;\n    cin >> n;\n    cout << n * n << endl;"),
    ),
    Spec(
        id="even_or_odd",
        title="Even or Odd",
        tier="easy",
        legend="Given an integer n, print EVEN if it is even and ODD otherwise.",
        input_spec="One integer n (-10^9 <= n <= 10^9).",
        output_spec="Print EVEN or ODD.",
        samples=["4\n", "7\n"],
        edge=["0\n", "-1\n", "-2\n", "1000000000\n", "999999999\n"],
        gen=lambda r: f"{r.randint(-(10**9), 10**9)}\n",
        py='n = int(input())\nprint("EVEN" if n % 2 == 0 else "ODD")\n',
        cpp=cpp(
            '    long long n;\n    cin >> n;\n    cout << (n % 2 == 0 ? "EVEN" : "ODD") << endl;'
        ),
    ),
    Spec(
        id="sign",
        title="Sign",
        tier="easy",
        legend="Given an integer n, print positive, negative or zero.",
        input_spec="One integer n (-10^9 <= n <= 10^9).",
        output_spec="Print positive if n > 0, negative if n < 0, and zero if n = 0.",
        samples=["5\n", "0\n"],
        edge=["-1\n", "1\n", "-1000000000\n", "1000000000\n"],
        gen=lambda r: f"{r.randint(-(10**9), 10**9)}\n",
        py='n = int(input())\nprint("positive" if n > 0 else "negative" if n < 0 else "zero")\n',
        cpp=cpp(
            '    long long n;\n    cin >> n;\n    cout << (n > 0 ? "positive" : n < 0 ? "negative" : "zero") << endl;'
        ),
    ),
    Spec(
        id="reverse_string",
        title="Reverse",
        tier="easy",
        legend="Given a string s, print it reversed.",
        input_spec="One line with a string s of 1 to 100 lowercase letters.",
        output_spec="Print s reversed.",
        samples=["hello\n", "abc\n"],
        edge=["a\n", "racecar\n", "ab\n", "z" * 100 + "\n"],
        gen=lambda r: word(r, r.randint(1, 100)) + "\n",
        py="print(input()[::-1])\n",
        cpp=cpp(
            "    string s;\n    cin >> s;\n    reverse(s.begin(), s.end());\n    cout << s << endl;"
        ),
    ),
    Spec(
        id="string_length",
        title="Length",
        tier="easy",
        legend="Given a string s, print its length.",
        input_spec="One line with a string s of 1 to 1000 lowercase letters.",
        output_spec="Print the number of characters in s.",
        samples=["hello\n", "a\n"],
        edge=["z\n", "ab\n", "q" * 1000 + "\n"],
        gen=lambda r: word(r, r.randint(1, 1000)) + "\n",
        py="print(len(input()))\n",
        cpp=cpp("    string s;\n    cin >> s;\n    cout << s.size() << endl;"),
    ),
    Spec(
        id="uppercase",
        title="Shout",
        tier="easy",
        legend="Given a string s of lowercase letters, print it in uppercase.",
        input_spec="One line with a string s of 1 to 100 lowercase letters.",
        output_spec="Print s with every letter in uppercase.",
        samples=["hello\n", "abc\n"],
        edge=["a\n", "z\n", "abcdefghijklmnopqrstuvwxyz\n"],
        gen=lambda r: word(r, r.randint(1, 100)) + "\n",
        py="print(input().upper())\n",
        cpp=cpp(
            "    string s;\n    cin >> s;\n    for (char &c : s) c = toupper(c);\n    cout << s << endl;"
        ),
    ),
    Spec(
        id="hello_name",
        title="Greeting",
        tier="easy",
        legend="Given a name, greet it: print Hello, NAME! where NAME is the given name.",
        input_spec="One line with a name of 1 to 20 letters.",
        output_spec="Print Hello, NAME!",
        samples=["Alice\n", "bob\n"],
        edge=["X\n", "Abcdefghijklmnopqrst\n", "zz\n"],
        gen=lambda r: word(r, 1, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") + word(r, r.randint(0, 19)) + "\n",
        py='print("Hello, " + input() + "!")\n',
        cpp=cpp('    string s;\n    cin >> s;\n    cout << "Hello, " << s << "!" << endl;'),
    ),
    Spec(
        id="count_vowels",
        title="Vowels",
        tier="easy",
        legend="Given a string of lowercase letters, count its vowels (a, e, i, o, u).",
        input_spec="One line with a string s of 1 to 1000 lowercase letters.",
        output_spec="Print the number of vowels in s.",
        samples=["hello\n", "rhythm\n"],
        edge=["a\n", "b\n", "aeiou\n", "u" * 1000 + "\n"],
        gen=lambda r: word(r, r.randint(1, 1000)) + "\n",
        py='print(sum(c in "aeiou" for c in input()))\n',
        cpp=cpp(
            '    string s;\n    cin >> s;\n    int k = 0;\n    for (char c : s) k += string("aeiou").find(c) != string::npos;\n    cout << k << endl;'
        ),
    ),
    Spec(
        id="count_char",
        title="Count the Letter",
        tier="easy",
        legend="Given a string s and a letter c, print how many times c occurs in s.",
        input_spec="The first line holds s (1 to 1000 lowercase letters), the second line the letter c.",
        output_spec="Print the number of occurrences of c in s.",
        samples=["banana\na\n", "hello\nz\n"],
        edge=["a\na\n", "a\nb\n", "b" * 1000 + "\nb\n"],
        gen=lambda r: word(r, r.randint(1, 1000), "abcd") + "\n" + word(r, 1, "abcde") + "\n",
        py="s = input()\nprint(s.count(input()))\n",
        cpp=cpp(
            "    string s;\n    char c;\n    cin >> s >> c;\n    cout << count(s.begin(), s.end(), c) << endl;"
        ),
    ),
    Spec(
        id="sum_list",
        title="Sum of a List",
        tier="easy",
        legend="Given n integers, print their sum.",
        input_spec="The first line holds n (1 <= n <= 1000). The second line holds n integers, each between -10^6 and 10^6.",
        output_spec="Print the sum.",
        samples=["3\n1 2 3\n", "2\n-5 5\n"],
        edge=[
            "1\n0\n",
            "1\n-1000000\n",
            lines(1000, ints([10**6] * 1000)),
            lines(1000, ints([-(10**6)] * 1000)),
        ],
        gen=lambda r: _list_input(r, -(10**6), 10**6, 1000),
        py="input()\nprint(sum(map(int, input().split())))\n",
        cpp=cpp(
            "    int n;\n    cin >> n;\n    long long s = 0, x;\n    for (int i = 0; i < n; i++) { cin >> x; s += x; }\n    cout << s << endl;"
        ),
    ),
    Spec(
        id="min_of_list",
        title="Minimum",
        tier="easy",
        legend="Given n integers, print the smallest of them.",
        input_spec="The first line holds n (1 <= n <= 1000). The second line holds n integers, each between -10^9 and 10^9.",
        output_spec="Print the minimum.",
        samples=["3\n4 1 7\n", "2\n-5 -9\n"],
        edge=["1\n42\n", "3\n5 5 5\n", lines(5, "1000000000 -1000000000 0 1 2")],
        gen=lambda r: _list_input(r, -(10**9), 10**9, 1000),
        py="input()\nprint(min(map(int, input().split())))\n",
        cpp=cpp(
            "    int n;\n    cin >> n;\n    long long m = LLONG_MAX, x;\n    for (int i = 0; i < n; i++) { cin >> x; m = min(m, x); }\n    cout << m << endl;"
        ),
    ),
]
