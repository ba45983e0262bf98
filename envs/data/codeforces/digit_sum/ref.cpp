#include <bits/stdc++.h>
using namespace std;
int main() {
    string s;
    cin >> s;
    long long t = 0;
    for (char c : s) t += c - '0';
    cout << t << endl;
    return 0;
}
