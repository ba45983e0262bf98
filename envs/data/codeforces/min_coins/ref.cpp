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
    int n, s;
    cin >> n >> s;
    vector<int> dp(s + 1, INT_MAX);
    dp[0] = 0;
    for (int i = 0; i < n; i++) { int c; cin >> c; for (int v = c; v <= s; v++) if (dp[v - c] != INT_MAX) dp[v] = min(dp[v], dp[v - c] + 1); }
    cout << (dp[s] == INT_MAX ? -1 : dp[s]) << endl;
    return 0;
}
