#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <numeric>
#include <queue>
#include <set>
#include <string>
#include <vector>
using namespace std;
int main() {
    long long n;
    cin >> n;
    bool p = n > 1;
    for (long long d = 2; d * d <= n; d++) if (n % d == 0) { p = false; break; }
    cout << (p ? "YES" : "NO") << endl;
    return 0;
}
