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
    long long n;
    cin >> n;
    cout << (n % 2 == 0 ? "EVEN" : "ODD") << endl;
    return 0;
}
