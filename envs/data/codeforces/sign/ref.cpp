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
    cout << (n > 0 ? "positive" : n < 0 ? "negative" : "zero") << endl;
    return 0;
}
