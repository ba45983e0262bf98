#include <bits/stdc++.h>
using namespace std;
int main() {
    string s;
    char c;
    cin >> s >> c;
    cout << count(s.begin(), s.end(), c) << endl;
    return 0;
}
