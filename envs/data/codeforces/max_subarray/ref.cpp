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
    long long best = LLONG_MIN, cur = 0, x;
    for (int i = 0; i < n; i++) { cin >> x; cur = i ? max(x, cur + x) : x; best = max(best, cur); }
    cout << best << endl;
    return 0;
}
