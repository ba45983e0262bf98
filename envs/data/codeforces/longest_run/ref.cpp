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
    int best = 1, cur = 1;
    for (size_t i = 1; i < s.size(); i++) { cur = s[i] == s[i - 1] ? cur + 1 : 1; best = max(best, cur); }
    cout << best << endl;
    return 0;
}
