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
    long long k;
    cin >> s >> k;
    for (char &c : s) c = 'a' + (c - 'a' + k) % 26;
    cout << s << endl;
    return 0;
}
