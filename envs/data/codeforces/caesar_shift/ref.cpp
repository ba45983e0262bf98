#include <bits/stdc++.h>
using namespace std;
int main() {
    string s;
    long long k;
    cin >> s >> k;
    for (char &c : s) c = 'a' + (c - 'a' + k) % 26;
    cout << s << endl;
    return 0;
}
