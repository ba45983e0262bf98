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
    vector<bool> p(n + 1, true);
    int k = 0;
    for (int i = 2; i <= n; i++) if (p[i]) { k++; for (long long j = 1LL * i * i; j <= n; j += i) p[j] = false; }
    cout << k << endl;
    return 0;
}
