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
    double a, b, c, d;
    cin >> a >> b >> c >> d;
    printf("%.9f\n", hypot(c - a, d - b));
    return 0;
}
