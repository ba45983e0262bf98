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
    long long m = LLONG_MAX, x;
    for (int i = 0; i < n; i++) { cin >> x; m = min(m, x); }
    cout << m << endl;
    return 0;
}
