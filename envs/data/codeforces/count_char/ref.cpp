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
    char c;
    cin >> s >> c;
    cout << count(s.begin(), s.end(), c) << endl;
    return 0;
}
