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
    string s, st;
    cin >> s;
    bool ok = true;
    for (char c : s) {
        if (c == '(' || c == '[' || c == '{') st += c;
        else {
            char o = c == ')' ? '(' : c == ']' ? '[' : '{';
            if (st.empty() || st.back() != o) { ok = false; break; }
            st.pop_back();
        }
    }
    cout << (ok && st.empty() ? "YES" : "NO") << endl;
    return 0;
}
