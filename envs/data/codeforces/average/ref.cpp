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
    long long s = 0, x;
    for (int i = 0; i < n; i++) { cin >> x; s += x; }
    printf("%.9f\n", (double)s / n);
    return 0;
}
