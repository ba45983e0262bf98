#include <iostream>
int main() { long long n; std::cin >> n; for (long long d = 2; d * d <= n; ++d) if (n % d == 0) { std::cout << d << std::endl; return 0; } std::cout << "none" << std::endl; }
