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
    long long v[3];
    cin >> v[0] >> v[1] >> v[2];
    sort(v, v + 3);
    if (v[0] + v[1] <= v[2]) cout << "NO";
    else if (v[0] == v[2]) cout << "EQUILATERAL";
    else if (v[0] == v[1] || v[1] == v[2]) cout << "ISOSCELES";
    else cout << "SCALENE";
    cout << endl;
    return 0;
}
