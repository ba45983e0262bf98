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
    vector<long long> a(n);
    for (auto &x : a) cin >> x;
    map<long long, int> last;
    for (int i = n - 1; i >= 0; i--) {
        if (last.count(t - a[i])) { cout << i + 1 << ' ' << last[t - a[i]] << endl; return 0; }
        last[a[i]] = i + 1;
    }
    cout << -1 << endl;
    return 0;
}
