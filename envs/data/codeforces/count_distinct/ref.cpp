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
    set<long long> s;
    for (int i = 0; i < n; i++) { long long x; cin >> x; s.insert(x); }
    cout << s.size() << endl;
    return 0;
}
