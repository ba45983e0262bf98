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
    string s;
    cin >> s;
    long long t = 0;
    for (char c : s) t += c - '0';
    cout << t << endl;
    return 0;
}
