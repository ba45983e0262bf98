#include <bits/stdc++.h>
using namespace std;
int main() {
    string s;
    cin >> s;
    string t(s.rbegin(), s.rend());
    cout << (s == t ? "YES" : "NO") << endl;
    return 0;
}
