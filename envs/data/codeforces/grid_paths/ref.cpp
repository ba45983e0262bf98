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
    int h, w;
    cin >> h >> w;
    vector<string> g(h);
    for (auto &s : g) cin >> s;
    vector<long long> dp(w, 0);
    dp[0] = 1;
    for (int i = 0; i < h; i++) for (int j = 0; j < w; j++) {
        if (g[i][j] == '#') dp[j] = 0;
        else if (j) dp[j] = (dp[j] + dp[j - 1]) % 1000000007;
    }
    cout << dp[w - 1] << endl;
    return 0;
}
