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
    long long t;
    cin >> n >> t;
    set<long long> s;
    bool ok = false;
    for (int i = 0; i < n; i++) { long long x; cin >> x; if (s.count(t - x)) ok = true; s.insert(x); }
    cout << (ok ? "YES" : "NO") << endl;
    return 0;
}
