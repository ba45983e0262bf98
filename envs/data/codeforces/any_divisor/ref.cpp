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
    for (long long d = 2; d * d <= n; d++) if (n % d == 0) { cout << n / d << endl; return 0; }
    cout << -1 << endl;
    return 0;
}
