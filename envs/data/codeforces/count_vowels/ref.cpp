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
    int k = 0;
    for (char c : s) k += string("aeiou").find(c) != string::npos;
    cout << k << endl;
    return 0;
}
