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
    long long g = 0, x;
    for (int i = 0; i < n; i++) { cin >> x; g = __gcd(g, x); }
    cout << g << endl;
    return 0;
}
