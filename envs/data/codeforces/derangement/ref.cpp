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
    int n;
    cin >> n;
    if (n == 1) { cout << -1 << endl; return 0; }
    vector<int> p(n + 1);
    iota(p.begin(), p.end(), 0);
    for (int i = 1; i + 1 <= n; i += 2) swap(p[i], p[i + 1]);
    if (n % 2) swap(p[n], p[n - 1]);
    for (int i = 1; i <= n; i++) cout << p[i] << (i < n ? ' ' : '\n');
    return 0;
}
